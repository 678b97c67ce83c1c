"""The Gate's approval gates (agentgate/gate/_approval.py): a call behind a gate opens one request,
each approver's vote is checked and counted (a quorum needs that many distinct approvers), a
request is closed once (approved and used, declined, expired, ended by the call's refusal or
superseded by an edited call), a used approval is never accepted again, and every step is an
audit entry."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from test_audit_reconciliation import LOG_SEED, _keys, _read
from test_audit_reconciliation import _policy_text as _r27_policy_text
from test_gate_policy_change import KEYS, MODEL, REFUND, policy_text
from test_gate_run import Setup
from test_gate_run import setup as setup  # the fixture

from agentgate.audit.entry import AuditEntry
from agentgate.capabilities import Call
from agentgate.cli.main import main
from agentgate.errors import InputError
from agentgate.gate import AgentIdentity, Approval, Authorization, Gate, approval_call_hash
from agentgate.keys import SigningKey
from agentgate.policy import parse_policy
from agentgate.store import SQLiteStore, Store, open_store
from agentgate.store.ledger import BudgetLedger

R23_POLICY = """
version: 1
trust_anchors: {{root: {{did: "{root}"}}}}
principals:
  agent: {{kind: agent, did: "{agent}", roles: [worker]}}
  alice: {{kind: human, did: "{alice}"}}
tools:
  lookup:
    args: {{id: {{type: string, required: true}}}}
    idempotent: true
  pay:
    args: {{amount: {{type: integer, required: true}}}}
roles:
  worker:
    kind: agent
    capabilities: [{{resource: tool:lookup}}, {{resource: tool:pay}}]
    budget: {{limit: 1000000, unit: calls}}
    ttl_s: 600
approvals:
  pay:
    resource: tool:pay
    approvers: [alice]
    expiry_s: 1
"""


def _r23_gate(path: Path, keys: dict[str, SigningKey]) -> Gate:
    text = R23_POLICY.format(root=keys["root"].did, agent=keys["agent"].did, alice=keys["alice"].did)
    return Gate(parse_policy(text, source="r23.yaml"), SQLiteStore(path))


def test_approval_requests_never_answered_are_forgotten_once_expired(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Gate._open_requests keeps every approval request asked in this process until it is
    answered; one never answered (the run was abandoned) stays after it expired, so a service
    whose agents ask for approvals that nobody answers grows by one entry per request, forever."""
    keys = {n: SigningKey.generate() for n in ("root", "agent", "alice")}
    with _r23_gate(tmp_path / "agentgate.db", keys) as gate:
        agent = gate.issue(keys["root"], name="agent", key=keys["agent"], role="worker")
        for i in range(200):
            auth = gate.authorize(agent, Call.tool("pay", {"amount": i}), call_id=f"c{i}", run_id=f"r{i}|t")
            assert auth.needs_approval
        # Every request (expiry_s: 1, from the asking's second rounded up) has expired: the clock
        # is moved, never waited for (until review R82 a sleep of 1.1 s, which a request's
        # rounded-up expiry can outlast).
        wall = time.time
        monkeypatch.setattr(time, "time", lambda: wall() + 2)
        for i in range(200, 400):
            gate.authorize(agent, Call.tool("pay", {"amount": i}), call_id=f"c{i}", run_id=f"r{i}|t")
        held = len(gate._open_requests)
    assert held <= 250, f"{held} approval requests held, 200 of them expired"


@pytest.fixture
def r27_gate(tmp_path: Path) -> Any:
    made = Gate(
        parse_policy(_r27_policy_text(), source="r27.yaml"),
        SQLiteStore(tmp_path / "a.db"),
        log_key=SigningKey(LOG_SEED),
    )
    yield made
    made.close()


def test_declining_an_approval_that_was_given_and_used_writes_no_contradicting_refusal(
    r27_gate: Gate,
) -> None:
    gate = r27_gate
    """``Gate.decline`` of a request whose approval was given, consumed, and whose call ran wrote
    a ``deny`` 'approval declined' referring to the same ``approval_required`` entry as the
    ``approval_given`` and the ``allow``: the log then says the request was both approved (the
    call ran, outcome ok) and declined. A second decline wrote a second refusal of it."""
    keys = _keys()
    boss = gate.issue(keys["root"], name="boss", key=keys["boss"], role="boss")
    call = Call.tool("transfer", {"to": "x"})
    asked = gate.authorize(boss, call, call_id="t1")
    approval = Approval.sign(dict(asked.request or {}), keys["dana"])
    allowed = gate.authorize(boss, call, call_id="t1", approval=approval)
    gate.run(allowed, lambda: "sent", call_id="t1")
    with pytest.raises(Exception):  # noqa: B017 - an InputError is the fix proposed; any refusal will do
        gate.decline(asked)
    gate.flush()
    entries = _read(gate.store)
    refusals = [e for e in entries if e["kind"] == "deny" and e["ref"] == asked.audit_index]
    assert refusals == [], "the log says this approved, used request was declined"


def test_a_refusal_for_an_expired_approval_refers_to_its_request(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # R27: a refusal because the approval expired had ref null, so the log alone could not tie it
    # to the approval_required entry of the request it ends (a declined request's refusal can).
    keys = {n: SigningKey.generate() for n in ("root", "agent", "alice")}
    with _r23_gate(tmp_path / "agentgate.db", keys) as gate:
        agent = gate.issue(keys["root"], name="agent", key=keys["agent"], role="worker")
        pay = Call.tool("pay", {"amount": 5})
        asked = gate.authorize(agent, pay, call_id="c1", run_id="r|t")
        approval = Approval.sign(asked.approval_payload(), keys["alice"])
        wall = time.time  # the request (expiry_s: 1, from the asking's second rounded up) has expired
        monkeypatch.setattr(time, "time", lambda: wall() + 2)
        refused = gate.authorize(agent, pay, call_id="c1", run_id="r|t", approval=approval)
        assert not refused.allowed and "expired" in " ".join(refused.reasons)
        (entry,) = [e for e in gate.audit.entries() if e.index == refused.audit_index]
        assert (entry.kind, entry.ref) == ("deny", asked.audit_index)


def test_an_approval_that_does_not_count_says_why_in_the_answer_and_its_entry(
    tmp_path: Path,
) -> None:
    # R42 left it: a late vote for a request superseded by an edit was dropped in silence (quorum
    # above one), and the run was asked again with nothing said; quorum one refused it in words.

    from agentgate.gate import Approval
    from agentgate.keys import SigningKey

    with SQLiteStore(tmp_path / "s.db") as store:
        made = Approvals(store)
        try:
            first = made.ask(500, "memo", "v1")
            made.ask(900, "memo", "v2")  # the edit closes the first request
            late = Approval.sign(first.approval_payload(), made.keys["lead2"])
            again = made.ask(500, "memo", "v1", approval=late)
            assert again.needs_approval
            (note,) = [r for r in again.reasons if "not counted" in r]
            assert made.keys["lead2"].did in note and "superseded" in note
            stranger = Approval.sign(again.approval_payload(), SigningKey.generate())
            asked = made.ask(500, "memo", "v1", approval=stranger)
            assert "approval not counted: its approver is not one of this call's approvers" in asked.reasons
            entry = made.entries()[asked.audit_index or 0]
            assert entry.kind == "approval_required" and any("not counted" in r for r in entry.reasons)
        finally:
            made.gate.close()


def test_an_approval_of_another_call_leaves_the_call_awaiting_approval_and_says_so(tmp_path: Path) -> None:
    # Kills: Gate._approval_invalid without its call-hash check (under a quorum of one, the other
    # call's approval then turned the call into a deny instead of leaving it to be approved).

    from agentgate.gate import Approval

    with SQLiteStore(tmp_path / "s.db") as store:
        made = Approvals(store)
        try:
            made.text = made.text.replace("quorum: 2", "quorum: 1")
            made.restart()
            first = made.ask(500, "memo", "v1")
            assert made.ask(900, "memo", "v1", run="t|answer:a2").needs_approval
            wrong = Approval.sign(first.approval_payload(), made.keys["lead"])
            asked = made.ask(900, "memo", "v1", run="t|answer:a2", approval=wrong)
            assert asked.needs_approval, asked.reasons
            assert "approval not counted: it was given for another call" in asked.reasons
        finally:
            made.gate.close()


def test_a_forged_approval_under_a_quorum_of_one_does_not_allow_the_call(tmp_path: Path) -> None:
    # Kills: Gate._approval_invalid without its signature check: an approval naming an approver
    # but signed by another key then allowed the call (quorum one is decided in the gate, with no
    # vote recorded in the store). No other test caught it.
    import dataclasses

    from agentgate.gate import Approval

    with SQLiteStore(tmp_path / "s.db") as store:
        made = Approvals(store)
        try:
            made.text = made.text.replace("quorum: 2", "quorum: 1")
            made.restart()
            asked = made.ask(500, "memo", "v1")
            signed = Approval.sign(asked.approval_payload(), SigningKey.generate())
            forged = dataclasses.replace(signed, approver=made.keys["lead"].did)
            again = made.ask(500, "memo", "v1", approval=forged)
            assert again.needs_approval and not again.allowed, again.reasons
            assert f"approval not counted: its signature is not {made.keys['lead'].did}'s" in again.reasons
        finally:
            made.gate.close()


def _gate(store: Store, **changes: object) -> Gate:
    return Gate(parse_policy(policy_text(**changes), source="p.yaml"), store)


def _agent(gate: Gate) -> AgentIdentity:
    return gate.issue(KEYS["root"], name="agent", key=KEYS["agent"], role="worker")


@pytest.mark.postgres
def test_a_gate_on_postgresql_allows_once_after_two_approvers_answer_from_two_processes(
    postgres_url: str,
) -> None:
    from agentgate.store._postgres import PostgresStore

    first = _gate(PostgresStore(postgres_url), quorum=2)
    second = _gate(PostgresStore(postgres_url), quorum=2)
    try:
        agent = _agent(first)
        asked = first.authorize(agent, REFUND, call_id="c1")
        assert asked.needs_approval and asked.request is not None
        by_alice = Approval.sign(asked.request, KEYS["alice"])
        by_bob = Approval.sign(asked.request, KEYS["bob"])
        answers: dict[str, Authorization] = {}
        barrier = threading.Barrier(2)

        def answer(gate: Gate, who: str, approval: Approval) -> None:
            barrier.wait()
            answers[who] = gate.authorize(agent, REFUND, call_id="c1", approval=approval)

        voters = [
            threading.Thread(target=answer, args=(first, "alice", by_alice)),
            threading.Thread(target=answer, args=(second, "bob", by_bob)),
        ]
        for voter in voters:
            voter.start()
        for voter in voters:
            voter.join()
        allowed = [who for who, auth in answers.items() if auth.allowed]
        if not allowed:  # both counted before either saw the other's vote: the next answer completes
            answers["again"] = first.authorize(agent, REFUND, call_id="c1", approval=by_alice)
            allowed = [who for who, auth in answers.items() if auth.allowed]
        assert len(allowed) == 1
        auth = answers[allowed[0]]
        assert sorted((auth.approver or "").split(",")) == sorted([KEYS["alice"].did, KEYS["bob"].did])
        owner = first if allowed[0] != "bob" else second
        assert owner.run(auth, lambda: "refunded") == "refunded"
        again = first.authorize(agent, REFUND, call_id="c1", approval=by_bob)
        assert not again.allowed
        first.flush()
        second.flush()
        assert list(first.audit.verify().problems) == []
    finally:
        first.close()
        second.close()


def _prune_scenario(
    gate: Gate, url: str, capsys: pytest.CaptureFixture[str]
) -> tuple[AgentIdentity, Authorization, Authorization]:
    """An agent's refund asked for approval, the request expired two hours ago and pruned by
    ``agentgate store prune`` while a model call decided (not yet run) holds its reservation;
    then the approval given for the pruned request presented: (agent, asked, late answer)."""
    agent = _agent(gate)
    asked = gate.authorize(agent, REFUND, call_id="c1")
    assert asked.needs_approval and asked.request is not None and asked.audit_index is not None
    held = gate.authorize(agent, MODEL, tokens=(10, 5))  # decided, not run: its reservation held
    assert held.allowed and held.reservations
    with gate.store.transaction() as tx:  # the request expired two hours ago
        tx.execute("UPDATE approvals SET expires_at = ?", (time.time() - 7200,))
    assert main(["store", "prune", "--older-than", "1h", "--store", url, "--json"]) == 0
    assert '"approval_requests": 1, "settled_reservations": 0' in capsys.readouterr().out
    late = gate.authorize(agent, REFUND, call_id="c1", approval=Approval.sign(asked.request, KEYS["alice"]))
    assert gate.run(held, lambda: "text", spent=lambda _: (10, 2)) == "text"
    gate.flush()
    assert BudgetLedger(gate.store).remaining(agent.grant_id) == 10_000 - 12
    return agent, asked, late


def test_an_approval_for_a_pruned_request_is_a_recorded_refusal_and_the_log_still_explains(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "ag.db"
    gate = _gate(SQLiteStore(path))
    try:
        agent, asked, late = _prune_scenario(gate, str(path), capsys)
        assert late.verdict == "deny" and late.reasons[0].startswith("approval not usable")
        assert list(gate.audit.verify().problems) == []
        anew = gate.authorize(agent, REFUND, call_id="c1")
        assert anew.needs_approval and anew.request is not None
        assert asked.request is not None and anew.request["id"] != asked.request["id"]
    finally:
        gate.close()
    assert main(["audit", "explain", str(asked.audit_index), "--store", str(path)]) == 0
    assert "approval_required" in capsys.readouterr().out


@pytest.mark.postgres
def test_store_prune_on_postgresql_while_a_gate_holds_a_reservation(
    postgres_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from agentgate.store._postgres import PostgresStore

    gate = _gate(PostgresStore(postgres_url))
    try:
        _, _, late = _prune_scenario(gate, postgres_url, capsys)
        assert late.verdict == "deny"
        assert list(gate.audit.verify().problems) == []
    finally:
        gate.close()


def test_the_refusal_of_an_approval_for_a_pruned_request_names_its_request(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "ag.db"
    gate = _gate(SQLiteStore(path))
    try:
        _, asked, late = _prune_scenario(gate, str(path), capsys)
        assert late.audit_index is not None and asked.request is not None
        # The request is gone with its link to the approval_required entry (docs/operations.md,
        # Growth and pruning): the refusal cannot refer to it, and names the request instead.
        entry = gate.audit.entry(late.audit_index)
        assert entry.ref is None and asked.request["id"] in " ".join(entry.reasons)
    finally:
        gate.close()


APPROVAL_POLICY = """
version: 1
trust_anchors: {{root: {{did: "{root}"}}}}
principals:
  agent: {{kind: agent, did: "{agent}", roles: [worker]}}
  lead: {{kind: human, did: "{lead}", roles: [owner]}}
  lead2: {{kind: human, did: "{lead2}", roles: [owner]}}
tools:
  pay:
    args: {{amount: {{type: integer, required: true}}, memo: {{type: string}}}}
    loggable: [amount]
roles:
  worker:
    kind: agent
    capabilities: [{{resource: tool:pay}}]
    budget: {{limit: 100, unit: calls}}
    ttl_s: 3600
  owner:
    kind: human
    capabilities: [{{resource: tool:pay}}]
    ttl_s: 3600
approvals:
  pay:
    resource: tool:pay
    approvers: [lead, lead2]
    quorum: 2
    expiry_s: 600
"""


class Approvals:
    """A Gate over ``store`` whose ``pay`` calls need two approvers, its keys and its agent."""

    def __init__(self, store: Store) -> None:
        self.url = store.url
        self.keys = {n: SigningKey.generate() for n in ("root", "agent", "lead", "lead2")}
        self.text = APPROVAL_POLICY.format(**{n: k.did for n, k in self.keys.items()})
        self.gate = self._gate()
        self.agent = self.gate.issue(self.keys["root"], name="agent", key=self.keys["agent"], role="worker")

    def _gate(self) -> Gate:
        return Gate(parse_policy(self.text, source="r42.yaml"), open_store(self.url))

    def restart(self) -> None:
        self.gate.close()
        self.gate = self._gate()

    def ask(self, amount: int, memo: str, version: str, run: str = "t|answer:a1", **kw: Any) -> Authorization:
        call = Call.tool("pay", {"amount": amount, "memo": memo})
        asked_in = (run, version) if isinstance(version, str) else version  # since R42's fix: a pair
        return self.gate.authorize(self.agent, call, call_id="c1", run_id=run, asked_in=asked_in, **kw)

    def state(self, request_id: str) -> tuple[str, str | None]:
        self.gate.flush()
        ((state, approver),) = self.gate.store.query(
            "SELECT state, approver FROM approvals WHERE id = ?", (request_id,)
        )
        return str(state), approver

    def entries(self) -> list[AuditEntry]:
        self.gate.flush()
        return list(self.gate.audit.entries())


@pytest.fixture
def approvals(store: Store) -> Iterator[Approvals]:
    made = Approvals(store)
    yield made
    made.gate.close()


def _request_id(auth: Authorization) -> str:
    assert auth.needs_approval and auth.request is not None
    return str(auth.request["id"])


def test_a_superseded_request_with_a_vote_cast_is_closed_once_with_a_redacted_deny(
    approvals: Approvals,
) -> None:
    first = approvals.ask(500, "secret memo A", "v1")
    old = _request_id(first)
    vote = Approval.sign(first.approval_payload(), approvals.keys["lead"])
    voted = approvals.ask(500, "secret memo A", "v1", approval=vote)
    assert _request_id(voted) == old and voted.request is not None
    assert voted.request["approved_by"] == [approvals.keys["lead"].did]  # one vote of two
    assert _request_id(approvals.ask(500, "secret memo A", "v1")) == old  # same version: the same request
    approvals.restart()  # the edit is asked for by another process
    edited = approvals.ask(900, "secret memo B", "v2")
    new = _request_id(edited)
    assert new != old and approvals.state(old) == ("denied", "agentgate:superseded")
    assert approvals.state(new) == ("pending", None)
    entries = approvals.entries()
    (closed,) = [e for e in entries if e.kind == "deny" and e.ref == first.audit_index]
    asked = entries[first.audit_index or 0]
    assert asked.kind == "approval_required" and asked.args == {"amount": 500}  # memo not loggable
    assert (closed.resource, closed.args_digest, closed.args, closed.rule, closed.chain_hash) == (
        asked.resource,
        asked.args_digest,
        {"amount": 500},
        asked.rule,
        asked.chain_hash,
    )
    assert not any("secret memo" in repr(e.model_dump()) for e in entries)
    assert old in closed.reasons[0] and new in closed.reasons[0]
    # The second vote for the closed request counts for nothing: the old version asked again
    # (an older checkpoint resumed) is a new request, with no vote, and closes the edited one's.
    late = Approval.sign(first.approval_payload(), approvals.keys["lead2"])
    again = approvals.ask(500, "secret memo A", "v1", approval=late)
    assert not again.allowed and _request_id(again) not in (old, new)
    assert again.request is not None and again.request["approved_by"] == []
    assert approvals.state(new) == ("denied", "agentgate:superseded")
    assert approvals.state(old) == ("denied", "agentgate:superseded")
    explained = approvals.gate.audit.explain(closed.index)
    assert [e.index for e in explained.related] == [asked.index]
    assert approvals.gate.verify().ok


def test_requests_of_another_run_or_already_used_are_not_superseded(approvals: Approvals) -> None:
    other_run = _request_id(approvals.ask(1, "m", "v1", run="t|answer:other"))
    first = approvals.ask(2, "m", "v1")
    used = _request_id(first)
    payload = first.approval_payload()
    approvals.ask(2, "m", "v1", approval=Approval.sign(payload, approvals.keys["lead"]))
    assert approvals.ask(2, "m", "v1", approval=Approval.sign(payload, approvals.keys["lead2"])).allowed
    assert approvals.state(used)[0] == "consumed"
    _request_id(approvals.ask(3, "m", "v2"))
    assert approvals.state(used)[0] == "consumed"
    assert approvals.state(other_run) == ("pending", None)
    assert not [e for e in approvals.entries() if e.kind == "deny"]


def test_asked_in_of_the_wrong_type_is_an_input_error_that_writes_nothing(approvals: Approvals) -> None:
    before = approvals.gate.audit.size()
    with pytest.raises(InputError, match="asked_in"):
        approvals.ask(5, "m", b"v1")  # type: ignore[arg-type]
    assert approvals.gate.audit.size() == before
    assert approvals.gate.store.query("SELECT COUNT(*) FROM approvals")[0][0] == 0


# --- on test_gate_run's Gate (Setup): requests counted, declined, closed by a refusal, not replayed -----


def test_a_request_already_approved_and_used_cannot_be_declined_afterwards(setup: Setup) -> None:
    """Kills: decline swallowing ``Denied``/``InputError`` from the request's store (a request
    decided meanwhile treated as declined). The request was approved and its call ran: a ``deny``
    entry written afterwards would contradict the log, which already says how it ended."""
    call = Call.tool("refund", {"amount": 500})
    asked = setup.gate.authorize(setup.agent, call, call_id="c1", run_id="run-1")
    approval = Approval.sign(asked.approval_payload(), setup.keys["lead"])
    auth = setup.gate.authorize(setup.agent, call, call_id="c1", run_id="run-1", approval=approval)
    setup.gate.run(auth, lambda: "refunded", call_id="c1", run_id="run-1")
    before = setup.entries()
    with pytest.raises(InputError, match="cannot be declined"):
        setup.gate.decline(asked, "too late")
    assert setup.entries() == before
    assert setup.gate.approvals.get(asked.request["id"]).state == "consumed"


def test_a_quorum_of_two_needs_two_distinct_approvers_and_logs_each_vote_as_it_comes(setup: Setup) -> None:
    """Kills: _approval_complete deciding a quorum above one on the first valid vote (``rule.quorum
    == 1`` widened, or the count compared to 1), and its vote not written as an
    ``approval_given`` entry when it is counted. Two people must sign; each signature is evidence
    in the log the moment it counts, not only once the call runs."""
    call = Call.tool("transfer", {"amount": 10})
    asked = setup.gate.authorize(setup.agent, call, call_id="t1", run_id="run-t")
    assert asked.needs_approval
    first = Approval.sign(asked.approval_payload(), setup.keys["lead"])
    half = setup.gate.authorize(setup.agent, call, call_id="t1", run_id="run-t", approval=first)
    assert half.needs_approval and not half.allowed, half.explain()
    given = [e for e in setup.entries() if e.kind == "approval_given"]
    assert [(e.approver, e.ref) for e in given] == [(setup.keys["lead"].did, asked.audit_index)]
    again = setup.gate.authorize(setup.agent, call, call_id="t1", run_id="run-t", approval=first)
    assert again.needs_approval, "the same approver counts once"
    second = Approval.sign(half.approval_payload(), setup.keys["second"])
    auth = setup.gate.authorize(setup.agent, call, call_id="t1", run_id="run-t", approval=second)
    assert auth.allowed, auth.explain()
    given = [e for e in setup.entries() if e.kind == "approval_given"]
    assert {e.approver for e in given} == {setup.keys["lead"].did, setup.keys["second"].did} and len(
        given
    ) == 2


def test_a_call_refused_outright_closes_its_open_approval_request_and_refers_to_it(setup: Setup) -> None:
    """Kills: _close_asked leaving the request open (its ``approvals.deny`` dropped) or not
    returning its ``approval_required`` index, and _write_refusal dropping ``ref``. A call waiting
    for approval that is then refused (here: run on an inherited identity) can never use the
    approval: the request must not stay listed to approvers, and the log must link the two."""
    call = Call.tool("refund", {"amount": 500})
    asked = setup.gate.authorize(setup.agent, call, call_id="c1", run_id="run-1")
    assert asked.needs_approval and asked.request is not None
    refused = setup.gate.authorize(setup.agent, call, call_id="c1", run_id="run-1", agent="intruder")
    assert not refused.allowed and not refused.needs_approval
    entry = setup.entries()[refused.audit_index]
    assert entry.kind == "deny" and entry.ref == asked.audit_index
    assert setup.gate.approvals.get(asked.request["id"]).state == "denied"
    late = Approval.sign(asked.approval_payload(), setup.keys["lead"])
    assert not setup.gate.authorize(setup.agent, call, call_id="c1", run_id="run-1", approval=late).allowed


def test_an_approval_already_used_is_refused_even_when_the_call_was_asked_for_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Mutant a7: ``_superseded`` treating any expired approval as replaced by the newer request
    (``own.state != "consumed"`` dropped). Rule: an approval that was used is refused when it is
    presented again, also once its request has expired and the same call was asked for again
    meanwhile: it is a replay, not an approval that came too late, and it ends the new request."""
    setup = Setup(tmp_path)
    setup.gate.close()
    text = setup.text.replace("    approvers: [lead]\n", "    approvers: [lead]\n    expiry_s: 60\n", 1)
    refund = "  refund:\n    args: {amount: {type: integer, required: true}}\n"
    text = text.replace(refund, refund + "    idempotent: true\n", 1)  # may be decided again
    assert text.count("expiry_s: 60") == 1 and text.count("idempotent: true") == 2
    with Gate(parse_policy(text, source="gate.yaml"), SQLiteStore(tmp_path / "short.db")) as gate:
        agent = gate.issue(setup.keys["root"], name="agent", key=setup.keys["agent"], role="worker")
        call = Call.tool("refund", {"amount": 500})
        asked = gate.authorize(agent, call, call_id="c1", run_id="run-1")
        approval = Approval.sign(asked.approval_payload(), setup.keys["lead"])
        used = gate.authorize(agent, call, call_id="c1", run_id="run-1", approval=approval)
        assert used.allowed, used.explain()
        gate.run(used, lambda: "refunded", call_id="c1", run_id="run-1")
        # The first request has expired: the clock moved on past its 60 s (until session 27 the
        # request lived 1 s and the test slept, which a loaded machine could spend between the
        # asking and the approval's use, expiring it before it was used).
        wall = time.time
        monkeypatch.setattr(time, "time", lambda: wall() + 61)
        # The same call decided again without the approval: a new request is opened.
        again = gate.authorize(agent, call, call_id="c1", run_id="run-1")
        assert again.needs_approval and again.request["id"] != approval.request, again.explain()
        replay = gate.authorize(agent, call, call_id="c1", run_id="run-1", approval=approval)
        assert not replay.allowed and not replay.needs_approval, replay.explain()


def test_a_resume_value_nested_past_the_recursion_limit_is_no_approval() -> None:
    """Review R52: ``Approval.parse`` read each field with ``str()``, so a resume value nested
    past the interpreter's recursion limit (as a hostile client can send through
    ``Command(resume=...)``) raised ``RecursionError`` out of the middleware instead of being a
    value that is no approval. A field that is not text is no approval either."""
    deep: dict[str, Any] = {}
    for _ in range(10_000):
        deep = {"request": deep}
    shown = {"resource": "tool:pay", "action": "invoke", "args_digest": "d", "grant": "g", "call_id": ""}
    request = {"id": "r1", "call_hash": approval_call_hash(*shown.values()), **shown}
    signed = Approval.sign(request, SigningKey.generate()).to_dict()
    assert Approval.parse(deep) is None
    assert Approval.parse({**signed, "request": deep}) is None
    assert Approval.parse({**signed, "call_hash": ["h"]}) is None
    parsed = Approval.parse(signed)
    assert parsed is not None and parsed.to_dict() == signed and parsed.verify()


def test_every_approval_that_does_not_count_is_an_entry_that_says_why(setup: Setup) -> None:
    """Review R52: an approval no approver gave for the call (a key the policy does not name,
    the requester's own, a bad signature, another gate's approver) presented while its request
    was open left no audit entry: the answer said why, but the request's one
    ``approval_required`` entry did not, so a forged or self-signed approval was invisible in
    the log. Each is now an ``approval_required`` entry of its own, saying why, referring to the
    request's first entry; the request stays open and the yes that counts still refers to that
    first entry. A yes already counted, presented again (a LangGraph resume replays it), adds
    nothing: no entry."""
    gate, keys = setup.gate, setup.keys
    refund, transfer = Call.tool("refund", {"amount": 500}), Call.tool("transfer", {"amount": 7})
    asked = gate.authorize(setup.agent, refund, call_id="c1")
    pair = gate.authorize(setup.agent, transfer, call_id="c2")
    payload = asked.approval_payload()
    forged = Approval(asked.request["id"], asked.request["call_hash"], keys["lead"].did, bytes(64))
    tries = {
        "a stranger": Approval.sign(payload, SigningKey.generate()),
        "the requester": Approval.sign(payload, keys["agent"]),
        "a bad signature": forged,
        "another gate's approver": Approval.sign(payload, keys["second"]),
    }
    for who, approval in tries.items():
        before = len(setup.entries())
        answer = gate.authorize(setup.agent, refund, call_id="c1", approval=approval)
        assert answer.needs_approval and answer.request["id"] == asked.request["id"], who
        (why,) = [r for r in answer.reasons if "not counted" in r]
        assert ("must not be the requester" in why) == (who == "the requester"), (who, why)
        (entry,) = setup.entries()[before:]
        assert entry.kind == "approval_required" and why in entry.reasons, who
        assert entry.ref == asked.audit_index and entry.principal == keys["agent"].did, who
    first = Approval.sign(pair.approval_payload(), keys["lead"])
    assert gate.authorize(setup.agent, transfer, call_id="c2", approval=first).needs_approval
    before = len(setup.entries())
    twice = gate.authorize(setup.agent, transfer, call_id="c2", approval=first)
    assert twice.needs_approval and any("each approver counts once" in r for r in twice.reasons)
    assert setup.entries()[before:] == []
    allowed = gate.authorize(setup.agent, refund, call_id="c1", approval=Approval.sign(payload, keys["lead"]))
    assert allowed.allowed, allowed.explain()
    (given,) = [e for e in setup.entries() if e.kind == "approval_given" and e.principal == keys["lead"].did][
        -1:
    ]
    assert given.ref == asked.audit_index


def test_a_call_whose_quorum_needs_an_approver_without_a_key_is_refused_not_asked_for_ever(
    tmp_path: Path,
) -> None:
    # R53: bob has no key, so a quorum of 2 over alice and bob can never be met; the call was
    # approval_required each time (a request opened, alice's vote counted, the run asked again).
    keys = {n: SigningKey.generate() for n in ("root", "agent", "alice")}
    text = R23_POLICY.format(root=keys["root"].did, agent=keys["agent"].did, alice=keys["alice"].did)
    text = text.replace("  alice: {kind", "  bob: {kind: human}\n  alice: {kind").replace(
        "approvers: [alice]", "approvers: [alice, bob]\n    quorum: 2"
    )
    with Gate(parse_policy(text, source="keyless.yaml"), SQLiteStore(tmp_path / "a.db")) as gate:
        agent = gate.issue(keys["root"], name="agent", key=keys["agent"], role="worker")
        refused = gate.authorize(agent, Call.tool("pay", {"amount": 5}), call_id="c1", run_id="r|t")
        assert refused.verdict == "deny" and not refused.needs_approval
        assert "(bob has no key): no approval can be valid" in refused.reasons[-1]
        assert gate.approvals.open_records() == []
        (entry,) = [e for e in gate.audit.entries() if e.index == refused.audit_index]
        assert entry.kind == "deny"


@pytest.mark.parametrize(
    ("field", "value"),
    [("resource", "tool:lookup"), ("args_digest", "0" * 64), ("grant", "another"), ("call_id", "c2")],
)
def test_signing_a_request_whose_call_hash_is_not_the_call_it_shows_is_refused(
    tmp_path: Path, field: str, value: str
) -> None:
    # R53: ``Approval.sign`` and ``Gate.approve`` signed whatever call_hash the payload carried,
    # so an approver shown one call (a payload edited on its way) said yes to another; only
    # ``agentgate approval sign`` compared the hash with the call shown.
    keys = {n: SigningKey.generate() for n in ("root", "agent", "alice")}
    with _r23_gate(tmp_path / "agentgate.db", keys) as gate:
        agent = gate.issue(keys["root"], name="agent", key=keys["agent"], role="worker")
        payload = gate.authorize(agent, Call.tool("pay", {"amount": 5}), call_id="c1").approval_payload()
        shown = {**payload, "request": {**payload["request"], field: value}}
        for sign in (Approval.sign, gate.approve):
            with pytest.raises(InputError, match="call_hash is not the hash of the call it shows"):
                sign(shown, keys["alice"])
        hidden = {**payload, "request": {k: v for k, v in payload["request"].items() if k != field}}
        with pytest.raises(InputError, match=f"no text {field!r}"):
            gate.approve(hidden, keys["alice"])
        assert Approval.sign(payload, keys["alice"]).verify()


def test_the_same_call_asked_in_two_threads_has_a_request_in_each(tmp_path: Path) -> None:
    """Review R55: two LangGraph threads asking the same call (same tool call id, arguments and
    grant) shared one approval request, because the call hash names no thread: an approval signed
    for thread A's interrupt ran the call in thread B, and A's resume was refused as already
    used; a refusal in B closed A's request. Each thread (``asked_in``'s scope) now has its own
    request; an approval of A's is not counted in B (asked again, saying why), and still allows
    the call in A."""
    from test_gate_approvals_revoked import PUBLISH, _desk

    desk = _desk(tmp_path)
    try:
        gate, me = desk.gate, desk.supervisor

        def ask(thread: str, approval: Approval | None = None) -> Authorization:
            return gate.authorize(
                me,
                PUBLISH,
                call_id="publish-0",
                run_id=f"{thread}|answer:1",
                asked_in=(f"{thread}|", "answer-1"),
                approval=approval,
            )

        in_a, in_b = ask("A"), ask("B")
        assert in_a.request is not None and in_b.request is not None
        assert in_a.request["id"] != in_b.request["id"]
        assert ask("A").request == {**in_a.request, "approved_by": []}  # asked again: the same request
        a_yes = Approval.parse(gate.approve(in_a.approval_payload(), desk.keys["dana"]))

        b_again = ask("B", a_yes)
        assert b_again.needs_approval and b_again.request is not None
        assert b_again.request["id"] == in_b.request["id"]
        assert any("another run" in reason for reason in b_again.reasons), b_again.reasons
        assert gate.approvals.get(in_a.request["id"]).state == "pending"

        assert ask("A", a_yes).allowed
        b_yes = Approval.parse(gate.approve(in_b.approval_payload(), desk.keys["dana"]))
        assert ask("B", b_yes).allowed
    finally:
        desk.gate.close()


def test_a_refusal_in_one_thread_leaves_the_other_threads_request_open(tmp_path: Path) -> None:
    """Review R55: a call refused in thread B (an approval answer that is no approval, a policy
    that now refuses it) closed the request thread A was waiting on for the same call."""
    from test_gate_approvals_revoked import PUBLISH, _desk

    desk = _desk(tmp_path)
    try:
        gate, me = desk.gate, desk.supervisor
        in_a = gate.authorize(me, PUBLISH, call_id="publish-0", asked_in=("A|", "answer-1"))
        in_b = gate.authorize(me, PUBLISH, call_id="publish-0", asked_in=("B|", "answer-1"))
        assert in_a.request is not None and in_b.request is not None
        gate.decline(in_b, "no")
        foreign = gate.authorize(
            me, PUBLISH, call_id="publish-0", asked_in=("B|", "answer-1"), agent="someone-else"
        )
        assert not foreign.allowed
        assert gate.approvals.get(in_a.request["id"]).state == "pending"
        assert gate.approvals.get(in_b.request["id"]).state == "denied"
    finally:
        desk.gate.close()


def test_the_open_requests_of_two_threads_asking_the_same_call_are_both_known(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Review R56: the Gate's memory of the requests it asked (``_open_requests``) was keyed by
    call hash alone, so of two threads asking the same call the later asking evicted the
    other's request (and a request asked again after its own expired evicted the live one of
    the other thread): each approval of the shadowed request read its entry from the store
    again. Both threads paused, A approved, B resumed, A expired and asked again: each approval
    refers to its own thread's ``approval_required`` entry, read from memory, never the store."""
    from test_gate_approvals_revoked import PUBLISH, _desk

    desk = _desk(tmp_path)
    try:
        gate, me = desk.gate, desk.supervisor
        store_reads: list[str] = []
        read = gate.approvals.asked_index

        def counted(approval_id: str, call_hash: str, **kw: Any) -> int | None:
            store_reads.append(approval_id)
            return read(approval_id, call_hash, **kw)

        monkeypatch.setattr(gate.approvals, "asked_index", counted)

        def ask(thread: str, approval: Approval | None = None) -> Authorization:
            return gate.authorize(
                me,
                PUBLISH,
                call_id="publish-0",
                run_id=f"{thread}|t",
                asked_in=(f"{thread}|", "answer-1"),
                approval=approval,
            )

        def given_ref(auth: Authorization) -> int | None:
            assert auth.allowed, auth.reasons
            gate.flush()
            (given,) = [e for e in gate.audit.entries() if e.kind == "approval_given"][-1:]
            return given.ref

        in_a, in_b = ask("A"), ask("B")
        assert in_a.request is not None and in_b.request is not None
        assert in_a.request["id"] != in_b.request["id"]
        a_yes = Approval.parse(gate.approve(in_a.approval_payload(), desk.keys["dana"]))
        assert given_ref(ask("A", a_yes)) == in_a.audit_index
        b_again = ask("B")  # resumed before its approval came: the same request, the same entry
        assert b_again.request is not None and b_again.request["id"] == in_b.request["id"]
        assert b_again.audit_index == in_b.audit_index

        in_c = ask("C")  # a third thread: its request expires unanswered, and it asks again
        assert in_c.request is not None
        with gate.store.transaction() as tx:
            tx.execute(
                "UPDATE approvals SET expires_at = ? WHERE id = ?", (time.time() - 1, in_c.request["id"])
            )
        c_again = ask("C")
        assert c_again.request is not None and c_again.request["id"] != in_c.request["id"]
        c_yes = Approval.parse(gate.approve(c_again.approval_payload(), desk.keys["erin"]))
        b_yes = Approval.parse(gate.approve(b_again.approval_payload(), desk.keys["erin"]))
        assert given_ref(ask("B", b_yes)) == in_b.audit_index
        assert given_ref(ask("C", c_yes)) == c_again.audit_index
        assert store_reads == []
    finally:
        desk.gate.close()
