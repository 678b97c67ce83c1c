"""Review R87b: ``replay`` took a ``scrape_interval`` that is an integer too large for a float
(``10**400``: a number, and past the least), and failed its first count of scrapes with a bare
``OverflowError``. It is now refused with the others that are no interval (``InputError``, the
integer quoted by its size); ``inf``, which scrapes once, at 0, is still taken."""

from __future__ import annotations

import math
from collections.abc import Mapping

import pytest

from agentgate.errors import InputError
from agentgate.sim import LLAMA_8B_H100, Engine, replay
from agentgate.sim._des import Send
from agentgate.sim.traces import TraceRequest

_TRACE = [TraceRequest("a", 0.0, 100, 4), TraceRequest("b", 5.0, 100, 4)]


class _SendAll:
    def __init__(self) -> None:
        self.routed: list[str] = []
        self.scrapes = 0

    def route(self, request: TraceRequest, now: float) -> Send:
        self.routed.append(request.id)
        return Send("b")

    def first_token(self, backend: str, request: TraceRequest, now: float) -> None: ...
    def finished(self, backend: str, request: TraceRequest, now: float) -> None: ...

    def observe(self, backend: str, metrics: Mapping[str, float], now: float) -> None:
        self.scrapes += 1


@pytest.mark.parametrize(
    ("interval", "shown"), [(10**400, "1329"), (10**5000, "16610")], ids=["10**400", "10**5000"]
)
def test_an_interval_too_large_for_a_float_is_refused_before_anything_is_replayed(
    interval: int, shown: str
) -> None:
    dispatcher = _SendAll()
    with pytest.raises(InputError) as refused:
        replay(_TRACE, {"b": Engine(LLAMA_8B_H100)}, dispatcher, scrape_interval=interval)
    assert str(refused.value) == (
        f"scrape_interval must be a number of seconds of at least 0.001 (inf: once), not an integer of {shown} bits"
    )
    assert dispatcher.routed == [] and dispatcher.scrapes == 0


def test_an_infinite_interval_scrapes_once_and_serves_the_trace() -> None:
    dispatcher = _SendAll()
    outcomes = replay(_TRACE, {"b": Engine(LLAMA_8B_H100)}, dispatcher, scrape_interval=math.inf)
    assert [o.rejected for o in outcomes] == [None, None]
    assert dispatcher.scrapes == 1
