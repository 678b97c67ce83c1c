"""Which earlier names lint names, for a name that reads as two (review R91, second reading).

``bobI`` reads as ``bobi`` (its ``I`` case folded) and as ``bobl`` (its ``I`` taken for ``l``),
which read apart. With roles bobi, bobl and bobI, ``names_read_alike`` told bobI apart from
the earlier name it shares a reading with first in the order of a frozenset of readings, which
each process's hash seed sets: "bobI and bobl read alike" in some processes, and nothing in
others (it took bobI for bobi, which differs only in case: ``names_differ_only_in_case``'s). The
earlier names are now taken in code point order, so every process reports both: bobI differs
only in case from bobi and reads as bobl."""

from __future__ import annotations

import json
from pathlib import Path

from _hash_seeds import printed_under_seeds_ordering_apart

from agentgate.policy import lint, parse_policy

POLICY = """version: 1
tools:
  t.x: {}
roles:
  bobi: {capabilities: [{resource: tool:t.x}]}
  bobl: {capabilities: [{resource: tool:t.x}]}
  bobI: {capabilities: [{resource: tool:t.x}]}
"""
EXPECTED = [
    ["names_differ_only_in_case", 7, "roles bobI and bobi differ only in case"],
    ["names_read_alike", 7, "roles bobI and bobl read alike (Unicode's confusables)"],
]

_LINT = """
import json, sys
from agentgate.policy import lint, load_policy
found = [f for f in lint(load_policy(sys.argv[1] + "/p.yaml")) if f.code.startswith("names_")]
print(json.dumps([[f.code, f.line, f.message.partition(":")[0]] for f in found]))
"""


def test_lint_names_the_same_earlier_names_in_every_process(tmp_path: Path) -> None:
    """Two processes whose hash seeds order the readings apart (tests/_hash_seeds.py)."""
    printed = printed_under_seeds_ordering_apart("bobI", _LINT, POLICY, tmp_path)
    answers = [json.loads(out) for out in printed]
    assert answers[0] == answers[1] == EXPECTED


def test_lint_names_both_in_this_process() -> None:
    found = [f for f in lint(parse_policy(POLICY)) if f.code.startswith("names_")]
    assert [[f.code, f.line, f.message.partition(":")[0]] for f in found] == EXPECTED
