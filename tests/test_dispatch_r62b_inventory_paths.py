"""Review R62 and R63: an inventory error names the full location path of what is wrong (the entry in a
list, the field in an entry: ``backends.2.models.3``, not ``backends.2``) and stands at that
value's own ``file:line:column`` (agentgate/dispatch/inventory.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentgate.dispatch.inventory import load_inventory, parse_inventory
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
      - m3
      - m4
"""


def test_the_inventory_used_here_loads() -> None:
    """Review R62: the inventory the cases below edit is valid as it stands, so each case's error
    is the one its edit makes."""
    assert [b.name for b in parse_inventory(INVENTORY).backends] == ["b0", "b1", "b2"]


def test_a_bad_model_is_named_by_its_index_at_its_own_line(tmp_path: Path) -> None:
    """Review R63: a model name that makes no resource name, fourth in the third backend's list,
    was reported as ``backends.2`` at the backend's first line; the error names
    ``backends.2.models.3`` and stands at the model's line and column in the file."""
    path = tmp_path / "inventory.yaml"
    path.write_text(INVENTORY.replace("      - m4", "      - 'bad model'"))
    with pytest.raises(InventoryError) as caught:
        load_inventory(path)
    message = str(caught.value)
    assert message.startswith(f"{path}:28:9: backends.2.models.3: backend 'b2': model 'bad model' "), message
    assert caught.value.file == str(path) and caught.value.line == 28 and caught.value.column == 9


@pytest.mark.parametrize(
    ("old", "new", "where"),
    [
        ("[m1, m2]", "[m1, 'a//b']", "20:18: backends.1.models.1: backend 'b1': model 'a//b'"),
        ("{id: a1, type: H100", "{id: a1, type: 'H 100'", "12:20: gpus.1.type: GPU 'a1' on node 'node-a'"),
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
        ("{name: r2}", "{name: r1}", "6:12: racks.1.name: duplicate rack 'r1' (also racks.0)"),
        ("{name: node-b,", "{name: node-a,", "9:12: nodes.1.name: duplicate node 'node-a' (also nodes.0)"),
        ("{id: b0,", "{id: a1,", "13:10: gpus.2.id: duplicate gpu 'a1' (also gpus.1)"),
        ("name: b2", "name: b0", "22:11: backends.2.name: duplicate backend 'b0' (also backends.0)"),
        (
            "gpus: [a0, a1]",
            "gpus: [a0, a0]",
            "21:16: backends.1.gpus.1: backend 'b1': gpu 'a0' is listed twice",
        ),
        ("gpus: [a0, a1]", "gpus: [a0, zz]", "21:16: backends.1.gpus.1: backend 'b1': unknown gpu 'zz'"),
        ("node: node-b}", "node: node-x}", "13:47: gpus.2.node: gpu 'b0': unknown node 'node-x'"),
        ("rack: r2}", "rack: r9}", "9:26: nodes.1.rack: node 'node-b': unknown rack 'r9'"),
        (
            "node: node-b}",
            "node: node-b, nvlink_domain: d1}",
            "13:70: gpus.2.nvlink_domain: gpu 'b0': nvlink domain 'd1' spans racks",
        ),
    ],
)
def test_every_inventory_error_names_the_full_path(old: str, new: str, where: str) -> None:
    """Review R63: errors raised by the inventory's own checks (a model or a GPU type that makes
    no resource name, bandwidths against the hierarchy, a level out of order, duplicates,
    references that do not resolve) name the full path of the value at fault, as pydantic's own
    errors do, and stand at that value's line and column (until review R63 only the bandwidth
    and hierarchy errors named it; the others named the entry in words, or only the entry's
    line)."""
    assert old in INVENTORY
    with pytest.raises(InventoryError) as caught:
        parse_inventory(INVENTORY.replace(old, new, 1), source="inv.yaml")
    assert str(caught.value).startswith(f"inv.yaml:{where}"), str(caught.value)
