"""An approval whose request id was changed on its way to another request's (review R93).

``Approval.sign`` covers the call hash, not the request id: a payload whose ``id`` was swapped
for another pending request's is signed as it stands. Presented with its call, such an approval
is not counted (``approval_required``, "given for another call", on the call's own request), and
the request it names is left as it was: until review R93 the vote re-tallied that request under
this call's rule (its quorum, its counted voters, approved) before refusing the approval, and the
change committed; with a quorum of one the call was denied, its own request left pending and the
``deny`` entry referring to nothing.

Real components: a Gate over a SQLite file."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from agentgate.capabilities import Call
from agentgate.gate import AgentIdentity, Approval, Gate
from agentgate.keys import SigningKey
from agentgate.policy import parse_policy
from agentgate.store import SQLiteStore, Store
from agentgate.store._postgres import PostgresStore

POLICY = """
version: 1
trust_anchors: {{root: {{did: "{root}"}}}}
principals:
  bot: {{kind: agent, did: "{bot}", roles: [worker]}}
  other: {{kind: agent, did: "{other}", roles: [worker]}}
  carol: {{kind: human, did: "{carol}"}}
  dave: {{kind: human, did: "{dave}"}}
  erin: {{kind: human, did: "{erin}"}}
tools:
  pay: {{args: {{amount: {{type: integer, required: true}}}}}}
  wire: {{args: {{amount: {{type: integer, required: true}}}}}}
roles:
  worker:
    kind: agent
    capabilities: [{{resource: tool:pay}}, {{resource: tool:wire}}]
    ttl_s: 600
approvals:
  pay: {{resource: tool:pay, approvers: [carol, dave], quorum: {pay_quorum}}}
  wire: {{resource: tool:wire, approvers: [carol, dave, erin], quorum: 3}}
"""

PAY = Call.tool("pay", {"amount": 1})
WIRE = Call.tool("wire", {"amount": 5})


@dataclass
class Office:
    gate: Gate
    keys: dict[str, SigningKey]
    bot: AgentIdentity
    other: AgentIdentity


def _office(tmp_path: Path, pay_quorum: int, store: Store | None = None) -> Office:
    keys = {n: SigningKey.generate() for n in ("root", "bot", "other", "carol", "dave", "erin")}
    text = POLICY.format(pay_quorum=pay_quorum, **{n: k.did for n, k in keys.items()})
    gate = Gate(parse_policy(text), store or SQLiteStore(tmp_path / "s.db"))
    bot = gate.issue(keys["root"], name="bot", key=keys["bot"], role="worker")
    other = gate.issue(keys["root"], name="other", key=keys["other"], role="worker")
    return Office(gate, keys, bot, other)


@pytest.fixture(params=[1, 2], ids=["pay-quorum-1", "pay-quorum-2"])
def office(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Office]:
    made = _office(tmp_path, request.param)
    yield made
    made.gate.close()


def _wire_with_two_votes(office: Office) -> str:
    """other's wire call (quorum 3) with carol's and dave's votes in; its request id."""
    gate = office.gate
    asked = gate.authorize(office.other, WIRE, call_id="w1")
    assert asked.request is not None
    for who in ("carol", "dave"):
        given = Approval.parse(gate.approve(asked.request, office.keys[who]))
        assert gate.authorize(office.other, WIRE, call_id="w1", approval=given).needs_approval
    return str(asked.request["id"])


def test_an_approval_naming_another_calls_request_leaves_that_request_as_it_was(office: Office) -> None:
    gate = office.gate
    wire_id = _wire_with_two_votes(office)
    before = (gate.approvals.get(wire_id), gate.approvals.counted_among(wire_id))
    assert before[0].state == "pending" and before[0].quorum == 3
    asked = gate.authorize(office.bot, PAY, call_id="p1")
    assert asked.request is not None
    forged = Approval.sign(dict(asked.request, id=wire_id), office.keys["carol"])

    resumed = gate.authorize(office.bot, PAY, call_id="p1", approval=forged)

    assert resumed.needs_approval, resumed.reasons
    assert any("not counted: it was given for another call" in r for r in resumed.reasons)
    assert (gate.approvals.get(wire_id), gate.approvals.counted_among(wire_id)) == before
    assert wire_id in [r.id for r in gate.approvals.open_records()]


def test_the_answer_asks_the_calls_own_request_and_its_entry_refers_to_it(office: Office) -> None:
    gate = office.gate
    wire_id = _wire_with_two_votes(office)
    asked = gate.authorize(office.bot, PAY, call_id="p1")
    assert asked.request is not None and asked.audit_index is not None
    own = str(asked.request["id"])
    forged = Approval.sign(dict(asked.request, id=wire_id), office.keys["carol"])

    resumed = gate.authorize(office.bot, PAY, call_id="p1", approval=forged)

    assert resumed.needs_approval and resumed.request is not None
    assert resumed.request["id"] == own and gate.approvals.get(own).state == "pending"
    last = list(gate.audit.entries())[-1]
    assert last.kind == "approval_required" and last.ref == asked.audit_index
    # The call's own request still takes its approvers' yes.
    for who in ("carol", "dave"):
        given = Approval.parse(gate.approve(asked.request, office.keys[who]))
        answer = gate.authorize(office.bot, PAY, call_id="p1", approval=given)
        if answer.allowed:
            break
    assert answer.allowed


@pytest.mark.postgres
def test_the_check_reads_in_the_decisions_transaction_on_a_pool_of_one(
    tmp_path: Path, postgres_url: str
) -> None:
    """Regression review of R93: the check read the request in a transaction of its own, opened
    inside the decision's: on PostgreSQL a second pool connection, which a pool of one never
    gives. A valid approval waited out the pool's timeout and failed with ``StoreError``."""
    office = _office(tmp_path, 1, PostgresStore(postgres_url, max_size=1, timeout_s=2))
    try:
        asked = office.gate.authorize(office.bot, PAY, call_id="p1")
        assert asked.request is not None
        given = Approval.parse(office.gate.approve(asked.request, office.keys["carol"]))
        assert office.gate.authorize(office.bot, PAY, call_id="p1", approval=given).allowed
    finally:
        office.gate.close()
