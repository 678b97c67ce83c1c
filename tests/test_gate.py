"""Gate: the composition root. Each test states one rule of the end-to-end path of a call."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
import types
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.trace import Tracer
from test_gate_approvals import _agent
from test_gate_authorization import gate as gate  # the fixture
from test_gate_delegation_parse_once import POLICY as PERF_POLICY
from test_gate_policy_change import KEYS, MODEL, policy_text
from test_json import _nested
from test_langgraph import NAMES, _entries, _policy_text, _team_gate

from agentgate.audit.entry import AuditEntry, argument_digest
from agentgate.authority import GrantRepository, revoke
from agentgate.capabilities import Call
from agentgate.dispatch import Dispatcher, inventory_from_mapping
from agentgate.dispatch.router import Router
from agentgate.errors import AuditError, Denied, InputError, Revoked
from agentgate.gate import AgentIdentity, Approval, Authorization, Gate
from agentgate.gate import _delegation as delegation_module
from agentgate.gate._config import GATE_RESULTS_KEPT, scheduler_config
from agentgate.keys import SigningKey
from agentgate.policy import load_policy, parse_policy
from agentgate.store import SQLiteStore, Store, Transaction
from agentgate.store.audit import AuditLog

POLICY = """
version: 1
trust_anchors:
  root: {{did: "{root}"}}
principals:
  agent: {{kind: agent, did: "{agent}", roles: [worker]}}
  lead: {{kind: human, did: "{lead}", roles: [lead]}}
tools:
  lookup:
    args: {{id: {{type: string, required: true}}, secret: {{type: string}}}}
    idempotent: true
    loggable: [id]
  refund:
    args: {{amount: {{type: integer, required: true}}}}
    loggable: [amount]
  vault:
    args: {{pin: {{type: string, required: true}}}}
models:
  small: {{cost_per_mtok: {{input: 1000000, output: 2000000}}}}
roles:
  worker:
    kind: agent
    capabilities:
      - resource: tool:lookup
      - resource: tool:refund
        constraints: {{amount: {{le: 1000}}}}
      - resource: model:small
      - resource: tool:vault
        constraints: {{pin: {{prefix: "12"}}}}
    budget: {{limit: {budget}, unit: usd_micros}}
    ttl_s: 600
    delegation:
      max_depth: 1
      capabilities:
        - resource: tool:lookup
  lead:
    kind: human
    capabilities:
      - resource: tool:refund
    ttl_s: 600
approvals:
  big-refund:
    resource: tool:refund
    when: {{amount: {{gt: 100}}}}
    approvers: [lead]
"""


class Setup:
    def __init__(self, path: Path, budget: int = 10_000, tracer: Tracer | None = None) -> None:
        self.keys = {n: SigningKey.generate() for n in ("root", "agent", "lead", "helper")}
        text = POLICY.format(budget=budget, **{n: k.did for n, k in self.keys.items()})
        self.gate = Gate(
            parse_policy(text, source="gate.yaml"), SQLiteStore(path / "agentgate.db"), tracer=tracer
        )
        self.agent = self.gate.issue(self.keys["root"], name="agent", key=self.keys["agent"], role="worker")
        self.issued = self.gate.audit.size()  # the root grant's own audit entry comes first

    def entries(self) -> list[AuditEntry]:
        """The audit entries written after the agent's grant was issued."""
        self.gate.flush()
        return list(self.gate.audit.entries())[self.issued :]


@pytest.fixture
def setup(tmp_path: Path) -> Iterator[Setup]:
    made = Setup(tmp_path)
    yield made
    made.gate.close()


def test_issuing_a_root_grant_is_audited_with_who_gave_what_to_whom(setup: Setup) -> None:
    setup.gate.flush()
    (issued,) = list(setup.gate.audit.entries())
    assert issued.kind == "allow" and issued.principal == setup.keys["root"].did
    assert issued.chain_hash == setup.agent.chain.id and issued.resource == "agent:agent"
    assert issued.policy_hash == setup.gate.policy.digest
    (reason,) = issued.reasons
    assert (
        f"issued grant {setup.agent.chain.id} to agent ({setup.keys['agent'].did}) as role worker" in reason
    )
    assert "tool:refund?amount<=1000" in reason and "600s" in reason and "budget 10000 usd_micros" in reason
    assert setup.gate.verify().ok


def test_allowed_call_is_audited_before_it_runs_and_its_outcome_after(setup: Setup) -> None:
    seen: list[int] = []
    auth = setup.gate.authorize(setup.agent, Call.tool("lookup", {"id": "42", "secret": "hunter2"}))
    assert auth.allowed and auth.audit_index is not None

    def tool() -> str:
        seen.append(setup.gate.audit.size())
        return "ok"

    assert setup.gate.run(auth, tool) == "ok"
    decision, outcome = setup.entries()
    assert seen == [setup.issued + 1]  # the decision entry was committed when the tool started
    assert decision.kind == "allow" and decision.args == {"id": "42"}
    assert decision.rule == "role worker rule 1" and decision.policy_hash == setup.gate.policy.digest
    assert "hunter2" not in decision.to_bytes().decode()
    assert outcome.kind == "outcome" and outcome.status == "ok" and outcome.ref == decision.index


def test_if_the_audit_log_cannot_be_written_nothing_runs(setup: Setup) -> None:
    with setup.gate.store.transaction() as tx:  # a real write failure inside SQLite, not a mock
        tx.execute(
            "CREATE TRIGGER refuse_audit BEFORE INSERT ON audit_log BEGIN SELECT RAISE(ABORT, 'disk full'); END"
        )
    ran: list[str] = []
    with pytest.raises(AuditError):
        auth = setup.gate.authorize(setup.agent, Call.model("small"), tokens=(10, 10))
        setup.gate.run(auth, lambda: ran.append("model"))
    assert ran == []
    # The reservation made in the same transaction was rolled back with the failed entry.
    assert setup.gate.ledger.remaining(setup.agent.chain.root.id) in (None, 10_000)


def test_refused_call_is_recorded_and_cannot_be_run(setup: Setup) -> None:
    auth = setup.gate.authorize(setup.agent, Call.tool("refund", {"amount": 5000}))
    assert not auth.allowed and "amount=5000" in auth.explain()
    assert setup.entries()[0].kind == "deny"
    with pytest.raises(Denied):
        setup.gate.run(auth, lambda: "never")


def test_no_identity_is_an_opacity_finding(setup: Setup) -> None:
    auth = setup.gate.authorize(None, Call.tool("lookup", {"id": "1"}))
    assert [f.code for f in auth.findings] == ["no_chain"]
    assert [f.kind.value for f in auth.findings] == ["authority_chain_opacity"]


def test_identity_of_another_agent_is_implicit_trust_inheritance(setup: Setup) -> None:
    auth = setup.gate.authorize(setup.agent, Call.tool("lookup", {"id": "1"}), agent="helper")
    assert [(f.kind.value, f.code) for f in auth.findings] == [
        ("implicit_trust_inheritance", "inherited_identity")
    ]


def test_a_copied_grant_is_useless_to_another_key(setup: Setup) -> None:
    thief = AgentIdentity("agent", setup.keys["helper"], setup.agent.chain)
    auth = setup.gate.authorize(thief, Call.tool("lookup", {"id": "1"}))
    assert not auth.allowed and [f.code for f in auth.findings] == ["wrong_holder"]


def test_delegated_grant_is_attenuated_and_revocation_cascades(setup: Setup) -> None:
    from datetime import timedelta

    helper = setup.gate.delegate(
        setup.agent,
        name="helper",
        key=setup.keys["helper"],
        capabilities=["tool:lookup"],
        ttl=timedelta(seconds=60),
    )
    assert setup.gate.authorize(helper, Call.tool("lookup", {"id": "1"})).allowed
    assert not setup.gate.authorize(helper, Call.tool("refund", {"amount": 1})).allowed
    setup.gate.revoke(setup.agent, reason="test")
    refused = setup.gate.authorize(helper, Call.tool("lookup", {"id": "2"}))
    assert [f.code for f in refused.findings] == ["revoked"]


def test_the_gate_keeps_only_live_delegations(setup: Setup) -> None:
    from datetime import timedelta

    def hand(name: str, seconds: int) -> AgentIdentity:
        key = SigningKey.generate()
        return setup.gate.delegate(
            setup.agent, name=name, key=key, capabilities=["tool:lookup"], ttl=timedelta(seconds=seconds)
        )

    hand("brief", 1)
    time.sleep(1.1)  # its grant has expired
    lasting = hand("lasting", 60)
    assert [(parent, child.name) for parent, child in setup.gate.delegations] == [("agent", "lasting")]
    assert setup.gate.delegations[0][1] is lasting


def test_model_cost_is_reserved_then_committed_at_actual_usage(setup: Setup) -> None:
    auth = setup.gate.authorize(setup.agent, Call.model("small", {"max_tokens": 100}), tokens=(50, 100))
    # 50 input tokens at 1 micro-dollar, 100 output at 2: 250 reserved.
    assert [(unit, amount) for _, unit, amount in auth.reservations] == [("usd_micros", 250)]
    setup.gate.run(auth, lambda: "text", spent=lambda _: (50, 10))
    root = setup.agent.chain.root.id
    assert setup.gate.budget_usage(setup.agent)[root] == (70, 10_000)
    assert setup.entries()[-1].budget_delta == 70


def test_failed_call_releases_its_reservation(setup: Setup) -> None:
    auth = setup.gate.authorize(setup.agent, Call.model("small"), tokens=(50, 100))

    def broken() -> str:
        raise ConnectionError("backend gone")

    with pytest.raises(ConnectionError):
        setup.gate.run(auth, broken)
    assert setup.gate.budget_usage(setup.agent)[setup.agent.chain.root.id] == (0, 10_000)
    assert setup.entries()[-1].status == "error"


def test_budget_exhausted_is_a_refusal_naming_the_budget(tmp_path: Path) -> None:
    made = Setup(tmp_path, budget=300)
    try:
        first = made.gate.authorize(made.agent, Call.model("small"), tokens=(100, 100))
        made.gate.run(first, lambda: "x", spent=lambda _: (100, 100))
        second = made.gate.authorize(made.agent, Call.model("small"), tokens=(100, 100))
        assert not second.allowed
        assert "budget exhausted (300 of 300 usd_micros spent" in second.explain()
    finally:
        made.gate.close()


class CountingStore(SQLiteStore):
    """A real SQLite store that counts the transactions it opens (commits and rollbacks)."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.opened = 0

    @contextmanager
    def transaction(self, *, immediate: bool = True) -> Iterator[Transaction]:
        self.opened += 1
        with super().transaction(immediate=immediate) as tx:
            yield tx


def _nonces(store: Store) -> int:
    return int(store.query("SELECT COUNT(*) FROM agentgate_nonces")[0][0])


def test_a_decision_is_one_commit_with_its_reservation_and_entry(tmp_path: Path) -> None:
    keys = {n: SigningKey.generate() for n in ("root", "agent", "lead", "helper")}
    store = CountingStore(tmp_path / "agentgate.db")
    gate = Gate(
        parse_policy(POLICY.format(budget=300, **{n: k.did for n, k in keys.items()}), source="g"), store
    )
    try:
        agent = gate.issue(keys["root"], name="agent", key=keys["agent"], role="worker")
        gate.flush()
        store.opened, nonces = 0, _nonces(store)
        first = gate.authorize(agent, Call.model("small"), tokens=(100, 100))
        assert first.allowed and first.reservations
        assert store.opened == 1  # revocation read, reservation and allow entry: one transaction, one commit
        # The Gate decides with the agent's key in hand (Authority.decide_held): no invocation is
        # signed, so there is no nonce to record.
        assert _nonces(store) == nonces
        gate.run(first, lambda: "x", spent=lambda _: (100, 100))
        # The second call does not fit: the refusal is recorded in the decision's one transaction,
        # with the first call's outcome it carries, and nothing of its reservation is left.
        store.opened = 0
        second = gate.authorize(agent, Call.model("small"), tokens=(100, 100))
        assert not second.allowed and second.budget_exhausted and store.opened == 1
        assert "300 of 300 usd_micros spent" in second.explain()
        assert _nonces(store) == nonces  # decided with the key in hand: no invocation, no nonce
        assert gate.ledger.remaining(agent.chain.root.id) == 0
        held = store.query("SELECT COUNT(*) FROM budget_reservations WHERE state = 'reserved'")
        assert held == [(0,)]
        assert [e.kind for e in gate.audit.entries()][-3:] == ["allow", "outcome", "deny"]
    finally:
        gate.close()


def test_a_rolled_back_decision_leaves_no_reservation_behind(setup: Setup) -> None:
    with setup.gate.store.transaction() as tx:  # a real write failure inside SQLite, not a mock
        tx.execute(
            "CREATE TRIGGER refuse_audit BEFORE INSERT ON audit_log BEGIN SELECT RAISE(ABORT, 'disk full'); END"
        )
    with pytest.raises(AuditError):
        setup.gate.authorize(setup.agent, Call.model("small"), tokens=(100, 100))
    assert setup.gate.store.query("SELECT COUNT(*) FROM budget_reservations") == [(0,)]
    assert setup.gate.ledger.remaining(setup.agent.chain.root.id) in (None, 10_000)  # never charged


def _approval_request(setup: Setup, amount: int = 500) -> tuple[Call, dict[str, object]]:
    call = Call.tool("refund", {"amount": amount})
    auth = setup.gate.authorize(setup.agent, call, call_id="c1")
    assert auth.needs_approval
    return call, auth.approval_payload()


def test_signed_approval_by_an_allowed_approver_allows_once(setup: Setup) -> None:
    call, payload = _approval_request(setup)
    approval = Approval.sign(payload, setup.keys["lead"])
    auth = setup.gate.authorize(setup.agent, call, call_id="c1", approval=approval)
    assert auth.allowed and auth.approver == setup.keys["lead"].did
    replay = setup.gate.authorize(setup.agent, call, call_id="c1", approval=approval)
    assert not replay.allowed and "runs once" in replay.explain()  # refunds are not idempotent
    with pytest.raises(Denied, match="already used"):  # and the approval itself is spent
        setup.gate.approvals.consume(approval.request, approval.call_hash)


@pytest.mark.parametrize("signer", ["agent", "helper"])
def test_approval_by_the_requester_or_an_unlisted_key_does_not_count(setup: Setup, signer: str) -> None:
    call, payload = _approval_request(setup)
    approval = Approval.sign(payload, setup.keys[signer])
    assert setup.gate.authorize(setup.agent, call, call_id="c1", approval=approval).needs_approval


def test_approval_for_other_arguments_is_decided_afresh(setup: Setup) -> None:
    _, payload = _approval_request(setup, amount=500)
    approval = Approval.sign(payload, setup.keys["lead"])
    edited = Call.tool("refund", {"amount": 900})
    assert setup.gate.authorize(setup.agent, edited, call_id="c1", approval=approval).needs_approval


def test_a_declined_approval_is_recorded_as_a_refusal_and_closes_the_request(setup: Setup) -> None:
    call = Call.tool("refund", {"amount": 500})
    asked = setup.gate.authorize(setup.agent, call, call_id="c1")
    assert asked.needs_approval and asked.request is not None
    refused = setup.gate.decline(asked, "the reviewer said no")
    assert not refused.allowed and not refused.needs_approval
    assert "approval declined: the reviewer said no" in refused.reasons
    required, deny = setup.entries()
    assert (required.kind, deny.kind) == ("approval_required", "deny")
    assert deny.ref == required.index == asked.audit_index == refused.audit_index - 1
    assert deny.args == {"amount": 500} and deny.principal == setup.agent.did
    assert setup.gate.approvals.get(asked.request["id"]).state == "denied"
    # An approval signed afterwards for the closed request allows nothing; asking again is a new request.
    late = Approval.sign(asked.approval_payload(), setup.keys["lead"])
    assert not setup.gate.authorize(setup.agent, call, call_id="c1", approval=late).allowed
    again = setup.gate.authorize(setup.agent, call, call_id="c1")
    assert again.needs_approval and again.request is not None
    assert again.request["id"] != asked.request["id"]
    with pytest.raises(InputError):
        setup.gate.decline(refused)
    assert setup.gate.verify().ok


def test_forged_approval_signature_does_not_count(setup: Setup) -> None:
    call, payload = _approval_request(setup)
    good = Approval.sign(payload, setup.keys["lead"])
    forged = Approval(good.request, good.call_hash, good.approver, bytes(64))
    assert setup.gate.authorize(setup.agent, call, call_id="c1", approval=forged).needs_approval


async def test_async_run_settles_like_sync(setup: Setup) -> None:
    auth = await setup.gate.to_thread(setup.gate.authorize, setup.agent, Call.tool("lookup", {"id": "9"}))

    async def tool() -> str:
        await asyncio.sleep(0)
        return "async-ok"

    assert await setup.gate.arun(auth, tool) == "async-ok"
    assert [e.kind for e in setup.entries()] == ["allow", "outcome"]


def test_audit_log_verifies_after_a_mixed_session(setup: Setup) -> None:
    for args in ({"id": "1"}, {"id": "2"}):
        auth = setup.gate.authorize(setup.agent, Call.tool("lookup", args))
        setup.gate.run(auth, lambda: "ok")
    setup.gate.authorize(setup.agent, Call.tool("refund", {"amount": 99999}))
    report = setup.gate.verify()
    assert report.first_bad_index is None and report.size == setup.issued + 5


def test_the_same_path_on_both_stores(store: Store) -> None:
    keys = {n: SigningKey.generate() for n in ("root", "agent", "lead", "helper")}
    text = POLICY.format(budget=1000, **{n: k.did for n, k in keys.items()})
    gate = Gate(parse_policy(text, source="gate.yaml"), store, log_key=SigningKey.generate())
    agent = gate.issue(keys["root"], name="agent", key=keys["agent"], role="worker")
    auth = gate.authorize(agent, Call.model("small"), tokens=(100, 100))
    gate.run(auth, lambda: "x", spent=lambda _: (100, 50))
    call = Call.tool("refund", {"amount": 500})
    asked = gate.authorize(agent, call, call_id="c")
    approval = Approval.sign(asked.approval_payload(), keys["lead"])
    approved = gate.authorize(agent, call, call_id="c", approval=approval)
    gate.run(approved, lambda: "refunded")
    assert not gate.authorize(agent, call, call_id="c", approval=approval).allowed
    gate.revoke(agent)
    assert not gate.authorize(agent, Call.tool("lookup", {"id": "1"})).allowed
    assert gate.budget_usage(agent)[agent.chain.root.id] == (200, 1000)
    report = gate.verify()
    assert report.ok and report.size == 10
    kinds = sorted(e.kind for e in gate.audit.entries())
    assert kinds == sorted(
        [
            *("allow", "allow", "outcome", "deny", "revoke", "deny"),
            *("approval_required", "approval_given", "allow", "outcome"),  # the approved refund
        ]
    )


def test_every_decision_leaves_a_genai_span_linked_to_its_audit_entry(tmp_path: Path) -> None:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    made = Setup(tmp_path, tracer=provider.get_tracer("test"))
    gate = made.gate
    try:
        allowed = gate.authorize(made.agent, Call.tool("lookup", {"id": "7", "secret": "hunter2"}))
        gate.run(allowed, lambda: "ok", call_id="t1")
        model = gate.authorize(made.agent, Call.model("small"), tokens=(10, 10))
        gate.run(model, lambda: "text", spent=lambda _: (10, 4))
        refused = gate.authorize(made.agent, Call.tool("refund", {"amount": 99999}))
    finally:
        gate.close()
    spans = {s.name: s for s in exporter.get_finished_spans()}
    tool, chat, deny = spans["execute_tool lookup"], spans["chat small"], spans["execute_tool refund"]
    assert tool.attributes["agentgate.decision"] == "allow"
    assert tool.attributes["agentgate.audit.index"] == allowed.audit_index
    assert tool.attributes["gen_ai.tool.call.id"] == "t1"
    assert "hunter2" not in str(dict(tool.attributes))
    assert (
        chat.attributes["gen_ai.usage.output_tokens"] == 4
        and chat.attributes["agentgate.decision"] == "allow"
    )
    assert (
        deny.attributes["agentgate.decision"] == "deny"
        and deny.attributes["error.type"] == "agentgate.denied"
    )
    assert deny.attributes["agentgate.audit.index"] == refused.audit_index


def test_a_refusal_never_writes_a_non_loggable_value_to_the_audit_log(setup: Setup) -> None:
    # refund.amount is loggable; vault.pin is not, and the rule that refuses it quotes it.
    setup.gate.authorize(setup.agent, Call.tool("refund", {"amount": 5000}))
    refused = setup.gate.authorize(setup.agent, Call.tool("vault", {"pin": "99-hunter2"}))
    entries = setup.entries()
    assert "amount=5000" in " ".join(entries[0].reasons)
    assert "pin=<not loggable>" in " ".join(entries[1].reasons)
    assert "hunter2" not in entries[1].to_bytes().decode()
    assert "99-hunter2" in refused.explain()  # the model is told about its own argument


def test_an_outcome_that_cannot_be_written_is_logged_and_does_not_sink_the_others(
    setup: Setup, caplog: pytest.LogCaptureFixture
) -> None:
    """An outcome whose reservation was settled behind the gate's back is written without it
    (logged; review R67: until then dropped, logged as not recorded) and sinks no other."""
    lost = setup.gate.authorize(setup.agent, Call.model("small"), tokens=(10, 10))
    # Settled behind the gate's back, as ran (one released is charged by its outcome since review R68).
    setup.gate.ledger.commit(lost.reservations[0][0], lost.reservations[0][2])
    setup.gate.run(lost, lambda: "x", spent=lambda _: (10, 10))  # so its outcome cannot settle it
    auth = setup.gate.authorize(setup.agent, Call.model("small"), tokens=(10, 10))
    setup.gate.run(auth, lambda: "x", spent=lambda _: (10, 10))
    other = setup.gate.authorize(setup.agent, Call.tool("lookup", {"id": "1"}))
    setup.gate.run(other, lambda: "ok")
    with caplog.at_level("WARNING", logger="agentgate.gate"):
        entries = setup.entries()
    outcomes = {e.ref: e for e in entries if e.kind == "outcome"}
    assert sorted(outcomes) == sorted([lost.audit_index, auth.audit_index, other.audit_index])
    assert outcomes[lost.audit_index].budget_delta == 0
    assert "already settled" in caplog.text
    assert setup.gate.verify().ok


def test_audit_indexes_stay_gap_free_when_another_writer_appends_or_a_transaction_rolls_back(
    setup: Setup, tmp_path: Path
) -> None:
    # The gate's log guesses its next index on SQLite; another log over the same database (another
    # process) and a rolled-back append make the guess stale, and the next-index trigger makes it retry.
    other = AuditLog(SQLiteStore(tmp_path / "agentgate.db"), SigningKey.generate())
    first = setup.gate.authorize(setup.agent, Call.tool("lookup", {"id": "1"}))
    other.append({"kind": "revoke", "principal": "operator"})
    second = setup.gate.authorize(setup.agent, Call.tool("lookup", {"id": "2"}))
    with pytest.raises(RuntimeError), setup.gate.store.transaction() as tx:
        setup.gate.audit.append({"kind": "deny", "principal": "operator"}, tx)
        raise RuntimeError("rolled back")
    third = setup.gate.authorize(setup.agent, Call.tool("lookup", {"id": "3"}))
    start = setup.issued
    assert (first.audit_index, second.audit_index, third.audit_index) == (start, start + 2, start + 3)
    assert [e.index for e in setup.entries()] == [start, start + 1, start + 2, start + 3]
    assert setup.gate.verify().ok


def _quorum_of_two(tmp_path: Path) -> tuple[Gate, dict[str, SigningKey]]:
    """A gate whose refund approval needs two approvers, lead and lead2, and the keys."""
    keys = {n: SigningKey.generate() for n in ("root", "agent", "lead", "lead2")}
    text = POLICY.format(budget=10_000, **{n: k.did for n, k in keys.items() if n != "lead2"})
    text = text.replace(
        "  lead: {kind: human,",
        f'  lead2: {{kind: human, did: "{keys["lead2"].did}", roles: [lead]}}\n  lead: {{kind: human,',
    ).replace("approvers: [lead]\n", "approvers: [lead, lead2]\n    quorum: 2\n")
    gate = Gate(parse_policy(text, source="quorum.yaml"), SQLiteStore(tmp_path / "agentgate.db"))
    return gate, keys


def test_a_quorum_of_two_needs_two_distinct_approvers(tmp_path: Path) -> None:
    gate, keys = _quorum_of_two(tmp_path)
    try:
        agent = gate.issue(keys["root"], name="agent", key=keys["agent"], role="worker")
        call = Call.tool("refund", {"amount": 500})
        payload = gate.authorize(agent, call, call_id="q1").approval_payload()
        first = Approval.sign(payload, keys["lead"])
        waiting = gate.authorize(agent, call, call_id="q1", approval=first)
        assert waiting.needs_approval  # one yes of two
        again = gate.authorize(agent, call, call_id="q1", approval=first)
        assert again.needs_approval and again.request is not None
        assert again.request["approved_by"] == [keys["lead"].did]  # the same approver counts once
        second = Approval.sign(again.approval_payload(), keys["lead2"])
        auth = gate.authorize(agent, call, call_id="q1", approval=second)
        assert auth.allowed
        assert set((auth.approver or "").split(",")) == {keys["lead"].did, keys["lead2"].did}
        assert not gate.authorize(agent, call, call_id="q1", approval=second).allowed  # single use
    finally:
        gate.close()


def test_dead_letters_persist_in_the_store(store: Store) -> None:
    """On PostgreSQL through the shared scheduler state, on SQLite through the dead-letter table."""
    from agentgate.store.dead_letters import DeadLetterStore

    keys = {n: SigningKey.generate() for n in ("root", "agent", "lead")}
    text = POLICY.format(budget=10_000, **{n: k.did for n, k in keys.items()})
    gate = Gate(parse_policy(text, source="dl.yaml"), store)
    try:
        agent = gate.issue(keys["root"], name="agent", key=keys["agent"], role="worker")
        auth = gate.authorize(agent, Call.tool("lookup", {"id": "7"}), call_id="c-dead")

        def broken() -> str:
            raise RuntimeError("backend down")

        with pytest.raises(RuntimeError):
            gate.run(auth, broken, call_id="c-dead", run_id="thread-1")
        letters = DeadLetterStore(gate.store).recent()
        assert [(d.tool, d.call_id, d.run_id) for d in letters] == [("lookup", "c-dead", "thread-1")]
        assert tuple(letters[0].authority_chain) == tuple(agent.chain.ids)
    finally:
        gate.close()


def test_the_first_call_does_not_deadlock_against_a_decision_in_progress(setup: Setup) -> None:
    # Regression: the first call made the scheduler (creating its dead-letter table: a store
    # write) holding the lock that a decision takes inside its transaction. A decision holding
    # the store's write lock then waited for that lock, the first call for the write lock, and
    # both sat out SQLite's 30 s busy timeout (seen as a tool failing with "database is locked").
    auth = setup.gate.authorize(setup.agent, Call.tool("lookup", {"id": "1"}))
    in_transaction = threading.Event()

    def decision_in_progress() -> None:
        with setup.gate._decision_transaction() as tx:
            setup.gate.audit.append({"kind": "deny", "principal": "did:key:zProbe"}, tx)
            in_transaction.set()
            time.sleep(0.3)  # meanwhile the first call starts and needs the write lock
            with setup.gate._lock:  # what recording an approval request or an allow takes
                pass

    decider = threading.Thread(target=decision_in_progress)
    decider.start()
    assert in_transaction.wait(5)
    started = time.monotonic()
    assert setup.gate.run(auth, lambda: "ok") == "ok"
    assert time.monotonic() - started < 5  # not the busy timeout
    decider.join(10)
    assert not decider.is_alive()


@pytest.mark.parametrize(
    "args", [{"id": "42"}, {"id": "é", "secret": "x"}, {"id": 'q"u\\o', "secret": "\u2028 \U0001f600 \x00"}]
)
def test_a_tool_calls_idempotency_key_is_the_schedulers_own(setup: Setup, args: dict[str, object]) -> None:
    # The gate hands the scheduler the digest the authority engine computed for the decision;
    # it must be the digest the scheduler would compute itself, or a resumed run would not find
    # a completed call's result.
    from agentgate.tasks._call import argument_digest, idempotency_key

    auth = setup.gate.authorize(setup.agent, Call.tool("lookup", args), call_id="c1")
    assert auth.allowed
    call = setup.gate._tool_call(auth, "c1", "run-1")
    assert call.idempotency_key() == idempotency_key(
        "run-1",
        "lookup",
        "c1",
        argument_digest(args),
        tenant=call.tenant,
        principal=call.principal,
        grant=setup.agent.grant_id,
    )


async def test_close_on_an_event_loop_after_sync_runs_commits_the_outcomes(tmp_path: Path) -> None:
    # An async application ran tools through the sync path (its scheduler has a loop thread of its
    # own) and closes the gate in its shutdown handler, on the event loop's thread.
    made = Setup(tmp_path)
    auth = made.gate.authorize(made.agent, Call.tool("lookup", {"id": "1"}))
    assert made.gate.run(auth, lambda: "ok") == "ok"
    made.gate.close()  # did raise RuntimeError (a loop cannot run while another one runs here)
    reopened = AuditLog(SQLiteStore(tmp_path / "agentgate.db"), SigningKey.generate())
    assert [e.kind for e in reopened.entries()] == ["allow", "allow", "outcome"]


def test_a_delegation_is_bounded_by_the_rule_of_the_role_that_may_hand_each_capability_on(
    tmp_path: Path,
) -> None:
    """``lead`` holds two roles: ``payer`` may hand on ``tool:pay`` for 60 s with a budget of 10,
    ``searcher`` hands on ``tool:search`` for 3000 s with 1000. ``tool:pay`` was handed on for
    3000 s with 1000: the limits were the largest over all the roles (found by review R5)."""
    from datetime import timedelta

    from agentgate.errors import ScopeCreep

    root, lead = SigningKey.generate(), SigningKey.generate()
    policy = parse_policy(
        f"""
version: 1
trust_anchors: {{root: {{did: "{root.did}"}}}}
principals:
  lead: {{kind: agent, did: "{lead.did}", roles: [payer, searcher]}}
tools:
  pay: {{args: {{}}}}
  search: {{args: {{}}}}
roles:
  payer:
    capabilities: [{{resource: "tool:pay"}}]
    budget: {{limit: 1000}}
    ttl_s: 3600
    delegation:
      max_depth: 1
      max_ttl_s: 60
      budget: {{limit: 10}}
      capabilities: [{{resource: "tool:pay"}}]
  searcher:
    capabilities: [{{resource: "tool:search"}}]
    budget: {{limit: 1000}}
    ttl_s: 3600
    delegation:
      max_depth: 1
      max_ttl_s: 3000
      budget: {{limit: 1000}}
      capabilities: [{{resource: "tool:search"}}]
"""
    )
    gate = Gate(policy, SQLiteStore(tmp_path / "a.db"))
    try:
        identity = gate.issue(root, name="lead", key=lead, role="payer")

        def hand(caps: list[str], seconds: int, budget: int) -> str:
            try:
                gate.delegate(
                    identity,
                    name="sub",
                    key=SigningKey.generate(),
                    capabilities=caps,
                    ttl=timedelta(seconds=seconds),
                    budget=budget,
                )
            except ScopeCreep as exc:
                return exc.finding.code
            return "ok"

        assert hand(["tool:pay"], 3000, 1000) == "delegation_ttl_above_policy"
        assert hand(["tool:pay"], 60, 1000) == "delegation_budget_above_policy"
        assert hand(["tool:search", "tool:pay"], 3000, 10) == "delegation_ttl_above_policy"
        assert hand(["tool:pay"], 60, 10) == "ok"
        assert gate.verify().ok
    finally:
        gate.close()


def test_a_refusal_tells_the_caller_when_retrying_can_help() -> None:
    # An agent obeying "Do not retry" stopped on a full quota window or an expired invocation
    # (found by review R4).
    from agentgate.findings import Finding, FindingKind
    from agentgate.gate import Verdict

    call = Call.tool("lookup", {"id": "1"})
    denied = Authorization(Verdict.DENY, call, None, ("not allowed",))
    assert denied.explain().endswith("Do not retry this call; choose another way or stop.")
    full = Authorization(Verdict.DENY, call, None, ("quota q reached",), quota_exceeded="q")
    assert full.explain().endswith("Retry once the quota's window has passed.")
    stale = Finding(kind=FindingKind.AUTHORITY_CHAIN_OPACITY, code="invocation_expired", message="expired")
    expired = Authorization(Verdict.DENY, call, None, ("expired",), (stale,))
    assert expired.explain().endswith("Sign the call again with a fresh invocation.")


class _Pause(Exception):
    """Stands for LangGraph's GraphInterrupt: the tool waits for a human, it has not failed."""


def test_a_call_that_pauses_after_its_approval_is_approved_again_by_the_same_approval(setup: Setup) -> None:
    call, payload = _approval_request(setup)
    approval = Approval.sign(payload, setup.keys["lead"])
    first = setup.gate.authorize(setup.agent, call, call_id="c1", approval=approval)
    assert first.allowed

    def pausing() -> str:
        raise _Pause

    with pytest.raises(_Pause):
        setup.gate.run(first, pausing, paused=lambda exc: isinstance(exc, _Pause))
    # Resumed: the same call, the same (replayed) approval; it runs to the end this time.
    assert setup.gate.authorize(setup.agent, call, call_id="c1").needs_approval
    second = setup.gate.authorize(setup.agent, call, call_id="c1", approval=approval)
    assert second.allowed and setup.gate.run(second, lambda: "refunded") == "refunded"
    # Completed: the approval is used up, and it never approved another call.
    assert not setup.gate.authorize(setup.agent, call, call_id="c1", approval=approval).allowed
    other = Call.tool("refund", {"amount": 501})
    assert not setup.gate.authorize(setup.agent, other, call_id="c1", approval=approval).allowed
    trail = [(e.kind, e.status) for e in setup.entries() if e.resource == "tool:refund"]
    assert trail[:7] == [  # the re-armed request counts the replayed yes again, on the record
        ("approval_required", None),
        ("approval_given", None),
        ("allow", None),
        ("outcome", "paused"),
        ("approval_given", None),
        ("allow", None),
        ("outcome", "ok"),
    ]
    assert setup.gate.verify().ok


def test_a_failure_is_not_a_pause_and_does_not_give_the_approval_back(setup: Setup) -> None:
    call, payload = _approval_request(setup)
    approval = Approval.sign(payload, setup.keys["lead"])
    auth = setup.gate.authorize(setup.agent, call, call_id="c1", approval=approval)

    def failing() -> str:
        raise ValueError("boom")

    with pytest.raises(ValueError):
        setup.gate.run(auth, failing, paused=lambda exc: isinstance(exc, _Pause))
    assert not setup.gate.authorize(setup.agent, call, call_id="c1", approval=approval).allowed


def test_a_revocation_that_cannot_be_audited_is_not_made(
    setup: Setup, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The revocation and its audit entry commit together: neither exists without the other.
    def broken(*args: object, **kwargs: object) -> int:
        raise AuditError("the log cannot be written")

    monkeypatch.setattr(setup.gate.audit, "append", broken)
    with pytest.raises(AuditError):
        setup.gate.revoke(setup.agent, reason="test")
    monkeypatch.undo()
    assert setup.gate.grants.revoked(setup.agent.chain.ids) == set()
    assert setup.gate.authorize(setup.agent, Call.tool("lookup", {"id": "1"})).allowed
    setup.gate.revoke(setup.agent, reason="test")
    assert [e.kind for e in setup.entries()][-1] == "revoke"
    assert not setup.gate.authorize(setup.agent, Call.tool("lookup", {"id": "2"})).allowed


def test_revoking_a_grant_already_revoked_writes_nothing_and_says_so(setup: Setup) -> None:
    # R53: Gate.revoke wrote another ``revoke`` entry (a later time, another reason) each time it
    # was called for the same grant; ``agentgate grant revoke`` reports ``already_revoked`` and
    # writes nothing.
    first = setup.gate.revoke(setup.agent, reason="leaked")
    assert (first.grant_id, first.already) == (setup.agent.grant_id, False)
    before = [e.kind for e in setup.entries()]
    again = setup.gate.revoke(setup.agent.grant_id, by="someone else", reason="again")
    assert (again.grant_id, again.already) == (setup.agent.grant_id, True)
    assert [e.kind for e in setup.entries()] == before and before.count("revoke") == 1
    (row,) = setup.gate.store.query("SELECT reason FROM agentgate_revocations")
    assert row[0] == "leaked"


@pytest.mark.postgres
def test_a_write_on_postgresql_takes_the_append_lock_before_any_row(postgres_url: str) -> None:
    """Every Gate write transaction takes the audit append lock first: a decision that locked a
    budget row and then waited for the append lock, while another process held the lock and
    waited for that row, deadlocked (PostgreSQL aborted one: a decision denied, or outcomes lost;
    found by review R2)."""
    import psycopg

    from agentgate.store import open_store
    from agentgate.store.audit import APPEND_LOCK, AUDIT_DDL

    assert f"pg_advisory_xact_lock({APPEND_LOCK})" in AUDIT_DDL["postgresql"]  # the appends' own lock

    keys = {n: SigningKey.generate() for n in ("root", "agent", "lead", "helper")}
    text = POLICY.format(budget=10_000, **{n: k.did for n, k in keys.items()})
    gate = Gate(
        parse_policy(text, source="gate.yaml"), open_store(postgres_url), log_key=SigningKey.generate()
    )
    holder = psycopg.connect(postgres_url)
    try:
        agent = gate.issue(keys["root"], name="agent", key=keys["agent"], role="worker")
        ran = gate.authorize(agent, Call.model("small"), tokens=(100, 100))
        gate.run(ran, lambda: "x", spent=lambda _: (100, 50))  # an outcome to carry, a row to settle
        holder.execute(f"SELECT pg_advisory_xact_lock({APPEND_LOCK})")  # another process appends
        decided: list[Authorization] = []
        thread = threading.Thread(
            target=lambda: decided.append(gate.authorize(agent, Call.model("small"), tokens=(100, 100)))
        )
        thread.start()
        waiting: list[tuple[int, str]] = []
        deadline = time.monotonic() + 10
        while not waiting and time.monotonic() < deadline:
            time.sleep(0.05)
            waiting = holder.execute(
                "SELECT pid, query FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                "AND wait_event = 'advisory' AND pid <> pg_backend_pid()"
            ).fetchall()
        assert waiting, "no gate transaction waited for the append lock"
        for pid, query in waiting:  # waiting at its first statement, having written nothing
            assert query.startswith("SELECT pg_catalog.pg_advisory_xact_lock"), query  # named since R60
            written = holder.execute(
                "SELECT count(*) FROM pg_locks WHERE pid = %s AND locktype = 'transactionid'", (pid,)
            ).fetchone()
            assert written == (0,)
        holder.rollback()
        thread.join(10)
        assert decided and decided[0].allowed
    finally:
        holder.close()
        gate.close()


def _approval_verifies_from_the_log(entry: AuditEntry) -> bool:
    """Whether an ``approval_given`` entry alone shows the approver's signature over the call."""
    fields = dict(reason.split(":", 1) for reason in entry.reasons)
    approval = Approval(
        fields["request"], fields["call_hash"], entry.approver or "", bytes.fromhex(fields["signature"])
    )
    return approval.verify()


def test_each_counted_yes_is_an_approval_given_entry_an_auditor_can_verify(setup: Setup) -> None:
    call, payload = _approval_request(setup)
    approval = Approval.sign(payload, setup.keys["lead"])
    auth = setup.gate.authorize(setup.agent, call, call_id="c1", approval=approval)
    assert auth.allowed
    asked, given, allowed = setup.entries()[-3:]
    assert [asked.kind, given.kind, allowed.kind] == ["approval_required", "approval_given", "allow"]
    assert given.approver == given.principal == setup.keys["lead"].did
    assert given.ref == asked.index and given.chain_hash == asked.chain_hash == setup.agent.grant_id
    assert given.args_digest == asked.args_digest and given.resource == "tool:refund"
    assert _approval_verifies_from_the_log(given)
    assert setup.gate.verify().ok
    # A replayed approval counts for nothing, so it leaves no approval_given behind.
    assert not setup.gate.authorize(setup.agent, call, call_id="c1", approval=approval).allowed
    assert [e.kind for e in setup.entries()].count("approval_given") == 1


def test_a_quorum_records_each_approvers_yes_as_it_comes(tmp_path: Path) -> None:
    gate, keys = _quorum_of_two(tmp_path)
    try:
        agent = gate.issue(keys["root"], name="agent", key=keys["agent"], role="worker")
        call = Call.tool("refund", {"amount": 500})
        asked = gate.authorize(agent, call, call_id="q1")
        first = Approval.sign(asked.approval_payload(), keys["lead"])
        assert gate.authorize(agent, call, call_id="q1", approval=first).needs_approval
        assert gate.authorize(agent, call, call_id="q1", approval=first).needs_approval  # counted once
        given = [e for e in gate.audit.entries() if e.kind == "approval_given"]
        assert [(e.approver, e.ref) for e in given] == [(keys["lead"].did, asked.audit_index)]
        second = Approval.sign(asked.approval_payload(), keys["lead2"])
        assert gate.authorize(agent, call, call_id="q1", approval=second).allowed
        given = [e for e in gate.audit.entries() if e.kind == "approval_given"]
        assert [e.approver for e in given] == [keys["lead"].did, keys["lead2"].did]
        assert all(e.ref == asked.audit_index and _approval_verifies_from_the_log(e) for e in given)
        assert gate.verify().ok
    finally:
        gate.close()


def test_a_call_that_ran_is_refused_before_anyone_is_asked_to_approve_it_again(setup: Setup) -> None:
    call, payload = _approval_request(setup)
    approved = setup.gate.authorize(
        setup.agent, call, call_id="c1", approval=Approval.sign(payload, setup.keys["lead"])
    )
    setup.gate.run(approved, lambda: "refunded")
    again = setup.gate.authorize(setup.agent, call, call_id="c1")  # a resumed run asks again
    assert not again.allowed and not again.needs_approval
    assert "already ran to completion" in again.explain()
    assert [e.kind for e in setup.entries()].count("approval_required") == 1


def test_delegating_does_not_scan_every_live_delegation(setup: Setup) -> None:
    """A service that delegates per request keeps thousands of live delegations: each new one
    must not walk the whole list looking for expired ones (it did, at every delegation)."""
    from datetime import timedelta

    class Walks(list[tuple[str, AgentIdentity]]):
        count = 0

        def __iter__(self) -> Iterator[tuple[str, AgentIdentity]]:
            Walks.count += 1
            return super().__iter__()

    setup.gate.delegations = Walks()
    for i in range(50):
        setup.gate.delegate(
            setup.agent, name=f"w{i}", key=SigningKey.generate(), capabilities=["tool:lookup"],
            ttl=timedelta(seconds=60),
        )  # fmt: skip
    assert len(setup.gate.delegations) == 50
    assert Walks.count <= 2


async def test_a_call_that_no_cancellation_stops_is_recorded_and_charged_as_it_ended(tmp_path: Path) -> None:
    # Gate.arun(preemptible=False): a tool in a worker thread, its caller cancelled while it runs.
    # The attempt runs to its end and has its effect; it used to be recorded as an error
    # (CancelledError) with its reservation released: a calls budget did not count it.
    gate, _, supervisor = _team_gate(tmp_path / "agentgate.db", budget=10, unit="calls")
    started, release = threading.Event(), threading.Event()

    def search() -> str:
        started.set()
        release.wait(10)
        return "found"

    try:
        auth = gate.authorize(supervisor, Call.tool("search", {"query": "x"}), call_id="c1")
        assert auth.allowed
        task = asyncio.create_task(gate.arun(auth, lambda: asyncio.to_thread(search), preemptible=False))
        await asyncio.to_thread(started.wait, 10)
        task.cancel()
        await asyncio.sleep(0.05)
        release.set()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        assert task.cancelled()
        (outcome,) = [e for e in _entries(gate) if e.kind == "outcome"]
        assert (outcome.status, outcome.budget_delta) == ("ok", 1)
        assert gate.budget_usage(supervisor)[supervisor.grant_id] == (1, 10)
    finally:
        gate.close()


R29_POLICY = """
version: 1
trust_anchors:
  root: {{did: "{root}"}}
principals:
  agent: {{kind: agent, did: "{agent}", roles: [chat]}}
  lead: {{kind: human, did: "{lead}", roles: [lead]}}
models:
  m: {{cost_per_mtok: {{input: 1, output: 1}}}}
roles:
  chat:
    kind: agent
    capabilities:
      - resource: model:m
    budget: {{limit: 1000000, unit: usd_micros}}
    ttl_s: 3600
  lead:
    kind: human
    capabilities:
      - resource: model:m
    ttl_s: 3600
approvals:
  every-call:
    resource: model:m
    approvers: [lead]
"""


def test_gate_revoke_with_a_reason_holding_a_lone_surrogate_revokes(tmp_path: Path) -> None:
    """Gate.revoke puts the raw reason in its audit entry; the audit log refuses a lone surrogate
    (InputError), the transaction rolls back, and the grant stays alive."""
    keys = {n: SigningKey.generate() for n in ("root", "agent", "lead")}
    policy = parse_policy(R29_POLICY.format(**{n: k.did for n, k in keys.items()}), source="p.yaml")
    gate = Gate(policy, SQLiteStore(tmp_path / "agentgate.db"))
    try:
        agent = gate.issue(keys["root"], name="agent", key=keys["agent"], role="chat")
        gate.revoke(agent, reason="key leaked \udcff")
        assert gate.grants.revoked(agent.chain.ids) == {agent.chain.id}
    finally:
        gate.close()


def test_a_delegation_from_a_grant_revoked_meanwhile_records_no_allow(tmp_path: Path) -> None:
    # Gate.delegate read revocation before it checked the policy and signed the child, outside the
    # transaction that records the grant: a revocation that returned in between still got an
    # `allow` for the delegation in the log (the child was dead anyway; the evidence was wrong).
    path = tmp_path / "agentgate.db"

    class RevokedMeanwhile(Gate):
        victim: str | None = None

        def _check_delegation_rule(self, *args: Any) -> None:
            super()._check_delegation_rule(*args)
            if self.victim is not None:
                with SQLiteStore(path) as other:  # another process: agentgate grant revoke
                    repo = GrantRepository(other)
                    revoke(repo, self.victim)
                    repo.close()

    keys = {n: SigningKey.generate() for n in NAMES}
    gate = RevokedMeanwhile(
        parse_policy(_policy_text({n: k.did for n, k in keys.items()}, 1000)), SQLiteStore(path)
    )
    try:
        supervisor = gate.issue(keys["root"], name="supervisor", key=keys["supervisor"], role="supervisor")
        gate.victim = supervisor.grant_id
        with pytest.raises(Revoked):
            gate.delegate(
                supervisor,
                name="researcher",
                key=keys["researcher"],
                capabilities=["tool:search"],
                ttl=timedelta(minutes=5),
            )
        delegations = [e for e in _entries(gate) if e.resource == "agent:researcher"]
        assert [e.kind for e in delegations] == ["deny"]
    finally:
        gate.close()


DIGEST_POLICY = """
version: 1
trust_anchors: {{root: {{did: "{root}"}}}}
principals:
  bot: {{kind: agent, did: "{bot}", roles: [bot]}}
models:
  m: {{cost_per_mtok: {{input: 1000, output: 2000}}}}
roles:
  bot:
    kind: agent
    capabilities: [{{resource: model:m}}]
    budget: {{limit: 1000000000, unit: usd_micros}}
    ttl_s: 600
"""


def _gate(tmp_path: Path) -> tuple[Gate, AgentIdentity]:
    root, bot = SigningKey.generate(), SigningKey.generate()
    policy = parse_policy(DIGEST_POLICY.format(root=root.did, bot=bot.did), source="lead3.yaml")
    gate = Gate(policy, SQLiteStore(tmp_path / "store.db", synchronous="NORMAL"))
    return gate, gate.issue(root, name="bot", key=bot, role="bot")


@pytest.mark.parametrize(
    "args",
    [{"max_tokens": 5, "messages": _nested(300)}, {"max_tokens": 5, "messages": {1: "int key"}}],
    ids=["nested-300", "int-key"],
)
def test_a_call_whose_arguments_the_log_cannot_record_is_refused(
    tmp_path: Path, args: dict[Any, Any]
) -> None:
    # Before: the authority engine digested these (its encoder took any depth and int keys), the
    # call was allowed and ran, and its allow entry said "the arguments have no canonical JSON
    # form; they are not recorded": evidence of a call that does not bind its arguments.
    gate, identity = _gate(tmp_path)
    try:
        auth = gate.authorize(identity, Call.model("m", args), agent="bot", tokens=(1, 5))
        assert not auth.allowed
        assert any(f.code == "args_not_canonical" for f in auth.findings), auth.findings
        entries = [e for e in gate.audit.entries() if e.resource == "model:m"]
        assert [e.kind for e in entries] == ["deny"]
    finally:
        gate.close()


def test_an_allowed_calls_entry_carries_the_digest_the_authority_engine_computed(tmp_path: Path) -> None:
    gate, identity = _gate(tmp_path)
    args = {"max_tokens": 5, "messages": [{"role": "user", "content": "hé", "n": 1.5}]}
    try:
        auth = gate.authorize(identity, Call.model("m", args), agent="bot", tokens=(1, 5))
        assert auth.allowed and auth.decision is not None
        gate.run(auth, lambda: "ok", spent=lambda _: (1, 5))
        gate.flush()
        (entry,) = [e for e in gate.audit.entries() if e.kind == "allow" and e.resource == "model:m"]
        assert entry.args_digest == argument_digest(args) == f"sha256:{auth.decision.args_digest}"
    finally:
        gate.close()


def test_gate_revoke_holder_cuts_every_recorded_grant_of_a_key_with_its_entries(tmp_path: Path) -> None:
    # R45's --holder, as a Gate method: each grant revoked has its revoke entry, in one transaction.
    import test_gate_approvals as second

    from agentgate.capabilities import Call
    from agentgate.keys import SigningKey

    with SQLiteStore(tmp_path / "s.db") as store:
        made = second.Approvals(store)
        try:
            gate = made.gate
            again = gate.issue(made.keys["root"], name="agent", key=made.keys["agent"], role="worker")
            other = SigningKey.generate()
            done = gate.revoke_holder(made.keys["agent"].public, reason="key leaked")
            assert sorted(done.revoked) == sorted({made.agent.grant_id, again.grant_id})
            assert done.already == ()
            for identity in (made.agent, again):
                refused = gate.authorize(identity, Call.tool("pay", {"amount": 1}))
                assert not refused.allowed and "revoked" in " ".join(refused.reasons)
            revokes = [e for e in made.entries() if e.kind == "revoke"]
            assert len(revokes) == 2 and all("key leaked" in " ".join(e.reasons) for e in revokes)
            assert gate.revoke_holder(made.keys["agent"].did).revoked == ()  # nothing new
            assert gate.revoke_holder(other.public).revoked == ()
            assert gate.verify().ok
        finally:
            made.gate.close()


def test_gate_open_takes_the_store_as_a_path_too(tmp_path: Path) -> None:
    from agentgate.errors import InputError
    from agentgate.gate import Gate

    policy = Path(__file__).resolve().parents[1] / "policies" / "support.yaml"
    gate = Gate.open(policy, store=tmp_path / "gate.db")
    gate.close()
    assert (tmp_path / "gate.db").is_file()
    with pytest.raises(InputError, match="store"):
        Gate.open(policy, store=b"gate.db")  # type: ignore[arg-type]


def test_a_gates_scheduler_keeps_the_results_of_its_last_1024_calls_not_10000() -> None:
    """Review R48 (bounds): a Gate's scheduler kept the results of 10,000 calls per event loop,
    whatever their size (a page, a file); it keeps 1,024."""
    policy = parse_policy("version: 1\ntools:\n  search: {idempotent: true}\n")
    assert scheduler_config(policy).result_cache_size == GATE_RESULTS_KEPT == 1_024


def test_a_dispatchers_own_model_slo_outranks_the_policys_when_attached(tmp_path: Path) -> None:
    # Kills: attach_dispatcher letting the policy's slo.ttft_ms override the SLO the dispatcher
    # was given for that model (documented: "unless the dispatcher was given its own for it").
    policy = parse_policy(
        """
version: 1
models:
  fast: {cost_per_mtok: {input: 1, output: 1}, slo: {ttft_ms: 50}}
  slow: {cost_per_mtok: {input: 1, output: 1}, slo: {ttft_ms: 8000}}
  plain: {cost_per_mtok: {input: 1, output: 1}}
tools:
  search.web: {}
""",
        source="p.yaml",
    )
    inventory = inventory_from_mapping(
        {"backends": [{"name": "b", "url": "http://127.0.0.1:9", "models": ["fast", "slow", "plain"]}]}
    )
    dispatcher = Dispatcher(inventory, Router(inventory), slo_ttft_s=1.5, model_slo_ttft_s={"fast": 0.7})
    gate = Gate(policy, SQLiteStore(tmp_path / "agentgate.db"))
    try:
        gate.attach_dispatcher(dispatcher)
        assert dispatcher.slo_ttft("fast") == 0.7  # its own, given for that model
        assert dispatcher.slo_ttft("slow") == 8.0  # the policy's, which the dispatcher lacked
        assert dispatcher.slo_ttft("plain") == 1.5  # neither: the dispatcher's default
        request = dispatcher.route_request(_chat("fast"), slo_ttft_s=0.2)
        assert request.slo_ttft_s == 0.2  # the caller's own outranks both
        assert dispatcher.route_request(_chat("slow")).slo_ttft_s == 8.0
    finally:
        gate.close()


def _chat(model: str) -> dict[str, object]:
    return {"model": model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}


def test_the_gates_parsed_delegations_stay_within_their_bound(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Kills: the parsed-chain cache of delegate(call=...) never cleared (a long-lived supervisor
    # delegating per run would keep every token it ever read). The bound is lowered to 3 here.
    monkeypatch.setattr(delegation_module, "DELEGATED_PARSED_MAX", 3)
    keys = {n: SigningKey.generate() for n in ("root", "boss", "alpha")}
    text = PERF_POLICY.format(root=keys["root"].did, boss=keys["boss"].did, alpha=keys["alpha"].did)
    gate = Gate(parse_policy(text, source="t.yaml"), SQLiteStore(tmp_path / "g.db"))
    try:
        boss = gate.issue(keys["root"], name="boss", key=keys["boss"], role="boss")

        def delegate(call: str) -> AgentIdentity:
            return gate.delegate(
                boss,
                name="alpha",
                key=keys["alpha"],
                capabilities=["tool:lookup"],
                ttl=timedelta(minutes=5),
                call=call,
            )

        first = [delegate(f"call-{i}") for i in range(8)]
        assert 0 < len(gate._parsed_delegated) <= 3
        assert delegate("call-1").chain == first[1].chain  # still handed on again after a clear
        assert delegate("call-6").chain == first[6].chain
        assert len(gate._parsed_delegated) <= 3
    finally:
        gate.close()


class _Text(str):
    pass


class _PathLike:
    def __init__(self, path: Path) -> None:
        self.path = path

    def __fspath__(self) -> str:
        return str(self.path)


def test_legitimate_argument_types_are_accepted_at_the_entry_points(tmp_path: Path) -> None:
    (tmp_path / "p.yaml").write_text(policy_text())
    for policy in (tmp_path / "p.yaml", _PathLike(tmp_path / "p.yaml"), _Text(tmp_path / "p.yaml")):
        assert load_policy(policy).digest  # type: ignore[arg-type]
        Gate.open(policy, str(tmp_path / "open.db")).close()  # type: ignore[arg-type]
    assert SigningKey(b"\x01" * 32).did.startswith("did:key:")
    gate = Gate(
        parse_policy(policy_text(), source="p.yaml"),
        SQLiteStore(tmp_path / "ag.db"),
        trust_anchors=(KEYS["root"].did,),
    )
    try:
        agent = gate.issue(KEYS["root"], name=_Text("agent"), key=KEYS["agent"], role=_Text("worker"))
        proxy = types.MappingProxyType({"id": "1"})
        for n, call in enumerate((Call.tool("lookup", proxy), Call("tool:lookup", "invoke", proxy))):
            assert gate.authorize(agent, call, call_id=_Text(f"c{n}")).allowed
        assert Call.tool(_Text("lookup"), proxy).resource == "tool:lookup"
        assert gate.authorize(agent, MODEL, tokens=(5, 10)).allowed
        for caps in (("tool:lookup",), (c for c in ["tool:lookup"])):
            assert gate.delegate(
                agent, name=_Text("sub"), key=KEYS["sub"], capabilities=caps, ttl=timedelta(seconds=30)
            )
        for budget in (True, Fraction(5), 5.0):
            with pytest.raises(InputError, match="budget"):
                gate.delegate(
                    agent,
                    name="sub",
                    key=KEYS["sub"],
                    capabilities=["tool:lookup"],
                    ttl=timedelta(seconds=30),
                    budget=budget,  # type: ignore[arg-type]
                )
        refused = gate.authorize(agent, Call.tool("refund", {"amount": Fraction(50)}))
        assert not refused.allowed and "Fraction" in refused.reasons[0]
    finally:
        gate.close()


SECRET = "sk-live-0123456789"


@pytest.mark.parametrize(
    "args",
    [
        {"amount": 1, "tool:refund": 1, SECRET: 1},
        {"amount": 1, "'amount'": 1, SECRET: 1},
        {"amount": 1, f"{SECRET}'ab'{SECRET}": 1, "ab": 1},
        {"amount": 1, "ab": 1, f"{SECRET}'ab'{SECRET}": 1},
        {"amount": 1, "role worker rule 2": 1, SECRET: 1},
        {"amount": 1, "": 1, SECRET: 1},
    ],
    ids=["resource", "declared-quoted", "nested-after", "nested-before", "rule-text", "empty"],
)
def test_a_crafted_argument_name_rewrites_only_itself_in_the_recorded_reason(
    gate: Gate, args: dict[str, int]
) -> None:
    agent = _agent(gate)
    refused = gate.authorize(agent, Call.tool("refund", args), call_id="c1")
    assert not refused.allowed
    gate.flush()
    entry = [e for e in gate.audit.entries() if e.resource == "tool:refund"][-1]
    assert entry.kind == "deny"
    assert entry.reasons == ("tool:refund does not declare an argument <an undeclared argument name>",)
    assert SECRET not in repr(list(gate.audit.entries()))
