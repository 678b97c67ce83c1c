"""Which earlier principal the loader names, for a name that reads as two (review R91, second
reading).

``bobI`` reads as ``bobi`` (its ``I`` case folded) and as ``bobl`` (its ``I`` taken for ``l``).
A policy of principals bobi, bobl and bobI is refused at bobI, naming an earlier principal it
reads as; which one was chosen by the order of a frozenset of readings, which each process's
hash seed sets: "bobI and bobl read alike" in some processes, "bobI and bobi differ only in
case" in others. The first of them in code point order is now named, in every process, as
``principals_named`` lists them."""

from __future__ import annotations

from pathlib import Path

import pytest
from _hash_seeds import printed_under_seeds_ordering_apart

from agentgate.errors import PolicyError
from agentgate.keys import SigningKey
from agentgate.policy import parse_policy

ROOT, BOBI, BOBL, BOBI_UPPER = (SigningKey(bytes([i]) * 32) for i in (1, 2, 3, 4))
POLICY = f"""version: 1
trust_anchors:
  root: {{did: {ROOT.did}}}
principals:
  bobi: {{kind: agent, did: {BOBI.did}, roles: [r]}}
  bobl: {{kind: agent, did: {BOBL.did}, roles: [r]}}
  bobI: {{kind: agent, did: {BOBI_UPPER.did}, roles: [r]}}
tools:
  t.x: {{}}
roles:
  r: {{capabilities: [{{resource: tool:t.x}}]}}
"""

_LOAD = """
import sys
from agentgate.errors import PolicyError
from agentgate.policy import load_policy
try:
    load_policy(sys.argv[1] + "/p.yaml")
except PolicyError as refused:
    print(refused.line, refused.column, refused.message)
"""


def test_the_name_read_as_is_the_same_in_every_process(tmp_path: Path) -> None:
    """Two processes whose hash seeds order the readings apart (tests/_hash_seeds.py) name the
    same earlier principal: bobi, the first in code point order."""
    printed = printed_under_seeds_ordering_apart("bobI", _LOAD, POLICY, tmp_path)
    answers = [out.strip() for out in printed]
    expected = "7 3 principals bobI and bobi differ only in case: the Gate compares"
    assert answers[0] == answers[1]
    assert answers[0].startswith(expected)


def test_the_name_read_as_in_this_process() -> None:
    with pytest.raises(PolicyError) as refused:
        parse_policy(POLICY, source="p.yaml")
    assert refused.value.message.startswith("principals bobI and bobi differ only in case")
    assert (refused.value.line, refused.value.column) == (7, 3)
