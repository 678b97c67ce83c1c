"""Safe YAML with locations: what a policy file may not contain, and where errors point."""

from __future__ import annotations

import pytest

from agentgate._yaml import MAX_ALIASES, load_yaml
from agentgate.errors import PolicyError


def _error(text: str) -> PolicyError:
    with pytest.raises(PolicyError) as info:
        load_yaml(text, source="p.yaml")
    return info.value


def test_locations_give_line_and_column_of_keys_and_values() -> None:
    data, where = load_yaml("version: 1\nroles:\n  a:\n    ttl_s: 60\n", source="p.yaml")
    assert data == {"version": 1, "roles": {"a": {"ttl_s": 60}}}
    key = where.of(("roles", "a", "ttl_s"), key=True)
    assert key is not None and (key.line, key.column) == (4, 5)
    mark = where.of(("roles", "a", "ttl_s"))
    assert mark is not None and (mark.line, mark.column) == (4, 12)
    deeper = where.of(("roles", "a", "ttl_s", "not", "there"))
    assert deeper == mark


def test_empty_document_is_none() -> None:
    assert load_yaml("# only a comment\n", source="p.yaml")[0] is None


def test_duplicate_key_is_refused_with_both_lines() -> None:
    error = _error("a: 1\nb:\n  c: 1\n  c: 2\n")
    assert (error.file, error.line, error.column) == ("p.yaml", 4, 3)
    assert "first at line 3" in error.message and error.hint


@pytest.mark.parametrize(
    "text",
    [
        "a: !!python/object:os.system {}\n",
        "a: !!python/name:os.system ''\n",
        "a: !include other.yaml\n",
        "a: !!binary aGVsbG8=\n",
        "a: !!set {x, y}\n",
    ],
)
def test_tags_outside_the_core_schema_are_refused(text: str) -> None:
    error = _error(text)
    assert "not allowed" in error.message and error.line == 1


def test_alias_bomb_is_refused_before_it_expands() -> None:
    lines = ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for i, name in enumerate("bcdefghij"):
        prev = "abcdefghij"[i]
        lines.append(f"{name}: &{name} [" + ",".join([f"*{prev}"] * 9) + "]")
    error = _error("\n".join(lines) + "\n")
    assert "aliases" in error.message and error.line is not None


def test_a_few_aliases_are_fine() -> None:
    text = "x: &x {le: 5}\n" + "".join(f"k{i}: *x\n" for i in range(MAX_ALIASES))
    data, _ = load_yaml(text, source="p.yaml")
    assert data["k0"] == {"le": 5}


def test_merge_keys_and_non_string_keys_are_refused() -> None:
    assert "merge" in _error("a: &a {x: 1}\nb:\n  <<: *a\n").message
    assert "plain strings" in _error("1: one\n").message
    assert "plain strings" in _error("yes: 1\n").message


def test_malformed_yaml_names_the_position() -> None:
    error = _error("a: [1, 2\nb: 3\n")
    assert error.line is not None and error.column is not None and "malformed" in error.message


def test_several_documents_are_refused() -> None:
    assert "malformed" in _error("a: 1\n---\nb: 2\n").message


def test_inventory_files_get_the_same_protection_as_policies() -> None:
    """One loader for every YAML file: an inventory alias bomb is refused with its own error type."""
    from agentgate.dispatch import parse_inventory
    from agentgate.errors import InventoryError

    bomb = "a: &a [x, x]\n" + "".join(
        f"b{i}: &b{i} [*{'a' if i == 0 else f'b{i - 1}'}, *{'a' if i == 0 else f'b{i - 1}'}]\n"
        for i in range(20)
    )
    with pytest.raises(InventoryError, match="aliases"):
        parse_inventory(bomb, source="inv.yaml")
    with pytest.raises(InventoryError, match="merge keys"):
        parse_inventory("base: &b {x: 1}\nnodes:\n  <<: *b\n", source="inv.yaml")


def test_yaml_1_1_booleans_are_text_and_yaml_1_2_booleans_stay_booleans() -> None:
    """``in: [NO, SE, DK]`` holds Norway, not False (the YAML 1.1 "Norway problem")."""
    data, _ = load_yaml(
        "in: [NO, SE, DK]\nflags: [yes, No, on, OFF, y]\nb: [true, False, TRUE]\n", source="p.yaml"
    )
    assert data == {
        "in": ["NO", "SE", "DK"],
        "flags": ["yes", "No", "on", "OFF", "y"],
        "b": [True, False, True],
    }


def test_sexagesimal_numbers_are_text_and_plain_integers_are_integers() -> None:
    data, _ = load_yaml("t: 10:30\nf: 1:30.5\nn: [0, -7, +5, 1_000, 0x1F, 0b101]\n", source="p.yaml")
    assert data == {"t": "10:30", "f": "1:30.5", "n": [0, -7, 5, 1000, 31, 5]}


def test_an_integer_with_a_leading_zero_is_refused_as_ambiguous() -> None:
    error = _error("a:\n  b: 0755\n")
    assert (error.line, error.column) == (2, 6) and "ambiguous number '0755'" in error.message


def test_an_integer_too_long_to_convert_is_a_policy_error() -> None:
    error = _error("a: " + "9" * 5000 + "\n")
    assert error.line == 1 and "number of 5000 characters" in error.message
