"""Review R88: ``Scheduler.breaker(key)`` took a key that is not a string (None, 123) and made a
breaker under it; every later scrape of the scheduler's Prometheus registry then raised
``TypeError`` (the breaker-state metric measures its label), so all of its metrics were lost. It
is now refused with ``InputError``, as is a key that is not valid Unicode, the rules
``ToolCall.breaker_key`` has; no breaker is made.

Real components: a ``Scheduler`` and its Prometheus registry."""

from __future__ import annotations

import pytest
from prometheus_client import generate_latest

from agentgate.errors import InputError
from agentgate.tasks import Scheduler, ToolCall


@pytest.mark.parametrize("key", [None, 123, b"tool:t", ["tool:t"]], ids=["none", "int", "bytes", "list"])
def test_a_breaker_key_that_is_not_a_string_is_refused_and_metrics_still_scrape(key: object) -> None:
    scheduler = Scheduler()
    with pytest.raises(InputError, match="a breaker key is a string, got "):
        scheduler.breaker(key)  # type: ignore[arg-type]
    assert scheduler.breakers() == []
    assert b"agentgate_tasks_breaker_state" in generate_latest(scheduler.registry)


def test_a_breaker_key_with_a_lone_surrogate_is_refused_as_tool_call_refuses_it() -> None:
    scheduler = Scheduler()
    with pytest.raises(InputError, match="is not valid Unicode"):
        ToolCall("t", breaker_key="tool:\udcff")
    with pytest.raises(InputError, match=r"breaker key .* is not valid Unicode"):
        scheduler.breaker("tool:\udcff")
    assert scheduler.breakers() == []


def test_a_string_key_still_makes_one_breaker() -> None:
    scheduler = Scheduler()
    assert scheduler.breaker("backend:gpu-1") is scheduler.breaker("backend:gpu-1")
    assert [snap.key for snap in scheduler.breakers()] == ["backend:gpu-1"]
    assert b'key="backend:gpu-1"' in generate_latest(scheduler.registry)
