"""Review R62: an inventory error stands at the value that is wrong (the repeated name, the level
out of order, the bandwidth too high), not at the entry or section around it, and one whose
message starts with a location path names that value's full path
(agentgate/dispatch/inventory.py)."""

from __future__ import annotations

import pytest

from agentgate.dispatch.inventory import parse_inventory
from agentgate.errors import InventoryError

INVENTORY = """\
interconnect:
  hierarchy: [nvlink_domain, node, rack]
  bandwidth_gbps: {nvlink_domain: 100, node: 50, rack: 10}
racks:
  - {name: r1}
  - {name: r2}
nodes:
  - {name: node-a, rack: r1}
  - {name: node-b, rack: r2}
gpus:
  - {id: a0, type: H100, memory_gb: 80, node: node-a, nvlink_domain: d1}
  - {id: a1, type: H100, memory_gb: 80, node: node-a}
  - {id: b0, type: H100, memory_gb: 80, node: node-b}
backends:
  - name: b0
    url: http://127.0.0.1:8000
    models: [m1]
  - name: b1
    url: http://127.0.0.1:8001
    models: [m1, m2]
    gpus: [a0, a1]
  - name: b2
    url: http://127.0.0.1:8002
    models:
      - m1
      - m2
"""


def test_the_inventory_used_here_loads() -> None:
    """Review R62: the inventory the cases below edit is valid as it stands, so each case's error
    is the one its edit makes."""
    assert [b.name for b in parse_inventory(INVENTORY).backends] == ["b0", "b1", "b2"]


@pytest.mark.parametrize(
    ("old", "new", "where"),
    [
        ("rack: 10}", "rack: 60}", "3:56: interconnect.bandwidth_gbps.rack: bandwidth_gbps of rack (60)"),
        (
            "[nvlink_domain, node, rack]",
            "[nvlink_domain, node, node]",
            "2:36: interconnect.hierarchy.2: hierarchy levels must be distinct",
        ),
        (
            "[nvlink_domain, node, rack]",
            "[nvlink_domain, rack, node]",
            "2:36: interconnect.hierarchy.2: hierarchy must run from the innermost level out",
        ),
        ("{name: r2}", "{name: r1}", "6:12: duplicate rack 'r1' (also racks.0)"),
        ("{name: node-b,", "{name: node-a,", "9:12: duplicate node 'node-a' (also nodes.0)"),
        ("{id: b0,", "{id: a1,", "13:10: duplicate gpu 'a1' (also gpus.1)"),
        ("name: b2", "name: b0", "22:11: duplicate backend 'b0' (also backends.0)"),
        ("gpus: [a0, a1]", "gpus: [a0, a0]", "21:16: backend 'b1': gpu 'a0' is listed twice"),
    ],
)
def test_an_inventory_error_stands_at_the_value_at_fault(old: str, new: str, where: str) -> None:
    """Review R62: bandwidths against the hierarchy were reported at ``interconnect`` (its first
    line), a repeated or misordered hierarchy level at the list's start, a duplicate name at its
    entry's start without the entry it repeats, a GPU a backend lists twice at the list without
    saying which: each now stands at the value at fault, names its full path where the message
    starts with one, and a duplicate names the first entry that holds the name."""
    assert old in INVENTORY
    with pytest.raises(InventoryError) as caught:
        parse_inventory(INVENTORY.replace(old, new, 1), source="inv.yaml")
    assert str(caught.value).startswith(f"inv.yaml:{where}"), str(caught.value)
