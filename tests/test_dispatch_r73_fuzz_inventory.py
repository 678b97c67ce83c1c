"""Review R73, fuzzing the GPU inventory loader: the example inventory (policies/inventory.yaml)
with values anywhere in it replaced by other YAML values (wrong types, huge or negative numbers,
text beyond ASCII and confusables, deep nesting) or their keys removed, loaded as YAML text.

The YAML layer the inventory shares with the policy (anchors, aliases, tags, duplicate keys, node
bombs) is fuzzed as text in test_fuzz_parsers.py; the inventory's own schema and cross-references
were not fuzzed. Property: ``parse_inventory`` returns an inventory a ``Router`` and a
``Dispatcher`` are built from, or raises ``InventoryError`` naming the file and a line, on one
line; never another exception.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from test_dispatch_r73_fuzz_answers import _VALUES, _mutated

from agentgate.dispatch import Inventory, parse_inventory
from agentgate.dispatch.dispatcher import Dispatcher
from agentgate.dispatch.router import Router
from agentgate.errors import InventoryError

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE: dict[str, Any] = yaml.safe_load((ROOT / "policies" / "inventory.yaml").read_text(encoding="utf-8"))

_YAML_ONLY = st.sampled_from(
    ["H100", "h100", "Н100", "node-a/0", "nvl-a", "rack-1", "llama-3.1-8b", "vllm", "sglang", "tgi"]
) | st.sampled_from(["http://127.0.0.1:1", "https://[::1]/v1/", "http://u:p@h", "http://h/?q", "/metrics"])
"""Values the inventory's own fields hold, and near misses of them (a Cyrillic ``Н``, a URL with
credentials or a query), beside the JSON values ``_mutated`` draws."""


@st.composite
def _inventories(draw: st.DrawFn) -> str:
    """The example inventory with some values replaced or removed, as YAML text."""
    return yaml.safe_dump(draw(_mutated(EXAMPLE, _VALUES | _YAML_ONLY)), allow_unicode=True)


@settings(
    max_examples=60,
    derandomize=True,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much, HealthCheck.data_too_large],
)
@given(text=_inventories())
def test_an_inventory_changed_as_data_loads_and_routes_or_is_a_located_inventory_error(text: str) -> None:
    """Review R73: the example inventory with values replaced or removed loads as an inventory that
    a router and a dispatcher are built from, or is an ``InventoryError`` naming the file and a
    line on one line: never another exception."""
    try:
        inventory = parse_inventory(text, source="inv.yaml", read_keys=False)
    except InventoryError as exc:
        event("refused")
        assert str(exc).startswith("inv.yaml:") and exc.line is not None, str(exc)
        assert "\n" not in str(exc), str(exc)
        return
    event("loaded")
    assert isinstance(inventory, Inventory)
    Dispatcher(inventory, Router(inventory))
