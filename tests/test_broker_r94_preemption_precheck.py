"""Review R94: a waiting gang whose preemption candidates hold too few GPUs it may use costs no trial.

On every pass over the queue (after each grant, release or expiry) a waiting gang with preemption
candidates was given a what-if placement first: a copy of the whole free index with every
candidate's GPUs given back, whether or not the gang could use them. With 300 gangs waiting for
A100 nodes behind lower-priority H100 leases, one release on 10,000 GPUs took 2.9 s under the
broker's lock. The broker now counts first: the GPUs the gang may use (its type and memory
filters) that are free or held by a usable candidate, in one group where it must stay inside one;
too few, and it tries no what-if. Where the candidates could help, it preempts as before.
"""

from __future__ import annotations

import pytest
from test_broker import FakeClock

from agentgate.dispatch.broker import Broker, CheckpointNotice, GangRequest, TenantQuota, TopologyConstraint
from agentgate.dispatch.broker._preemption import _Preempting
from agentgate.dispatch.broker._topology import synthetic_topology

NODE = TopologyConstraint("node", required=True)


def _count_what_ifs(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    calls = [0]
    what_if = _Preempting._what_if

    def counting(self: _Preempting, *args: object, **kwargs: object) -> object:
        calls[0] += 1
        return what_if(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(_Preempting, "_what_if", counting)
    return calls


def test_candidates_holding_no_gpu_of_the_gangs_type_cost_no_what_if(monkeypatch: pytest.MonkeyPatch) -> None:
    # Nodes 0 and 2 are H100, held at priority 0; nodes 1 and 3 are A100, held at priority 9.
    clock = FakeClock()
    topology = synthetic_topology(4, 8, types=(("H100", 80.0), ("A100", 40.0)))
    broker = Broker(topology, [TenantQuota("a", 64)], clock=clock, ttl_s=10**6, grace_s=60)
    for n, (gpu_type, priority) in enumerate([("H100", 0), ("A100", 9), ("H100", 0), ("A100", 9)]):
        broker.submit(GangRequest(f"s{n}", "a", 8, priority=priority, gpu_type=gpu_type, topology=NODE))
    assert broker.free_gpus() == 0
    calls = _count_what_ifs(monkeypatch)
    for k in range(3):
        events = broker.submit(GangRequest(f"w{k}", "a", 8, priority=5, gpu_type="A100", topology=NODE))
        assert not any(isinstance(e, CheckpointNotice) for e in events)
    events = broker.release("s0")  # a move: the whole queue is tried again
    events += broker.submit(GangRequest("s0", "a", 8, gpu_type="H100", topology=NODE))
    assert not any(isinstance(e, CheckpointNotice) for e in events)
    assert calls[0] == 0
    assert [q.request.id for q in broker.queue()] == ["w0", "w1", "w2"]


def test_candidates_too_few_in_every_node_for_a_required_node_cost_no_what_if(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Two nodes of 8, each half held at priority 9 and half at priority 0: the priority-0 leases
    # hold 8 GPUs in all, but no node would hold an 8-GPU gang that must stay on one node.
    clock = FakeClock()
    broker = Broker(synthetic_topology(2, 8), [TenantQuota("a", 32)], clock=clock, ttl_s=10**6, grace_s=60)
    for n in range(2):
        broker.submit(GangRequest(f"hi{n}", "a", 4, priority=9, topology=NODE))
        broker.submit(GangRequest(f"lo{n}", "a", 4, priority=0, topology=NODE))
    assert broker.free_gpus() == 0
    calls = _count_what_ifs(monkeypatch)
    events = broker.submit(GangRequest("whole", "a", 8, priority=5, topology=NODE))
    assert not any(isinstance(e, CheckpointNotice) for e in events)
    assert calls[0] == 0
    # Where the candidates do hold enough in one node, the gang preempts as before.
    events = broker.submit(GangRequest("half", "a", 4, priority=5, topology=NODE))
    notices = [e for e in events if isinstance(e, CheckpointNotice)]
    assert [e.lease.id for e in notices] == ["lo0"] and notices[0].preemptor == "half"
    assert calls[0] > 0
