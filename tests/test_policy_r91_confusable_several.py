"""A name that reads as two principals (review R91).

Reading alike is not transitive: a name has two readings (``_confusables.readings``), and
``bobI`` reads as ``bobi`` (its ``I`` case folded) and as ``bobl`` (its ``I`` taken for ``l``),
two principals that read apart, so the policy loads. The Gate took such a name for one of them
by the order of a frozenset, which each process's hash seed sets: ``Gate.issue(name="bobI")`` on
bobi's key was issued in some processes, an agent a reader takes for bobl, and refused in others.
Such a name is now refused on any key, the same in every process."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from _hash_seeds import printed_under_seeds_ordering_apart

from agentgate.authority import issue
from agentgate.capabilities import Call
from agentgate.errors import Denied
from agentgate.gate import AgentIdentity, Gate
from agentgate.gate._checks import principal_named, principals_named
from agentgate.keys import SigningKey

ROOT, BOBI, BOBL = (SigningKey(bytes([i]) * 32) for i in (1, 2, 3))
POLICY = f"""version: 1
trust_anchors:
  root: {{did: {ROOT.did}}}
principals:
  bobi: {{kind: agent, did: {BOBI.did}, roles: [r]}}
  bobl: {{kind: agent, did: {BOBL.did}, roles: [r]}}
tools:
  t.x: {{}}
roles:
  r:
    capabilities: [{{resource: tool:t.x}}]
    delegation: {{max_depth: 2, capabilities: [{{resource: tool:t.x}}]}}
"""
CALL = Call.tool("t.x", {})

_DECIDE = """
import json, sys
from agentgate.authority import issue
from agentgate.capabilities import Call
from agentgate.errors import Denied
from agentgate.gate import AgentIdentity, Gate
from agentgate.gate._checks import principal_named
from agentgate.keys import SigningKey

root, bobi = SigningKey(bytes([1]) * 32), SigningKey(bytes([2]) * 32)
folder = sys.argv[1]
gate = Gate.open(folder + "/p.yaml", folder + "/s.db")
try:
    gate.issue(root, name="bobI", key=bobi, role="r")
    issued = "issued"
except Denied as refused:
    issued = refused.finding.code
unbound = issue(root, bobi.public, ["tool:t.x"], ttl=60, max_depth=1, purpose="role r")
decided = gate.authorize(AgentIdentity("bobI", bobi, unbound), Call.tool("t.x", {}))
gate.close()
print(json.dumps([principal_named(gate.policy, "bobI"), issued, [f.code for f in decided.findings]]))
"""


@pytest.fixture
def gate(tmp_path: Path) -> Iterator[Gate]:
    (tmp_path / "p.yaml").write_text(POLICY)
    opened = Gate.open(tmp_path / "p.yaml", tmp_path / "s.db")
    yield opened
    opened.close()


def test_the_name_reads_as_both_principals(gate: Gate) -> None:
    """``bobI`` reads as each of two principals that read apart, listed in code point order."""
    assert principals_named(gate.policy, "bobI") == ("bobi", "bobl")
    assert principals_named(gate.policy, "bobi") == ("bobi",)
    assert principals_named(gate.policy, "carol") == ()
    assert principal_named(gate.policy, "bobI") == "bobi"


def test_the_name_is_refused_on_either_principals_key_in_every_process(tmp_path: Path) -> None:
    """Review R91: under one hash seed ``Gate.issue(name="bobI")`` on bobi's key was issued (and
    a decision on it made), under another refused. Now two processes whose seeds order the
    readings apart (tests/_hash_seeds.py), each on its own store, answer alike: refused,
    ``inherited_identity``, by ``Gate.issue`` and by a decision."""
    printed = printed_under_seeds_ordering_apart("bobI", _DECIDE, POLICY, tmp_path)
    answers = [json.loads(out) for out in printed]
    assert answers[0] == answers[1] == ["bobi", "inherited_identity", ["inherited_identity"]]


@pytest.mark.parametrize("key", [BOBI, BOBL])
def test_the_name_is_not_delegated_to_either_principals_key(gate: Gate, key: SigningKey) -> None:
    """``Gate.delegate`` refuses the name on either principal's key, naming both."""
    parent = gate.issue(ROOT, name="bobi", key=BOBI, role="r")
    with pytest.raises(Denied, match="reads as principals bobi and bobl") as refused:
        gate.delegate(parent, name="bobI", key=key, capabilities=["tool:t.x"], ttl=timedelta(minutes=1))
    assert refused.value.finding is not None
    assert refused.value.finding.code == "inherited_identity"


def test_a_decision_under_the_name_is_refused_naming_both(gate: Gate) -> None:
    """A grant that binds no name, presented as ``bobI`` on bobl's key, is refused whatever the
    process: the name reads as bobi too."""
    unbound = issue(ROOT, BOBL.public, ["tool:t.x"], ttl=60, max_depth=1, purpose="role r")
    decided = gate.authorize(AgentIdentity("bobI", BOBL, unbound), CALL)
    assert not decided.allowed
    (finding,) = decided.findings
    assert finding.code == "inherited_identity"
    assert "reads as principals bobi and bobl" in finding.message
