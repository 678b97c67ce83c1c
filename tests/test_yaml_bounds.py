"""A hostile YAML file under the size limit is refused while it is parsed, before its node tree
is built: a ``PolicyError`` (or ``InventoryError``) naming the file and the limit it hit, in
bounded memory. Real policies hold a few hundred nodes; these shapes hold millions."""

from __future__ import annotations

import tracemalloc
from collections.abc import Callable
from pathlib import Path

import pytest

from agentgate._yaml import MAX_NODES, load_yaml
from agentgate.dispatch.inventory import MAX_INVENTORY_BYTES, MAX_INVENTORY_NODES, load_inventory
from agentgate.errors import InventoryError, PolicyError
from agentgate.policy import load_policy, parse_policy
from agentgate.policy._load import MAX_POLICY_BYTES

POLICIES = Path(__file__).resolve().parents[1] / "policies"
PEAK_BYTES = 96 * 1024 * 1024
"""Generous: the text itself, a few copies of it, and the nodes up to the budget. Before the
budget was counted while parsing, these shapes peaked at 0.5 to 1.3 GiB."""


def _fill(unit: str, size: int, head: str = "x: [", tail: str = "]") -> str:
    return head + unit * ((size - len(head) - len(tail)) // len(unit)) + tail


SHAPES: dict[str, Callable[[int], str]] = {
    "block list of small items": lambda size: _fill("- a\n", size, "version: 1\nx:\n", ""),
    "flow list of small items": lambda size: _fill("a,", size),
    "flow list of empty mappings": lambda size: _fill("{},", size),
    "flow list of empty lists": lambda size: _fill("[],", size),
    "many keys": lambda size: "version: 1\n" + "".join(f"k{i:09d}: 1\n" for i in range(size // 14)),
    "many tagged items": lambda size: _fill("!!str a,", size),
    "many anchors": lambda size: _fill("&a 1,", size),
    "many aliases of one scalar": lambda size: _fill("*s,", size, "s: &s 1\nx: ["),
}


def _refused_within_bounds(load: Callable[[], object], error: type[Exception]) -> Exception:
    tracemalloc.start()
    try:
        with pytest.raises(error) as info:
            load()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < PEAK_BYTES, f"peak {peak / 2**20:.0f} MiB"
    return info.value


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_a_policy_of_too_many_nodes_is_refused_naming_the_limit(shape: str) -> None:
    text = SHAPES[shape](MAX_POLICY_BYTES - 64)
    error = _refused_within_bounds(lambda: parse_policy(text, source="hostile.yaml"), PolicyError)
    assert isinstance(error, PolicyError)
    assert error.file == "hostile.yaml" and error.line is not None and error.column is not None
    assert f"more than {MAX_NODES} YAML nodes" in error.message
    assert str(error).startswith(f"hostile.yaml:{error.line}:{error.column}: ")


def test_a_policy_file_of_too_many_nodes_is_refused_naming_the_file(tmp_path: Path) -> None:
    path = tmp_path / "hostile.yaml"
    path.write_text(SHAPES["flow list of empty mappings"](MAX_POLICY_BYTES - 64))
    error = _refused_within_bounds(lambda: load_policy(path), PolicyError)
    assert isinstance(error, PolicyError) and error.file == str(path)
    assert f"more than {MAX_NODES} YAML nodes" in error.message


def test_an_inventory_of_too_many_nodes_is_refused_the_same_way(tmp_path: Path) -> None:
    path = tmp_path / "inventory.yaml"
    path.write_text(SHAPES["block list of small items"](MAX_INVENTORY_BYTES - 64))
    error = _refused_within_bounds(lambda: load_inventory(path, read_keys=False), InventoryError)
    assert isinstance(error, InventoryError) and error.file == str(path)
    # Its own limit, five times a policy's: an inventory lists every GPU (review R51).
    assert f"more than {MAX_INVENTORY_NODES} YAML nodes" in error.message


def test_deep_nesting_is_refused_at_once_where_it_nests_too_deep() -> None:
    text = "a: " + "[" * (MAX_POLICY_BYTES - 64)
    error = _refused_within_bounds(lambda: parse_policy(text, source="deep.yaml"), PolicyError)
    assert isinstance(error, PolicyError) and error.file == "deep.yaml"
    # Where PyYAML's own parser refuses it, not in libyaml's words at its own limit (review R93).
    assert "nested more than 100 levels deep" in error.message, error.message
    assert (error.line, error.column) == (1, 103), error


@pytest.mark.parametrize(
    "text",
    [
        "version: 1\nx: " + "a" * (MAX_POLICY_BYTES - 64),
        'version: 1\nx: "' + "a" * (MAX_POLICY_BYTES - 64) + '"',
        "version: 1\n" + "# a comment\n" * ((MAX_POLICY_BYTES - 64) // 12),
    ],
    ids=["long plain scalar", "long quoted scalar", "long comment"],
)
def test_a_few_large_nodes_cost_no_more_than_their_text(text: str) -> None:
    tracemalloc.start()
    try:
        try:
            parse_policy(text, source="big.yaml")
        except PolicyError as exc:
            assert "YAML nodes" not in exc.message  # refused by the schema, not the node budget
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < PEAK_BYTES, f"peak {peak / 2**20:.0f} MiB"


def test_the_billion_laughs_is_refused_by_the_alias_limit() -> None:
    lines = ['a0: &a0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    lines += [f"a{i}: &a{i} [" + ",".join([f"*a{i - 1}"] * 9) + "]" for i in range(1, 10)]
    with pytest.raises(PolicyError, match="more than 16 YAML aliases"):
        load_yaml("\n".join(lines) + "\n", source="laughs.yaml")


def test_a_document_of_exactly_the_budget_loads() -> None:
    items = MAX_NODES - 3  # with the top mapping, its key 'x' and the list: MAX_NODES nodes
    text = "x: [" + "a," * (items - 1) + "a]"
    data, _ = load_yaml(text, source="p.yaml")
    assert len(data["x"]) == items
    with pytest.raises(PolicyError, match=f"more than {MAX_NODES} YAML nodes") as info:
        load_yaml(text[:-1] + ",a]", source="p.yaml")
    assert (info.value.line, info.value.column) == (1, len(text) + 1)


@pytest.mark.parametrize("name", ["support", "research_team", "gpu_platform"])
def test_real_policies_are_far_below_the_budget(name: str) -> None:
    assert load_policy(POLICIES / f"{name}.yaml").document.version == 1
