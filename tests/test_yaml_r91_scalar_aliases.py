"""Aliases of one scalar are read once (review R91).

``MAX_ALIASES`` counts aliases of lists and mappings, which expand when built; an alias of a
scalar expands to nothing and is not counted (a file may hold up to ``MAX_NODES`` of them). But
the builder read the scalar's whole text again at every alias (the lone surrogate search, the
number patterns, the key's NFC form): one non-ASCII scalar of 4 MiB aliased 40,000 times, a file
under the 8 MiB a policy may hold, took minutes to load, and a valid policy whose 3,000 tenants'
descriptions alias one 2 MiB text took seconds. Each scalar node is now read once, as a value and
as a key, whatever the number of its aliases."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest

import agentgate._yaml
from agentgate._yaml import load_yaml
from agentgate.policy import parse_policy

LONG = "\u00e9" * 100_000
ALIASES = 1_000


@pytest.fixture
def searched(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """The length of each text searched for a lone surrogate (every non-ASCII text scalar read)."""
    lengths: list[int] = []
    pattern = agentgate._yaml._SURROGATE

    class Counted:
        def search(self, text: str) -> re.Match[str] | None:
            lengths.append(len(text))
            return pattern.search(text)

    monkeypatch.setattr(agentgate._yaml, "_SURROGATE", Counted())
    yield lengths


def test_a_value_aliased_many_times_is_read_once(searched: list[int]) -> None:
    """A valid policy: a thousand tenants whose description aliases one long text load, each
    holding that text, and the text is searched once, not once per alias."""
    tenants = "".join(f"  t{i}: {{description: *a}}\n" for i in range(ALIASES))
    policy = parse_policy(f'version: 1\ndescription: &a "{LONG}"\ntenants:\n{tenants}')
    assert len(policy.document.tenants) == ALIASES
    assert all(t.description == LONG for t in policy.document.tenants.values())
    assert searched.count(len(LONG)) == 1


def test_a_key_aliased_in_many_mappings_is_read_once(searched: list[int]) -> None:
    """One key anchored in a mapping and aliased in a thousand others is read (searched,
    normalized) once."""
    items = "".join("- {*k: 1}\n" for _ in range(ALIASES))
    data, _ = load_yaml(f'- ? &k "{LONG}"\n  : 0\n{items}', source="<test>")  # '?': a key this long
    assert data[0] == {LONG: 0}
    assert data[-1] == {LONG: 1}
    assert len(data) == ALIASES + 1
    assert searched.count(len(LONG)) == 1


def test_an_inexact_float_is_located_at_each_alias() -> None:
    """Read once, an inexact float is still recorded at every path it is aliased to, so the
    loader refuses each (``Locations.inexact``)."""
    data, locations = load_yaml("a: &f 9007199254740993.0\nb: *f\nc: *f\n", source="<test>")
    assert data == {"a": 2.0**53, "b": 2.0**53, "c": 2.0**53}
    assert set(locations.inexact) == {("a",), ("b",), ("c",)}
