"""Regression review of R89 (third): a waiting request whose preemption candidate drops out is tried
again at the first clock time the candidate is out, to the ulp.

A lease stops being a candidate once ``now + grace`` reaches the request's deadline, as floats add
(``_Preempting._candidates``). The incremental queue woke the request at ``deadline - grace``, but
the sum rounds: with deadline 302 and grace 200 it is 302.0 already at 101.99999999999999, one
ulp before 102.0. At that call a pass over the whole queue (the broker before R89) preempted for
the request, and the incremental pass, waking it at 102.0, did nothing until a later call. The
wake is now the first float ``t`` with ``t + grace >= deadline`` (``first_time_reaching``).
"""

from __future__ import annotations

import math

from hypothesis import given
from hypothesis import strategies as st
from test_broker import FakeClock

from agentgate.dispatch.broker import (
    Broker,
    CheckpointNotice,
    GangRequest,
    TenantQuota,
    synthetic_topology,
)
from agentgate.dispatch.broker._preemption import first_time_reaching


def _scene(clock: FakeClock) -> Broker:
    """Tenant b holds node 0 (H100, grace 5) within its nominal 4 and borrows node 1 (A100, grace
    200). ``w`` of tenant a (deadline 302) may reclaim from b: the newest lease first, the A100
    one, is the only victim taken while b borrows, and does not make room, until its grace would
    outlast the wait and the H100 one is taken instead."""
    topology = synthetic_topology(nodes=2, gpus_per_node=4, types=(("H100", 80.0), ("A100", 40.0)))
    quotas = [TenantQuota("a", 4, cohort="lab"), TenantQuota("b", 4, cohort="lab")]
    broker = Broker(topology, quotas, clock=clock, ttl_s=10**6)
    broker.submit(GangRequest("h100", "b", 4, gpu_type="H100", grace_s=5))
    clock.now = 1.0
    broker.submit(GangRequest("a100", "b", 4, gpu_type="A100", grace_s=200))
    clock.now = 2.0
    assert broker.submit(GangRequest("w", "a", 4, gpu_type="H100", timeout_s=300)) == []
    clock.now = 101.0  # a100's grace still ends before w's deadline: the only victim, no room
    assert broker.advance() == []
    return broker


def _notices(broker: Broker) -> list[tuple[str, str, str]]:
    return [(e.lease.id, e.preemptor, e.reason) for e in broker.advance() if isinstance(e, CheckpointNotice)]


def test_a_candidate_dropped_one_ulp_before_deadline_minus_grace_lets_it_preempt_at_that_call() -> None:
    clock = FakeClock()
    broker = _scene(clock)
    clock.now = math.nextafter(102.0, 0.0)  # 101.99999999999999: now + 200 == 302.0, a100 is out
    assert clock.now + 200 == 302.0
    assert _notices(broker) == [("h100", "w", "reclaim")]  # until the review: [] until 102.0
    assert [(q.request.id, q.victims) for q in broker.queue()] == [("w", ("h100",))]


def test_the_request_is_tried_again_at_the_first_time_the_candidate_is_out_and_not_before() -> None:
    dropped = first_time_reaching(302.0, 200)
    assert dropped + 200 >= 302.0 > math.nextafter(dropped, -math.inf) + 200
    clock = FakeClock()
    broker = _scene(clock)
    clock.now = math.nextafter(dropped, -math.inf)  # a100 still a candidate: nothing to do yet
    assert _notices(broker) == []
    clock.now = dropped
    assert _notices(broker) == [("h100", "w", "reclaim")]


@given(
    deadline=st.floats(min_value=-1e12, max_value=1e12, allow_nan=False),
    grace=st.floats(min_value=1e-9, max_value=1e6, allow_nan=False),
)
def test_first_time_reaching_is_the_first_float_whose_sum_reaches_the_deadline(
    deadline: float, grace: float
) -> None:
    t = first_time_reaching(deadline, grace)
    assert t + grace >= deadline
    assert math.nextafter(t, -math.inf) + grace < deadline


def test_first_time_reaching_where_grace_dwarfs_the_time() -> None:
    # Near 0 there are millions of floats to an ulp of the sum: found by bisection, not by steps.
    t = first_time_reaching(300.0, 299.99999)
    assert t + 299.99999 >= 300.0 > math.nextafter(t, -math.inf) + 299.99999
    assert first_time_reaching(math.inf, 5.0) == math.inf
