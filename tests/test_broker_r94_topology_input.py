"""Review R94: a ``Topology`` given entries that are no ``GpuSpec``, or no iterable, raises ``InventoryError``.

The docs promise an ``InventoryError`` naming the field and the GPU's position for a bad GPU. A raw
inventory row (a str, a dict) raised ``AttributeError: 'str' object has no attribute 'id'``, a
non-iterable a ``TypeError``, and a list was kept as given, mutable inside the immutable topology.
"""

from __future__ import annotations

import pytest

from agentgate.dispatch.broker._topology import GpuSpec, Topology, synthetic_topology
from agentgate.errors import InventoryError

ROW = {"id": "g0", "type": "H100", "memory_gb": 80, "node": "n0", "nvlink_domain": "d0", "rack": "r0"}


@pytest.mark.parametrize(
    ("entry", "kind"), [("g0", "str"), (ROW, "dict"), (None, "NoneType"), (("g0", "H100"), "tuple")]
)
def test_an_entry_that_is_no_gpu_spec_is_refused_naming_its_position(entry: object, kind: str) -> None:
    good = synthetic_topology(1, 2).gpus
    with pytest.raises(InventoryError, match=rf"^gpus\[2\]: must be a GpuSpec, not {kind}$"):
        Topology((*good, entry))  # type: ignore[arg-type]


@pytest.mark.parametrize(("gpus", "kind"), [(123, "int"), ("g0", "str"), (b"g0", "bytes")])
def test_gpus_that_are_no_iterable_of_entries_are_refused(gpus: object, kind: str) -> None:
    with pytest.raises(InventoryError, match=rf"^gpus: must be an iterable of GpuSpec, not {kind}$"):
        Topology(gpus)  # type: ignore[arg-type]


def test_a_list_of_gpus_is_kept_as_a_tuple() -> None:
    gpus: list[GpuSpec] = list(synthetic_topology(1, 2).gpus)
    topology = Topology(gpus)  # type: ignore[arg-type]
    gpus.clear()
    assert isinstance(topology.gpus, tuple) and len(topology) == 2
    assert topology == Topology(tuple(synthetic_topology(1, 2).gpus))
