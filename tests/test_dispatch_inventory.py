"""The inventory: validated like a policy, with the topology lookups the router and broker use."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentgate.dispatch.inventory import inventory_from_mapping, load_inventory, parse_inventory
from agentgate.errors import BackendCredentialError, InventoryError

REPO = Path(__file__).resolve().parents[1]

SMALL = """\
racks: [{name: r1}, {name: r2}]
nodes:
  - {name: n1, rack: r1}
  - {name: n2, rack: r2}
gpus:
  - {id: g0, type: H100, memory_gb: 80, node: n1, nvlink_domain: d1}
  - {id: g1, type: H100, memory_gb: 80, node: n1, nvlink_domain: d1}
  - {id: g2, type: H200, memory_gb: 141, node: n1}
  - {id: g3, type: H200, memory_gb: 141, node: n2, nvlink_domain: d2}
backends:
  - name: b1
    url: http://127.0.0.1:8000
    engine: vllm
    models: [m]
    gpus: [g0, g1]
"""


def test_example_inventory_loads_and_answers_topology_questions() -> None:
    inv = load_inventory(REPO / "policies" / "inventory.yaml")
    assert len(inv.gpus) == 8
    assert inv.domain_of("node-a/0") == "nvl-a"
    assert inv.node_of("node-b/1") == "node-b"
    assert inv.rack_of("node-b/1") == "rack-1"
    assert [b.name for b in inv.backends_serving("qwen3-32b")] == ["qwen-a23"]
    assert inv.backend("llama-a0").chat_url == "http://127.0.0.1:8100/v1/chat/completions"


def test_shared_level_is_the_innermost_common_group() -> None:
    inv = parse_inventory(SMALL)
    assert inv.shared_level(["g0", "g1"]) == "nvlink_domain"
    assert inv.shared_level(["g0", "g2"]) == "node"
    assert inv.shared_level(["g0", "g3"]) is None
    assert inv.domain_of("g2") == "gpu:g2"
    assert {g.id for g in inv.gpus_in("node", "n1")} == {"g0", "g1", "g2"}
    assert set(inv.groups("rack")) == {"r1", "r2"}


@pytest.mark.parametrize(
    ("text", "line", "words"),
    [
        (SMALL.replace("gpus: [g0, g1]", "gpus: [g0, g9]"), 15, "unknown gpu 'g9'"),
        (SMALL.replace("node: n2,", "node: n7,"), 9, "unknown node 'n7'"),
        (SMALL.replace("engine: vllm", "engine: vlm"), 13, "engine"),
        (SMALL.replace("models: [m]", "models: [m]\n    max_concurency: 4"), 15, "unknown field"),
        (SMALL.replace("memory_gb: 141, node: n2", "memory_gb: -1, node: n2"), 9, "memory_gb"),
        (SMALL.replace("{name: r2}", "{name: r1}"), 1, "duplicate rack"),
        ("a: !!python/object/apply:os.system [ls]\n", 1, "is not allowed"),
        ("gpus: [\n", 2, "malformed YAML"),
        ("nodes: {a: 1}\nnodes: {b: 2}\n", 2, "duplicate key"),
    ],
)
def test_bad_inventory_is_rejected_with_file_and_line(text: str, line: int, words: str) -> None:
    with pytest.raises(InventoryError) as info:
        parse_inventory(text, source="inv.yaml")
    assert str(info.value).startswith(f"inv.yaml:{line}:")
    assert words in str(info.value)


def test_nvlink_domain_cannot_span_racks() -> None:
    text = SMALL.replace("node: n2, nvlink_domain: d2", "node: n2, nvlink_domain: d1")
    with pytest.raises(InventoryError, match="spans racks"):
        parse_inventory(text)


def test_hierarchy_must_run_innermost_first() -> None:
    with pytest.raises(InventoryError, match="innermost"):
        parse_inventory("interconnect: {hierarchy: [rack, node]}\n")


def test_unknown_lookup_is_a_typed_error() -> None:
    inv = parse_inventory(SMALL)
    with pytest.raises(InventoryError, match="unknown gpu"):
        inv.domain_of("nope")


def test_missing_file_is_a_typed_error(tmp_path: Path) -> None:
    with pytest.raises(InventoryError, match="cannot read"):
        load_inventory(tmp_path / "absent.yaml")


def test_a_declared_kv_capacity_beyond_any_real_cache_is_a_load_error() -> None:
    """The router multiplies the capacity by floats: an absurd one would overflow every call."""
    text = "backends:\n  - {name: b1, url: 'http://127.0.0.1:8000', engine: vllm, models: [m], kv_capacity_tokens: 10000000000000}\n"
    with pytest.raises(InventoryError, match=r"inv\.yaml:2"):
        parse_inventory(text, source="inv.yaml")
    ok = text.replace("10000000000000", "400000")
    assert parse_inventory(ok).backends[0].kv_capacity_tokens == 400000


def test_a_backend_url_with_credentials_is_refused_without_echoing_them() -> None:
    """``http://user:PASSWORD@host`` was accepted, and httpx logs the URL it calls at INFO: the
    password was written on every health probe and every call (review R9)."""
    with pytest.raises(InventoryError, match="carries credentials") as refused:
        inventory_from_mapping(
            {"backends": [{"name": "b", "url": "http://proxy:CANARY@127.0.0.1:9", "models": ["m"]}]}
        )
    assert "CANARY" not in str(refused.value)


@pytest.mark.parametrize("field", ["url", "metrics_url"])
def test_a_backend_url_with_a_query_string_is_refused_without_echoing_it(field: str) -> None:
    """A token in a query string (``/metrics?token=...``) was accepted and logged by httpx with
    every scrape (review R48, leaks); a query string in ``url`` made a chat URL with the path
    behind it."""
    backend = {"name": "b", "url": "http://127.0.0.1:9", "models": ["m"]}
    backend[field] = "http://127.0.0.1:9/metrics?token=CANARY"
    with pytest.raises(InventoryError, match="query string") as refused:
        inventory_from_mapping({"backends": [backend]})
    assert "CANARY" not in str(refused.value)


# --- backend credentials ----------------------------------------------------------------------


@pytest.mark.parametrize("key", ["sk-clé-non-ascii-1234", "sk-\u00a0nbsp-1234567"], ids=["non-ascii", "nbsp"])
def test_a_key_an_authorization_header_cannot_carry_is_refused_at_load(
    monkeypatch: pytest.MonkeyPatch, key: str
) -> None:
    """Kills: the key check loosened to ``isprintable`` (a non-ASCII key accepted at load, to fail
    inside every call's header encoding). Rule: the key is printable ASCII or the inventory is
    refused, naming the variable, never the key."""
    monkeypatch.setenv("R47_BACKEND_KEY", key)
    backend = {"name": "b0", "url": "http://127.0.0.1:9", "models": ["m"], "api_key_env": "R47_BACKEND_KEY"}
    with pytest.raises(BackendCredentialError) as raised:
        inventory_from_mapping({"backends": [backend]})
    assert "R47_BACKEND_KEY" in str(raised.value) and key not in str(raised.value)


def test_a_url_with_a_user_name_is_refused() -> None:
    """Kills: ``_usable_url`` refusing only a password (``http://token@host`` passed: the user
    part is where a bare token goes, and HTTP clients log the URL). Rule: no credentials in a
    backend URL, user name included."""
    backend = {"name": "b0", "url": "http://sk-secret-token@127.0.0.1:9", "models": ["m"]}
    with pytest.raises(InventoryError) as raised:
        inventory_from_mapping({"backends": [backend]})
    assert "credentials" in str(raised.value)


# --- GPUs and the interconnect hierarchy ------------------------------------------------------


_NODES = {"nodes": [{"name": "n1"}, {"name": "n2"}]}


def test_two_gpus_with_one_id_are_refused() -> None:
    """I7 (GPU ids not checked unique): two GPUs listed under one id (on two nodes) are an
    InventoryError naming the id, not one GPU the broker could lease twice under that name."""
    data = {
        **_NODES,
        "gpus": [
            {"id": "g0", "type": "H100", "memory_gb": 80, "node": "n1"},
            {"id": "g0", "type": "H100", "memory_gb": 80, "node": "n2"},
        ],
    }
    with pytest.raises(InventoryError, match="duplicate gpu 'g0'"):
        inventory_from_mapping(data)


@pytest.mark.parametrize("levels", [["node", "node"], ["nvlink_domain", "node", "node", "rack"]])
def test_a_hierarchy_level_listed_twice_is_refused(levels: list[str]) -> None:
    """I15 (levels not checked distinct): a hierarchy that lists a level twice is an
    InventoryError, not accepted as an order (it is in order, but names one group twice)."""
    with pytest.raises(InventoryError, match="distinct"):
        inventory_from_mapping({"interconnect": {"hierarchy": levels}})
