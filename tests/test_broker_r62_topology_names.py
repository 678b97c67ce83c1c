"""Review R62 of the names the broker's topology takes from the operator's inventory.

``Topology`` quoted a GPU id whole (``{gpu.id!r}``) in its errors, and the inventory took a GPU's
node, a node's rack and a backend's GPUs as any text: a name of 10,000 characters, or one
holding control characters, went into an error line as it was. A topology (``GpuSpec``s built by
hand, or ``from_inventory``) and an inventory now refuse such a name when they are loaded, with
an ``InventoryError`` naming the field and the entry's position, and quote what they refuse cut
to ``MAX_QUOTED_CHARS`` characters.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import pytest

from agentgate.dispatch.broker import GpuSpec, Topology, from_inventory
from agentgate.dispatch.inventory import inventory_from_mapping
from agentgate.errors import InventoryError

MOST = 600
"""Longer than any of these messages needs to be with the text it quotes cut to 200 characters."""

HOSTILE = [
    pytest.param("x" * 10_000, id="10000-characters"),
    pytest.param("a\x1b[2J", id="escape"),
    pytest.param("a\nb", id="line-break"),
    pytest.param("a\u202eb", id="bidi-override"),
    pytest.param("", id="empty"),
]


def _gpu(i: int, **changes: Any) -> GpuSpec:
    return dataclasses.replace(
        GpuSpec(id=f"g{i}", type="H100", memory_gb=80.0, node="n0", nvlink_domain="d0", rack="r0"), **changes
    )


def _refused(gpus: tuple[GpuSpec, ...]) -> str:
    with pytest.raises(InventoryError) as caught:
        Topology(gpus)
    message = str(caught.value)
    assert len(message) <= MOST and message.isprintable(), message
    return message


@pytest.mark.parametrize("field", ["id", "type", "node", "nvlink_domain", "rack"])
@pytest.mark.parametrize("value", HOSTILE)
def test_a_topology_refuses_a_hostile_name_naming_the_field_and_the_gpu(field: str, value: str) -> None:
    """Review R62: a GPU's id (or type, node, domain, rack) of 10,000 characters or with control
    characters went whole into the topology's errors (``duplicate gpu``); it is refused at once,
    the message naming ``gpus[1].<field>`` and quoting the value cut, on one printable line."""
    message = _refused((_gpu(0), _gpu(1, **{field: value}), _gpu(2)))
    assert message.startswith(f"gpus[1].{field}: "), message


@pytest.mark.parametrize("field", ["id", "type", "node", "nvlink_domain", "rack"])
def test_a_topology_refuses_a_name_that_is_not_text(field: str) -> None:
    """Review R62: a GPU name that is not text (a number, a list of a million items) is refused
    naming the field, its value quoted bounded, not written out whole."""
    message = _refused((_gpu(0, **{field: list(range(1_000_000))}),))
    assert message.startswith(f"gpus[0].{field}: "), message


@pytest.mark.parametrize(
    "memory",
    [math.nan, math.inf, 0.0, -1.0, True, "80", 10**400],
    ids=["nan", "inf", "0", "-1", "true", "text", "huge"],
)
def test_a_topology_refuses_a_memory_size_that_is_no_positive_finite_number(memory: object) -> None:
    """Review R62: ``memory_gb`` NaN, infinite, not positive, a bool, text or an integer too large
    for a float is refused naming ``gpus[0].memory_gb`` (NaN compared false with every need, so
    such a GPU was never chosen and never said why)."""
    message = _refused((_gpu(0, memory_gb=memory),))
    assert message.startswith("gpus[0].memory_gb: "), message


def test_an_unknown_gpu_id_asked_of_a_topology_is_quoted_cut() -> None:
    """Review R62: ``Topology.number`` quoted an unknown GPU id whole (10,000 characters)."""
    topology = Topology((_gpu(0),))
    with pytest.raises(InventoryError) as caught:
        topology.number("z" * 10_000 + "\n")
    assert len(str(caught.value)) <= MOST and str(caught.value).isprintable()


def test_a_duplicate_gpu_is_named_with_both_positions() -> None:
    """Review R62: a duplicate GPU id is refused naming where it is listed twice."""
    message = _refused((_gpu(0), _gpu(1), _gpu(0)))
    assert message == "gpus[2].id: duplicate gpu 'g0' (also gpus[0])", message


def _inventory(**changes: Any) -> dict[str, Any]:
    data: dict[str, Any] = {
        "racks": [{"name": "r0"}],
        "nodes": [{"name": "n0", "rack": "r0"}, {"name": "n1"}],
        "gpus": [
            {"id": "g0", "type": "H100", "memory_gb": 80, "node": "n0"},
            {"id": "g1", "type": "H100", "memory_gb": 80, "node": "n1"},
        ],
        "backends": [{"name": "b0", "url": "http://127.0.0.1:1", "models": ["m"], "gpus": ["g0", "g1"]}],
    }
    for path, value in changes.items():
        section, index, field, *rest = path.split("__")
        entry = data[section][int(index)]
        if rest:
            entry[field][int(rest[0])] = value
        else:
            entry[field] = value
    return data


@pytest.mark.parametrize(
    ("where", "named"),
    [
        ("gpus__1__node", "gpus.1.node"),
        ("nodes__1__rack", "nodes.1.rack"),
        ("backends__0__gpus__1", "backends.0.gpus.1"),
    ],
)
@pytest.mark.parametrize("value", HOSTILE)
def test_an_inventory_refuses_a_hostile_reference_naming_the_field_and_the_entry(
    where: str, named: str, value: str
) -> None:
    """Review R62: a GPU's node, a node's rack and a backend's GPUs were any text, quoted whole
    in "unknown node/rack/gpu" (a 10,000-character rack: an error line of 10,038 characters); each
    is now refused as a name when the inventory is loaded, naming the field and its position."""
    with pytest.raises(InventoryError) as caught:
        inventory_from_mapping(_inventory(**{where: value}))
    message = str(caught.value)
    assert len(message) <= MOST and message.isprintable(), message
    assert f"<inventory>: {named}: " in message, message


def test_a_real_inventory_still_makes_a_topology_of_its_longest_names() -> None:
    """Review R62: the bounds refuse no name an inventory allows: a 128-character GPU id without
    a domain (its own domain, ``gpu:<id>``) on a node without a rack (``node:<name>``)."""
    long_id, long_node = "g" * 128, "n" * 128
    inventory = inventory_from_mapping(
        {
            "nodes": [{"name": long_node}],
            "gpus": [{"id": long_id, "type": "H100", "memory_gb": 80, "node": long_node}],
        }
    )
    topology = from_inventory(inventory)
    assert topology.gpus[0].nvlink_domain == f"gpu:{long_id}"
    assert topology.gpus[0].rack == f"node:{long_node}"
    assert topology.number(long_id) == 0
