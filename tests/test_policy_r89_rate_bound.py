"""Review R89: a tool's ``rate.per_second`` is at least one token in ten years (1/315360000,
agentgate/policy/_schema.py ``MIN_PER_SECOND``). Any number above 0 loaded: ``5e-324`` made the
scheduler wait an infinity of seconds for a token (``wait_s`` is ``1 / per_second``), and a call
that waited was refused saying "a token in infs"; ``1e-300``, a 301-digit number of seconds.
A ``timeout_s`` has no such bound: the scheduler takes the largest float as a deadline."""

from __future__ import annotations

import math

import pytest

from agentgate._durations import MAX_TTL_S
from agentgate.errors import PolicyError
from agentgate.gate._config import scheduler_config
from agentgate.policy import parse_policy
from agentgate.tasks import Attempt, SyncScheduler, TokenBucket, ToolCall


def _policy(tool: str) -> str:
    return f"version: 1\ntools:\n  t.x:\n    {tool}\n"


@pytest.mark.parametrize("rate", ["5e-324", "1e-300", "3.17e-9"])
def test_a_rate_slower_than_a_token_in_ten_years_is_refused_at_its_line(rate: str) -> None:
    with pytest.raises(PolicyError) as refused:
        parse_policy(_policy(f"rate: {{per_second: {rate}}}"), source="p.yaml")
    assert (refused.value.line, refused.value.column) == (4, 24)
    assert "per_second must be at least 1/315360000 (a token every ten years" in refused.value.message


def test_the_slowest_rate_that_loads_waits_at_most_ten_years_for_a_token() -> None:
    policy = parse_policy(_policy("rate: {per_second: 3.1709791983764586e-09}"), source="p.yaml")
    rate = scheduler_config(policy).tools["t.x"].rate
    assert rate is not None and rate.per_second == 1 / MAX_TTL_S
    now = [0.0]
    bucket = TokenBucket(rate.per_second, rate.burst, clock=lambda: now[0])
    assert bucket.try_take() and not bucket.try_take()
    assert math.isfinite(bucket.wait_s()) and bucket.wait_s() <= MAX_TTL_S * (1 + 1e-9)


def test_the_longest_timeout_a_policy_holds_runs_a_call() -> None:
    policy = parse_policy(_policy("timeout_s: 1.7976931348623157e+308"), source="p.yaml")
    with SyncScheduler(scheduler_config(policy)) as scheduler:

        def deadline(attempt: Attempt) -> float | None:
            return attempt.deadline

        assert scheduler.submit(ToolCall("t.x"), deadline) == 1.7976931348623157e308
