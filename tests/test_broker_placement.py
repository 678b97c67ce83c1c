"""Placement: the free-GPU index, the level rules, the topology-aware and first-fit policies."""

from __future__ import annotations

import pytest
from test_broker import FakeClock, _broker, granted

from agentgate.dispatch.broker import (
    Broker,
    FirstFit,
    FreeIndex,
    GangRequest,
    GpuSpec,
    Topology,
    TopologyAware,
    TopologyConstraint,
    WorkloadHint,
    synthetic_topology,
)
from agentgate.dispatch.broker import TenantQuota as BrokerQuota
from agentgate.dispatch.broker._placement import levels_to_try
from agentgate.errors import InventoryError


def test_free_index_tracks_every_level_and_copies_independently() -> None:
    topology = synthetic_topology(2, 8, domains_per_node=2, nodes_per_rack=2)
    free = FreeIndex(topology)
    free.take([0, 1, 4])
    assert free.total == 13
    assert [len(g) for g in free.groups("nvlink_domain")] == [2, 3, 4, 4]
    assert [len(g) for g in free.groups("node")] == [5, 8]
    assert [len(g) for g in free.groups("rack")] == [13]
    trial = free.copy()
    trial.give([0])
    assert free.total == 13 and not free.is_free(0) and trial.is_free(0)


@pytest.mark.parametrize(
    ("request_", "loosen", "levels"),
    [
        (GangRequest("r", "t", 4, hint=WorkloadHint("communication")), False, ["nvlink_domain"]),
        (
            GangRequest("r", "t", 4, hint=WorkloadHint("communication")),
            True,
            ["nvlink_domain", "node", "rack", None],
        ),
        (GangRequest("r", "t", 1, hint=WorkloadHint("communication")), False, [None]),
        (GangRequest("r", "t", 4, hint=WorkloadHint(kind="inference")), False, ["node", None]),
        (GangRequest("r", "t", 4), False, [None]),
        (GangRequest("r", "t", 4, topology=TopologyConstraint("node")), True, ["node"]),
        (GangRequest("r", "t", 4, topology=TopologyConstraint("node", required=False)), True, ["node", None]),
        (
            GangRequest("r", "t", 4, hint=WorkloadHint("communication"), topology=TopologyConstraint("rack")),
            True,
            ["nvlink_domain", "node", "rack"],
        ),
    ],
)
def test_levels_tried_follow_constraint_and_hint(
    request_: GangRequest, loosen: bool, levels: list[str | None]
) -> None:
    assert levels_to_try(request_, loosen=loosen) == levels


def test_topology_aware_never_returns_part_of_a_gang() -> None:
    topology = synthetic_topology(2, 8)
    free = FreeIndex(topology)
    free.take(range(11))
    policy = TopologyAware(topology)
    assert policy.place(GangRequest("r", "t", 6), free, loosen=True) is None
    assert policy.place(GangRequest("r", "t", 5, gpu_type="B200"), free, loosen=True) is None
    assert len(policy.place(GangRequest("r", "t", 5), free, loosen=True) or []) == 5


def test_first_fit_takes_the_lowest_numbered_gpus_and_ignores_hints() -> None:
    topology = synthetic_topology(2, 8)
    free = FreeIndex(topology)
    free.take([0, 2])
    request = GangRequest(
        "r", "t", 8, hint=WorkloadHint("communication"), topology=TopologyConstraint("node")
    )
    assert FirstFit(topology).place(request, free, loosen=False) == [1, 3, 4, 5, 6, 7, 8, 9]


def test_synthetic_topology_shape_and_refusals() -> None:
    topology = synthetic_topology(4, 8, domains_per_node=2, nodes_per_rack=2)
    assert len(topology) == 32
    assert len(topology.members["nvlink_domain"]) == 8
    assert len(topology.members["node"]) == 4 and len(topology.members["rack"]) == 2
    assert topology.shared_level([0, 3]) == "nvlink_domain"
    assert topology.shared_level([0, 4]) == "node"
    assert topology.shared_level([0, 8]) == "rack"
    assert topology.shared_level([0, 16]) is None
    with pytest.raises(InventoryError, match="split evenly"):
        synthetic_topology(1, 8, domains_per_node=3)
    with pytest.raises(InventoryError, match="positive"):
        synthetic_topology(0, 8)
    with pytest.raises(InventoryError, match="unknown gpu"):
        topology.number("nope")


def test_a_gang_goes_to_the_fullest_node_that_holds_it_keeping_a_whole_node_free() -> None:
    """Kills: best fit inverted in ``_inside_one`` (the node with the most free GPUs chosen, so a
    later 8-GPU gang that needs a whole node finds none)."""
    clock = FakeClock()
    broker = _broker(clock)
    topology = broker.topology
    first = granted(broker.submit(GangRequest("half", "a", 4, hint=WorkloadHint(kind="inference"))))["half"]
    second = granted(broker.submit(GangRequest("other", "b", 4, hint=WorkloadHint(kind="inference"))))[
        "other"
    ]
    node = topology.group_of["node"]
    assert {node[topology.number(g)] for g in first} == {node[topology.number(g)] for g in second}
    whole = granted(broker.submit(GangRequest("whole", "c", 8, hint=WorkloadHint(kind="inference"))))["whole"]
    assert len({node[topology.number(g)] for g in whole}) == 1


def test_a_gang_that_needs_large_memory_gpus_is_never_placed_on_small_ones() -> None:
    """Kills: ``eligibility`` ignoring ``min_memory_gb`` (a gang that asked for 80 GB GPUs gets
    the 40 GB node, and a second such gang is granted too where only one 80 GB node exists)."""
    topology = synthetic_topology(2, 8, types=(("A40", 40.0), ("H100", 80.0)))
    broker = Broker(topology, [BrokerQuota("a", 16)], clock=FakeClock(), ttl_s=1000.0, grace_s=60.0)
    first = granted(broker.submit(GangRequest("g1", "a", 8, min_memory_gb=80.0)))["g1"]
    assert all(topology.gpus[topology.number(g)].memory_gb >= 80.0 for g in first)
    assert granted(broker.submit(GangRequest("g2", "a", 8, min_memory_gb=80.0))) == {}


def _gpu(gid: str, node: str, domain: str) -> GpuSpec:
    return GpuSpec(id=gid, type="H100", memory_gb=80.0, node=node, nvlink_domain=domain, rack="r0")


def test_a_gang_held_to_one_node_never_lands_on_an_nvlink_domain_that_spans_two() -> None:
    """Kills: the nested-group filter dropped in ``_inside_one`` (a communication-bound gang that
    must stay on one node was placed on a 4-GPU NVLink domain spanning both nodes).
    Rule: with a constraint at ``node``, an inner-level group counts only when it lies inside one
    node (an NVL72-like domain across nodes is not "one node"); the gang goes to a whole node."""
    gpus = []
    for node in ("n0", "n1"):
        gpus += [_gpu(f"{node}/g0", node, "wide"), _gpu(f"{node}/g1", node, "wide")]
        gpus += [_gpu(f"{node}/g2", node, f"{node}/own"), _gpu(f"{node}/g3", node, f"{node}/own")]
    topology = Topology(tuple(gpus))
    broker = Broker(topology, [BrokerQuota("a", 8)], clock=FakeClock(), ttl_s=1000.0)
    request = GangRequest(
        "g",
        "a",
        4,
        hint=WorkloadHint(bound="communication"),
        topology=TopologyConstraint("node", required=True),
    )
    [lease_gpus] = granted(broker.submit(request)).values()
    assert {topology.gpus[topology.number(g)].node for g in lease_gpus} == {"n0"}
    [lease] = broker.leases()
    assert lease.level == "node"


def test_a_communication_bound_gang_that_spreads_takes_the_fewest_domains() -> None:
    """Kills: the domain order of ``_fill`` not reversed for communication-bound gangs (a gang
    of 5 spread over three domains, 1 + 1 + 3 GPUs, where 4 + 1 was free).
    Rule: a communication-bound gang that cannot fit one NVLink domain takes the fewest, largest
    domains of its group (here its node), not the most fragmented ones."""
    clock = FakeClock()
    topology = synthetic_topology(1, 12, domains_per_node=3)  # three NVLink domains of 4
    broker = Broker(topology, [BrokerQuota("a", 12)], clock=clock, ttl_s=1000.0)
    domain = TopologyConstraint("nvlink_domain", required=True)
    assert "f0" in granted(broker.submit(GangRequest("f0", "a", 3, topology=domain)))
    assert "f1" in granted(broker.submit(GangRequest("f1", "a", 3, topology=domain)))
    of = topology.group_of["nvlink_domain"]
    taken = {g for lease in broker.leases() for g in lease.gpus}
    free = [sum(1 for i in m if topology.gpus[i].id not in taken) for m in topology.members["nvlink_domain"]]
    assert free == [1, 1, 4]
    clock.now = 1.0
    # 5 GPUs: more than any domain, so placed at once as after the locality wait (one node).
    [spread] = granted(
        broker.submit(GangRequest("comm", "a", 5, hint=WorkloadHint(bound="communication")))
    ).values()
    assert len({of[topology.number(g)] for g in spread}) == 2
