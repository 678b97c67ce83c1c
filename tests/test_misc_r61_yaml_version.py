"""The ``%YAML`` directive refused by the shared YAML reader (agentgate/_yaml.py), so that every
file agentgate reads refuses one for a version other than 1.2, not only policies."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentgate._yaml import load_yaml
from agentgate.dispatch.inventory import load_inventory, parse_inventory
from agentgate.errors import InventoryError

INVENTORY = (Path(__file__).parent.parent / "policies" / "inventory.yaml").read_text(encoding="utf-8")


def test_an_inventory_with_a_yaml_1_1_directive_is_refused_at_its_line(tmp_path: Path) -> None:
    """Review R61: an inventory with ``%YAML 1.1`` loaded (read as YAML 1.2, against what the
    directive tells every other reader) though a policy with one is refused. It is now an
    InventoryError at the directive's line, from the file and from text alike."""
    text = "# written for a YAML 1.1 reader\n%YAML 1.1\n---\n" + INVENTORY
    path = tmp_path / "inventory.yaml"
    path.write_text(text, encoding="utf-8")
    for load in (
        lambda: parse_inventory(text, source=str(path), read_keys=False),
        lambda: load_inventory(path, read_keys=False),
    ):
        with pytest.raises(InventoryError) as info:
            load()
        error = info.value
        assert (error.file, error.line, error.column) == (str(path), 2, 1)
        assert error.message.startswith("%YAML 1.1 directive: agentgate reads an inventory as YAML 1.2")
        assert error.hint


@pytest.mark.parametrize(
    ("version", "said"),
    [("1.1", "%YAML 1.1 directive: agentgate reads an inventory as YAML 1.2"), ("2.0", "malformed YAML")],
)
def test_the_reader_refuses_every_version_but_1_2(version: str, said: str) -> None:
    """Review R61: ``load_yaml`` itself refuses a ``%YAML`` directive for any version but 1.2,
    with the caller's error class, at the directive's line (the parser refuses all but 1.1 and
    1.2 as incompatible; 1.1 is the reader's own refusal)."""
    with pytest.raises(InventoryError) as info:
        load_yaml(f"%YAML {version}\n---\na: 1\n", source="x.yaml", error=InventoryError, what="an inventory")
    assert info.value.line == 1
    assert info.value.message.startswith(said)


def test_a_yaml_1_2_directive_or_none_loads_an_inventory() -> None:
    """Review R61: ``%YAML 1.2``, or no directive, loads the inventory as before."""
    plain = parse_inventory(INVENTORY, read_keys=False)
    assert parse_inventory("%YAML 1.2\n---\n" + INVENTORY, read_keys=False) == plain
    assert load_yaml('a: "x\n  %YAML 1.1"\n', source="x.yaml")[0] == {"a": "x %YAML 1.1"}
