"""Review R96: ``benchmarks/dispatch.py``'s ``figures`` counted each tenant's SLO hits with
``o in met``, a scan of a list of ``Outcome`` dataclasses (each comparison building field tuples)
per request: quadratic, so at 3,000 requests working out a replay's figures took longer than the
replay. Now each tenant's hits are counted in one pass, and no two outcomes are compared."""

from __future__ import annotations

import dataclasses

from test_benchmarks_r57_contract import _load

from agentgate.sim import Outcome
from agentgate.sim.traces import TraceRequest

bench = _load("dispatch")


@dataclasses.dataclass(frozen=True, eq=False)
class _Uncomparable(Outcome):
    """An outcome that fails the test if ``figures`` compares it with another."""

    def __eq__(self, other: object) -> bool:
        raise AssertionError("figures compared two outcomes")

    __hash__ = object.__hash__


def _outcome(i: int, tenant: str, ttft: float | None, slo: float = 1.0) -> Outcome:
    request = TraceRequest(
        id=f"r{i}", arrival=float(i), prompt_tokens=100, output_tokens=4, tenant=tenant, slo_ttft_s=slo
    )
    first = None if ttft is None else request.arrival + ttft
    return _Uncomparable(
        request=request,
        backend=None if ttft is None else "gpu0",
        dispatched_at=first,
        first_token_at=first,
        finished_at=None if first is None else first + 0.03,
        cached_tokens=0,
        rejected="shed" if ttft is None else None,
        preemptions=0,
    )


def test_figures_counts_tenant_hits_without_comparing_outcomes() -> None:
    # t0: 2 of 2 met; t1: 1 of 2 met (one late); t2: 0 of 1 (shed); t3: none.
    outcomes = [
        _outcome(0, "t0", 0.5),
        _outcome(1, "t1", 0.5),
        _outcome(2, "t0", 0.2),
        _outcome(3, "t1", 2.0),
        _outcome(4, "t2", None),
    ]
    figs = bench.figures(outcomes)
    assert figs["goodput"] == 3 / 5
    assert figs["jain_tenants"] == bench.jain([1.0, 0.5, 0.0])
