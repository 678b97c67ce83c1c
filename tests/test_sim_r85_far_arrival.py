"""Review R85: ``replay`` scraped every engine at each ``scrape_interval`` across a stretch where
no engine works, so an arrival finite but far away (a trace row at 1e20 ms) kept it from ever
returning. Across such a stretch the engines' metrics do not change: it now scrapes them at the
stretch's first scrape time and at its last one before the next arrival, and no more."""

from __future__ import annotations

from collections.abc import Mapping

import pytest

from agentgate.errors import InputError
from agentgate.sim import LLAMA_8B_H100, Engine, Send, replay
from agentgate.sim.traces import TraceRequest

_MOST_SCRAPES = 1000


class _CountingScrapes:
    """Sends every request to ``b``; keeps the times of the scrapes, and fails past a thousand
    (instead of waiting for a replay that does not return)."""

    def __init__(self) -> None:
        self.scraped: list[float] = []

    def route(self, request: TraceRequest, now: float) -> Send:
        return Send("b")

    def first_token(self, backend: str, request: TraceRequest, now: float) -> None: ...
    def finished(self, backend: str, request: TraceRequest, now: float) -> None: ...

    def observe(self, backend: str, metrics: Mapping[str, float], now: float) -> None:
        self.scraped.append(now)
        assert len(self.scraped) <= _MOST_SCRAPES, "the replay scrapes without end"


@pytest.mark.parametrize("far", [1e6, 1e17, 1e20, 1e300])
@pytest.mark.parametrize("interval", [0.5, 0.001])
def test_an_arrival_far_away_is_served_after_few_scrapes(far: float, interval: float) -> None:
    """Review R85: a far arrival (1e17 s, from a trace row at 1e20 ms) never returned."""
    router = _CountingScrapes()
    trace = [TraceRequest("near", 0.0, 100, 4), TraceRequest("far", far, 100, 4)]
    outcomes = replay(trace, {"b": Engine(LLAMA_8B_H100)}, router, scrape_interval=interval)
    assert [o.rejected for o in outcomes] == [None, None]
    assert [o.request.id for o in outcomes if o.finished_at is not None] == ["near", "far"]
    assert outcomes[1].finished_at is not None and outcomes[1].finished_at >= far
    assert router.scraped == sorted(router.scraped)


def test_an_idle_stretch_is_scraped_at_its_start_and_at_its_last_scrape_time_before_the_arrival() -> None:
    """Review R85: the scrapes that read the same metrics are left out; the one a router reads
    last before the next arrival is still made, at its time on the scrape grid."""
    router = _CountingScrapes()
    trace = [TraceRequest("a", 0.0, 100, 4), TraceRequest("b", 100.25, 100, 4)]
    outcomes = replay(trace, {"b": Engine(LLAMA_8B_H100)}, router, scrape_interval=0.5)
    done = outcomes[0].finished_at
    assert done is not None and done < 0.5
    assert router.scraped == [0.0, 0.5, 100.0]  # "b" is done before 100.5


@pytest.mark.parametrize(
    ("far", "interval"),
    [(1e308, 0.5), (1e306, 0.001), (1.7976931348623157e308, 1.0)],
    ids=["0.5", "0.001", "max"],
)
def test_an_arrival_past_any_count_of_scrapes_is_refused(far: float, interval: float) -> None:
    """A regression review of R85: an arrival whose count of scrapes overflows a float (1e308 s
    at 0.5 s) was a bare ``OverflowError`` out of the scrape grid; it is ``InputError``, before
    anything is replayed."""
    router = _CountingScrapes()
    trace = [TraceRequest("near", 0.0, 100, 4), TraceRequest("far", far, 100, 4)]
    with pytest.raises(InputError, match=r"'far': an arrival at .* is past what scrapes every"):
        replay(trace, {"b": Engine(LLAMA_8B_H100)}, router, scrape_interval=interval)
    assert router.scraped == []
