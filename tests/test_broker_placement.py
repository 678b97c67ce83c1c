"""Placement: the free-GPU index, the level rules, the topology-aware and first-fit policies."""

from __future__ import annotations

import pytest

from agentgate.dispatch.broker import (
    FirstFit,
    FreeIndex,
    GangRequest,
    TopologyAware,
    TopologyConstraint,
    WorkloadHint,
    synthetic_topology,
)
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
