"""Review R89: ``Gate.authorize`` refused a ``call_id`` or ``run_id`` holding a lone surrogate
(text that is not valid Unicode) with an ``InputError`` naming it, but only checked that
``asked_in`` was a pair of text. A bad scope then failed with an ``InputError`` naming no
argument, a bad version with a ``StoreError`` (kept for a store that fails), and on a gate whose
quorum is above one an approver's vote and its ``approval_given`` entry were committed first.
``asked_in`` is now checked as ``call_id`` is, by ``authorize`` and ``record_refusal``, before
anything is written.

Real components: a Gate on a SQLite file; ``pay`` needs two of alice's and bob's approvals."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from agentgate.capabilities import Call
from agentgate.errors import InputError
from agentgate.gate import AgentIdentity, Approval, Gate
from agentgate.keys import SigningKey
from agentgate.policy import parse_policy
from agentgate.store import SQLiteStore

POLICY = """
version: 1
trust_anchors: {{root: {{did: "{root}"}}}}
principals:
  agent: {{kind: agent, did: "{agent}", roles: [worker]}}
  alice: {{kind: human, did: "{alice}"}}
  bob: {{kind: human, did: "{bob}"}}
tools:
  pay:
    args: {{amount: {{type: integer, required: true}}}}
roles:
  worker:
    kind: agent
    capabilities: [{{resource: tool:pay}}]
    ttl_s: 600
approvals:
  pay:
    resource: tool:pay
    approvers: [alice, bob]
    quorum: 2
"""

PAY = Call.tool("pay", {"amount": 1})
SURROGATE = "\ud800"


@pytest.fixture
def desk(tmp_path: Path) -> Iterator[tuple[Gate, AgentIdentity, SigningKey]]:
    """A Gate, its agent and alice's key."""
    keys = {name: SigningKey.generate() for name in ("root", "agent", "alice", "bob")}
    text = POLICY.format(**{n: k.did for n, k in keys.items()})
    with Gate(parse_policy(text, source="p.yaml"), SQLiteStore(tmp_path / "a.db")) as gate:
        yield gate, gate.issue(keys["root"], name="agent", key=keys["agent"], role="worker"), keys["alice"]


def _size(gate: Gate) -> int:
    gate.flush()
    return gate.audit.size()


@pytest.mark.parametrize(
    ("asked_in", "part"),
    [((SURROGATE, "v"), "scope"), (("s", SURROGATE), "version")],
    ids=["scope", "version"],
)
def test_asked_in_that_is_not_valid_unicode_is_refused_naming_it(
    desk: tuple[Gate, AgentIdentity, SigningKey], asked_in: tuple[str, str], part: str
) -> None:
    gate, agent, _ = desk
    size = _size(gate)

    with pytest.raises(InputError, match=rf"^asked_in's {part} must be valid Unicode text"):
        gate.authorize(agent, PAY, call_id="c", asked_in=asked_in)
    with pytest.raises(InputError, match=rf"^asked_in's {part} must be valid Unicode text"):
        gate.record_refusal(agent, PAY, ["refused"], call_id="c", asked_in=asked_in)

    assert _size(gate) == size


def test_a_vote_presented_with_a_bad_version_is_not_recorded(
    desk: tuple[Gate, AgentIdentity, SigningKey],
) -> None:
    gate, agent, alice = desk
    asked = gate.authorize(agent, PAY, call_id="c", asked_in=("s", "v"))
    assert asked.request is not None
    yes = Approval.parse(gate.approve(asked.approval_payload(), alice))
    size = _size(gate)

    with pytest.raises(InputError, match=r"^asked_in's version must be valid Unicode text"):
        gate.authorize(agent, PAY, call_id="c", asked_in=("s", SURROGATE), approval=yes)

    assert _size(gate) == size
    assert gate.approvals.approvers(asked.request["id"]) == ()


def test_asked_in_beyond_ascii_that_is_valid_unicode_is_taken(
    desk: tuple[Gate, AgentIdentity, SigningKey],
) -> None:
    gate, agent, _ = desk
    asked = gate.authorize(agent, PAY, call_id="c", asked_in=("fil-é", "版本"))
    assert asked.request is not None and not asked.allowed
