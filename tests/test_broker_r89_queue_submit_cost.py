"""Review R89: what a ``Broker`` call costs with a long queue (agentgate/dispatch/broker).

Each call sorted the whole waiting queue and tried every request in it, under the broker's lock,
so queuing n requests that could not be placed was quadratic: 1.1 ms a submit with 1,000 waiting,
16 ms with 8,000. Now the queue is kept in order as requests come and go, and a call tries again
only the requests whose answer may have changed: all of them once something is granted, freed,
reserved or notified; otherwise the new request, and each one whose own time came (its locality
wait or drain delay over, a preemption candidate's grace no longer ending before its wait does,
``grant_check`` unreadable at its last try). The answers are those of a pass over the whole
queue: the tests below count the placement trials, and check that what the broker grants,
preempts and reserves is unchanged.
"""

from __future__ import annotations

from test_broker import FakeClock
from test_broker_r89c_preemption_retry_ulp import _notices, _scene

from agentgate.dispatch.broker import (
    Broker,
    FreeIndex,
    GangRequest,
    Granted,
    PlacementPolicy,
    TenantQuota,
    TimedOut,
    TopologyAware,
    WorkloadHint,
    synthetic_topology,
)
from agentgate.errors import StoreError

WAITING = 300


class Counting:
    """The broker's placement policy, counting the requests it is asked to place."""

    name = "counting"

    def __init__(self, policy: PlacementPolicy) -> None:
        self.policy, self.tried = policy, []

    def place(self, request: GangRequest, free: FreeIndex, *, loosen: bool) -> list[int] | None:
        self.tried.append(request.id)
        return self.policy.place(request, free, loosen=loosen)


def _full(clock: FakeClock, **settings: float) -> tuple[Broker, Counting]:
    """One node of 8 GPUs, all held by ``hold`` (priority 5: none preempts it), and ``WAITING``
    gangs of 8 queued behind it, at priorities 0 to 2 in turn (tenant ``a`` may use 16 GPUs: each
    waits for GPUs, not quota)."""
    topology = synthetic_topology(nodes=1, gpus_per_node=8)
    counting = Counting(TopologyAware(topology))
    broker = Broker(topology, [TenantQuota("a", 16)], policy=counting, clock=clock, ttl_s=10**6, **settings)
    broker.submit(GangRequest("hold", "a", 8, priority=5))
    for i in range(WAITING):
        broker.submit(GangRequest(f"w{i}", "a", 8, priority=i % 3))
    counting.tried.clear()
    return broker, counting


def test_a_submit_that_places_nothing_tries_only_its_own_request() -> None:
    clock = FakeClock()
    broker, counting = _full(clock)
    clock.now += 1
    assert broker.submit(GangRequest("late", "a", 8, priority=1)) == []
    assert counting.tried == ["late"]  # until review R89: every one of the 301 waiting
    counting.tried.clear()
    assert broker.advance() == [] and broker.renew("hold").id == "hold"
    assert counting.tried == []  # nothing changed: nothing is tried again


def test_the_queue_keeps_its_order_and_a_freed_node_goes_to_its_first_request() -> None:
    clock = FakeClock()
    broker, counting = _full(clock)
    broker.submit(GangRequest("late", "a", 8, priority=1))
    order = [q.request.id for q in broker.queue()]
    by_rank = sorted(range(WAITING), key=lambda i: (-(i % 3), i))
    assert order == [f"w{i}" for i in by_rank if i % 3 == 2] + [
        *(f"w{i}" for i in by_rank if i % 3 == 1),
        "late",
        *(f"w{i}" for i in by_rank if i % 3 == 0),
    ]
    counting.tried.clear()
    events = broker.release("hold")
    assert [e.lease.id for e in events if isinstance(e, Granted)] == ["w2"]
    assert counting.tried == order  # the GPUs freed are offered to every request, in order
    broker.advance()
    counting.tried.clear()
    assert [e.request.id for e in broker.release("w299")] == ["w299"]  # withdrawn: frees nothing
    assert counting.tried == []


def test_timeouts_come_in_arrival_order_whatever_their_priority() -> None:
    clock = FakeClock()
    broker, _ = _full(clock)
    clock.now = 3600.0  # every waiting request's timeout_s
    events = broker.advance()
    assert [e.request.id for e in events if isinstance(e, TimedOut)] == [f"w{i}" for i in range(WAITING)]
    assert broker.queue() == []


def test_a_request_is_tried_again_when_its_locality_wait_ends() -> None:
    # Node 0 (H100) and node 1 (A100) each have 4 GPUs free: a communication-bound gang of 8 waits
    # for one NVLink domain until its locality wait ends, then spreads, at the first call after it.
    clock = FakeClock()
    topology = synthetic_topology(nodes=2, gpus_per_node=8, types=(("H100", 80.0), ("A100", 40.0)))
    counting = Counting(TopologyAware(topology))
    broker = Broker(
        topology, [TenantQuota("a", 16)], policy=counting, clock=clock, ttl_s=10**6, locality_wait_s=100.0
    )
    broker.submit(GangRequest("half0", "a", 4, gpu_type="H100"))
    broker.submit(GangRequest("half1", "a", 4, gpu_type="A100"))
    broker.submit(GangRequest("comm", "a", 8, hint=WorkloadHint(bound="communication")))
    clock.now = 99.0
    counting.tried.clear()
    assert broker.advance() == [] and counting.tried == []
    clock.now = 100.0
    granted = [e.lease for e in broker.advance() if isinstance(e, Granted)]
    assert counting.tried == ["comm"]
    assert [lease.id for lease in granted] == ["comm"] and granted[0].level == "rack"


def test_a_request_is_tried_again_when_a_preemption_candidate_stops_being_one() -> None:
    # Tenant b borrows node 1 (A100) beyond its nominal 4 and holds node 0 (H100) within it. A
    # request of a for H100 may reclaim from b: the newest lease first, the A100 one, is the only
    # victim taken while b borrows, and does not make room. Once that lease's grace would outlast
    # the request's wait it is no candidate, and the H100 one is taken.
    # test_broker_r89c_preemption_retry_ulp's scene, which ends at 101.0 with nothing preempted:
    # a100's grace (200) still ends before w's deadline (302).
    clock = FakeClock()
    broker = _scene(clock)
    clock.now = 103.0  # now it would not: a100 is no candidate
    assert _notices(broker) == [("h100", "w", "reclaim")]


def test_a_grant_check_that_could_not_be_read_is_asked_again_at_the_next_call() -> None:
    clock = FakeClock()
    topology = synthetic_topology(nodes=1, gpus_per_node=8)
    broker = Broker(topology, [TenantQuota("a", 8)], clock=clock)
    asked: list[str] = []

    def unreadable(request: GangRequest) -> str | None:
        asked.append(request.id)
        if len(asked) == 1:
            raise StoreError("grants unreadable")
        return None

    broker.grant_check = unreadable
    assert broker.submit(GangRequest("g", "a", 8)) == []
    assert [e.lease.id for e in broker.advance() if isinstance(e, Granted)] == ["g"]
    assert asked == ["g", "g"]
