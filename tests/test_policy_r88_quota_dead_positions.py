"""Review R88: ``quota_counts_nothing`` places each entry's finding by the entry's own position.

Each entry of a quota's ``resources`` that its unit never counts was looked up again with
``list.index``, so linting a quota of n such entries cost n^2 (40,000 entries, a 509 KB policy:
11 s), and an entry written twice had both findings put on its first line. The positions are now
kept while the entries are read.
"""

from __future__ import annotations

from agentgate.keys import SigningKey
from agentgate.policy import lint, parse_policy

_HEAD = f"""version: 1
name: p
trust_anchors:
  root:
    did: {SigningKey.generate().did}
tenants:
  t: {{}}
quotas:
  q:
    tenant: t
    window_s: 60
    limit: 5
    unit: tokens
    resources:
      - model:*
"""
_FIRST_ENTRY_LINE = _HEAD.count("\n")  # the line of model:*, numbered from 1


def _dead(entries: list[str]) -> list[tuple[str, int | None]]:
    text = _HEAD + "".join(f"      - {entry}\n" for entry in entries)
    return [
        (f.message, f.line)
        for f in lint(parse_policy(text, source="p.yaml"))
        if f.code == "quota_counts_nothing"
    ]


def test_an_entry_written_twice_is_reported_on_each_of_its_lines() -> None:
    assert _dead(["tool:a", "tool:b", "tool:a"]) == [
        (
            "quota q counts tokens, which calls on tool:a do not use: the entry counts nothing",
            _FIRST_ENTRY_LINE + 1,
        ),
        (
            "quota q counts tokens, which calls on tool:b do not use: the entry counts nothing",
            _FIRST_ENTRY_LINE + 2,
        ),
        (
            "quota q counts tokens, which calls on tool:a do not use: the entry counts nothing",
            _FIRST_ENTRY_LINE + 3,
        ),
    ]


def test_many_dead_entries_each_get_their_own_finding_and_line_in_order() -> None:
    entries = [f"tool:t{i}" for i in range(2000)]
    found = _dead(entries)
    assert [message for message, _ in found] == [
        f"quota q counts tokens, which calls on {entry} do not use: the entry counts nothing"
        for entry in entries
    ]
    assert [line for _, line in found] == [_FIRST_ENTRY_LINE + 1 + i for i in range(len(entries))]
