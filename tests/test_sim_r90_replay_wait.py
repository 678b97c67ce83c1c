"""Review R90: ``replay`` checked each arrival's time against the scrape grid, but not the time a
router's ``Wait`` asks for a request again. With ``max_wait_s=inf`` ("a request waits as long as
its router asks"), ``Wait(1e308)`` ended in a bare ``OverflowError`` and ``Wait(inf)`` scraped one
interval at a time for ever. Either is now refused with ``InputError`` naming the request, as
such an arrival is; where ``max_wait_s`` is finite, such a wait is rejected as waited too long."""

from __future__ import annotations

import math
from collections.abc import Mapping

import pytest

from agentgate.errors import InputError
from agentgate.sim import LLAMA_8B_H100, Engine, Outcome, Send, Wait, replay
from agentgate.sim.traces import TraceRequest

_MOST_SCRAPES = 1000


class _WaitsOnce:
    """Asks for a request to wait ``seconds`` the first time, then sends it; fails past a thousand
    scrapes instead of waiting for a replay that does not return."""

    def __init__(self, seconds: float) -> None:
        self.seconds, self.asked, self.scrapes = seconds, 0, 0

    def route(self, request: TraceRequest, now: float) -> Send | Wait:
        self.asked += 1
        return Wait(self.seconds) if self.asked == 1 else Send("b")

    def first_token(self, backend: str, request: TraceRequest, now: float) -> None: ...
    def finished(self, backend: str, request: TraceRequest, now: float) -> None: ...

    def observe(self, backend: str, metrics: Mapping[str, float], now: float) -> None:
        self.scrapes += 1
        assert self.scrapes <= _MOST_SCRAPES, "the replay scrapes without end"


def _replay(seconds: float, max_wait_s: float) -> list[Outcome]:
    trace = [TraceRequest("a", 0.0, 100, 4)]
    return replay(trace, {"b": Engine(LLAMA_8B_H100)}, _WaitsOnce(seconds), max_wait_s=max_wait_s)


@pytest.mark.parametrize("seconds", [1e308, math.inf, 10**400], ids=["1e308", "inf", "10**400"])
def test_a_wait_past_the_scrape_grid_is_refused_naming_the_request(seconds: float) -> None:
    with pytest.raises(
        InputError, match=r"request 'a': the router's Wait\(.*\) asks for it again at .* past what scrapes"
    ):
        _replay(seconds, math.inf)


@pytest.mark.parametrize("seconds", [1e308, math.inf, 10**400], ids=["1e308", "inf", "10**400"])
def test_a_wait_past_a_finite_max_wait_is_rejected_as_waited_too_long(seconds: float) -> None:
    [outcome] = _replay(seconds, 600.0)
    assert outcome.rejected == "waited too long"


def test_a_far_but_countable_wait_is_served_after_it() -> None:
    [outcome] = _replay(1e300, math.inf)
    finished = outcome.finished_at
    assert outcome.rejected is None and finished is not None and finished >= 1e300
