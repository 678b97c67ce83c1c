"""Review R63 (r63-inventory's finding): a model's price, in a policy's ``cost_per_mtok`` and in
an inventory backend's ``cost``, had no upper bound: ``10**4299`` micro-dollars per million tokens
loaded. Both are now bounded by a budget's largest amount (2**63-1), refused with the path."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentgate.dispatch.inventory import load_inventory
from agentgate.errors import InventoryError, PolicyError
from agentgate.policy import load_policy

HUGE = 2**63


@pytest.mark.parametrize("field", ["input", "output"])
def test_a_policy_model_price_beyond_any_budget_is_refused(tmp_path: Path, field: str) -> None:
    path = tmp_path / "p.yaml"
    other = "output" if field == "input" else "input"
    path.write_text(f"version: 1\nmodels:\n  m:\n    cost_per_mtok: {{{field}: {HUGE}, {other}: 1}}\n")
    with pytest.raises(PolicyError, match=rf"models\.m\.cost_per_mtok\.{field}"):
        load_policy(path)
    path.write_text(f"version: 1\nmodels:\n  m:\n    cost_per_mtok: {{{field}: {HUGE - 1}, {other}: 1}}\n")
    load_policy(path)  # the largest amount itself is a price


@pytest.mark.parametrize("field", ["input_per_mtok", "output_per_mtok"])
def test_an_inventory_price_beyond_any_budget_is_refused(tmp_path: Path, field: str) -> None:
    path = tmp_path / "inv.yaml"
    backend = "backends:\n  - {{name: b, url: 'http://127.0.0.1:9', models: [m], cost: {{{f}: {n}}}}}\n"
    path.write_text(backend.format(f=field, n=HUGE))
    with pytest.raises(InventoryError, match=rf"backends\.0\.cost\.{field}"):
        load_inventory(path)
    path.write_text(backend.format(f=field, n=HUGE - 1))
    assert load_inventory(path).backends[0].cost is not None


@pytest.mark.parametrize("field", ["url", "metrics_url"])
def test_a_backend_url_longer_than_any_server_takes_is_refused(tmp_path: Path, field: str) -> None:
    """Review R63 (r63-inventory's finding): a 100,000-character backend URL loaded, to be sent
    with every call and probe; a URL is at most 2,048 characters, refused with its path, cut."""
    path = tmp_path / "inv.yaml"
    long = "http://127.0.0.1:9/" + "a" * 100_000
    urls = {"url": "http://127.0.0.1:9", field: long}
    path.write_text(
        "backends:\n  - {name: b, models: [m], " + ", ".join(f"{k}: '{v}'" for k, v in urls.items()) + "}\n"
    )
    with pytest.raises(InventoryError, match=rf"backends\.0\.{field}") as caught:
        load_inventory(path)
    assert len(str(caught.value)) < 1000, len(str(caught.value))
