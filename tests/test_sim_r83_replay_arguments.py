"""Review R83 of ``replay``'s arguments: a scrape interval too short to end, a NaN wait limit.

``replay`` refused a ``scrape_interval`` of 0 or less, since each scrape is one turn of its loop
("would keep the replay from ever returning"), but took 1e-20 s: past 0 its clock did not advance
at all (``now + 1e-20 == now``) and it never returned (``benchmarks/dispatch.py --scrape 1e-20``
too). It now refuses one under ``MIN_SCRAPE_INTERVAL_S`` (0.001 s), and the benchmark's argument
parser does too. A ``max_wait_s`` of NaN was taken and rejected every request a router told to
wait, as having waited too long; it is now refused, as is a negative one or one that is no number.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest
from test_sim_trace_loaders import _SendAll

from agentgate.errors import InputError
from agentgate.sim import LLAMA_8B_H100, Engine, Send, Wait, _des, replay
from agentgate.sim.traces import TraceRequest

MIN_SCRAPE_INTERVAL_S = 0.001
"""The bound docs/simulation.md states."""
_TRACE = [TraceRequest("a", 0.0, 10, 2), TraceRequest("b", 1.0, 10, 2)]


class _WaitOnce:
    """Tells each request to wait 0.1 s once, then sends it."""

    def __init__(self) -> None:
        self.asked: set[str] = set()

    def route(self, request: TraceRequest, now: float) -> Send | Wait:
        if request.id in self.asked:
            return Send("b")
        self.asked.add(request.id)
        return Wait(0.1)

    def first_token(self, backend: str, request: TraceRequest, now: float) -> None: ...
    def finished(self, backend: str, request: TraceRequest, now: float) -> None: ...
    def observe(self, backend: str, metrics: object, now: float) -> None: ...


def test_the_shortest_scrape_interval_is_the_documented_one() -> None:
    assert getattr(_des, "MIN_SCRAPE_INTERVAL_S", None) == MIN_SCRAPE_INTERVAL_S


@pytest.mark.parametrize("interval", [1e-20, 0.000999, "0.5", True])
def test_replay_refuses_a_scrape_interval_under_the_bound_or_not_a_number(interval: object) -> None:
    """Review R83: 1e-20 s was taken and the replay never returned."""
    engine = Engine(LLAMA_8B_H100)
    with pytest.raises(InputError, match=r"scrape_interval must be a number of seconds of at least 0\.001"):
        replay(_TRACE, {"b": engine}, _SendAll(), scrape_interval=interval)  # type: ignore[arg-type]
    assert not engine.has_work()


def test_replay_takes_the_shortest_scrape_interval() -> None:
    outcomes = replay(_TRACE, {"b": Engine(LLAMA_8B_H100)}, _SendAll(), scrape_interval=MIN_SCRAPE_INTERVAL_S)  # type: ignore[arg-type]
    assert all(o.finished_at is not None for o in outcomes)


@pytest.mark.parametrize("limit", [float("nan"), -1.0, "600", None])
def test_replay_refuses_a_wait_limit_that_is_no_number_of_seconds(limit: object) -> None:
    """Review R83: NaN was taken, and every request a router told to wait was rejected."""
    with pytest.raises(InputError, match="max_wait_s must be a number of seconds, 0 or more"):
        replay(_TRACE, {"b": Engine(LLAMA_8B_H100)}, _WaitOnce(), max_wait_s=limit)  # type: ignore[arg-type]


@pytest.mark.parametrize("limit", [600.0, float("inf")])
def test_a_request_told_to_wait_is_served_within_the_limit(limit: float) -> None:
    outcomes = replay(_TRACE, {"b": Engine(LLAMA_8B_H100)}, _WaitOnce(), max_wait_s=limit)  # type: ignore[arg-type]
    assert [o.rejected for o in outcomes] == [None, None]
    assert all(o.dispatched_at is not None and o.dispatched_at >= 0.1 for o in outcomes)


def _benchmark() -> ModuleType:
    path = Path(__file__).resolve().parents[1] / "benchmarks" / "dispatch.py"
    spec = importlib.util.spec_from_file_location("r83_bench_dispatch", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_the_benchmark_refuses_a_scrape_interval_under_the_bound(capsys: pytest.CaptureFixture[str]) -> None:
    """Review R83: ``--scrape 1e-20`` passed the parser and the replay never returned."""
    with pytest.raises(SystemExit) as exited:
        _benchmark().main(["--quick", "--json", "--scrape", "1e-20"])
    assert exited.value.code == 2
    out, err = capsys.readouterr()
    assert "--scrape: must be at least 0.001 s: '1e-20'" in err and '"goals"' not in out
