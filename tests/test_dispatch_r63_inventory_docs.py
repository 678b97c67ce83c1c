"""Review R63: docs/dispatch.md's example of an inventory error is the error its example inventory
gets (agentgate/dispatch/inventory.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentgate.dispatch.inventory import parse_inventory
from agentgate.errors import InventoryError

DISPATCH = Path(__file__).resolve().parent.parent / "docs" / "dispatch.md"


def _block(after: str, language: str) -> str:
    """The first fenced ``language`` block of docs/dispatch.md after the text ``after``."""
    text = DISPATCH.read_text(encoding="utf-8")
    return text.split(after, 1)[1].split(f"```{language}\n", 1)[1].split("\n```\n", 1)[0]


def test_the_documented_inventory_error_is_the_one_its_example_gets() -> None:
    """Review R63: the error format docs/dispatch.md shows (``FILE:LINE:COLUMN: PATH: what``) is
    what loading its example inventory raises, word for word."""
    with pytest.raises(InventoryError) as caught:
        parse_inventory(_block("### Inventory errors", "yaml") + "\n", source="inventory.yaml")
    assert str(caught.value) == _block("### Inventory errors", "text")
