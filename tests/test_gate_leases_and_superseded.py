"""Review R42, a second look at the lead's fixes of this session (commits 97e167b, 3c14f06).

Everything runs the real components: the Gate, the GatedBroker and its journal on real SQLite
files and on the session's real PostgreSQL server (``store`` fixture; faults are SQLite triggers
as in review R41), LangGraph agents built by ``create_gated_agent`` over ``ScriptedChatModel``.

What holds (asserted below):

- ``GatedBroker.reconcile`` (97e167b): a lease granted then renewed and lost in a restart is
  charged exactly what was reserved for it (the request's and the renewal's reservations, never
  more); a second ``reconcile`` changes nothing; ``verify`` passes; on SQLite and PostgreSQL. A
  lease whose ``lease_granted`` outcome the store refused, the process stopping before it was
  recorded, is restored from the journal, left alone by ``reconcile`` and charged the time it
  held when it expires.
- ``AuditLog.referring`` and ``explain`` give the same entries through the reference index and
  through the whole-log scan (a log whose ``audit_refs`` is not complete), on both stores.
- Superseded approval requests (3c14f06), at the Gate's level on SQLite and PostgreSQL: a request
  with a vote already cast (quorum 2) is closed by a request for the same call id of the same run
  asked in another version, also by another Gate over the store (a restart); its ``deny`` entry
  refers to its ``approval_required`` entry and copies its redacted ``args`` (an argument the
  policy does not mark loggable stays out of every entry); ``explain`` of it shows that entry;
  the same version asked again reuses the request; the late second vote for the closed request
  counts for nothing (the old version asked again is a new request, with no vote, and closes the
  edited one's in turn); the same call id in another run and a consumed request are left alone;
  ``ApprovalStore.prune`` (``agentgate store prune``) removes the ``approval_calls`` rows with
  their requests (PostgreSQL foreign key); ``asked_in`` of the wrong type is an ``InputError``
  that writes nothing.
- LangGraph (3c14f06): an argument a model forges for an ``InjectedState`` field of a custom
  ``BaseModel`` args schema is left out of the call decided and audited (sync and async; the
  tool gets the run's state), and a model writing only such an argument is decided on none.

Fixed by the lead (were strict xfails):

- ``agentgate/dispatch/broker/_gated.py`` (``reconcile`` / ``_link``): a lease queued around the
  gate and renewed through the ``GatedBroker`` has a decision row made by its renewal; its grant
  was audited unlinked (no ``ref``), so ``reconcile`` finds no ``lease_granted`` outcome referring
  to the renewal's allow and, once the lease is lost in a restart, returns the renewal's whole
  reservation with the reason "it never held GPUs", although only a granted lease is renewed.
  ``_link`` now appends a ``lease_granted`` outcome of the renewal's decision with its row.
- ``agentgate/integrations/langgraph.py`` (call key of ``Gate.authorize``'s ``asked_in``): the
  superseding is scoped by ``_run_id``, which holds the asking answer's message id. An edit that
  appends the corrected ``AIMessage`` (``update_state`` without the old message id; the tools
  node runs the new calls) is another run: the request for the old arguments stays pending to
  approvers until it expires (review R40's defect, in the other way of editing). ``asked_in`` is
  now ``(scope, version)``: the thread and outer tasks, and the answer's id with its digest.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any

import pytest
import test_dispatch_unrecorded_ends as second_dispatch
import test_langgraph_time_travel as timetravel
from langchain_core.messages import AIMessage, ToolMessage
from langchain_core.tools import StructuredTool
from langgraph.prebuilt import InjectedState
from langgraph.types import Command
from pydantic import BaseModel
from test_broker_restart_budget import World, lease

from agentgate.audit.entry import AuditEntry, argument_digest
from agentgate.capabilities import Call
from agentgate.dispatch.broker import GangRequest
from agentgate.errors import AuditError, Denied, InputError, StoreError
from agentgate.gate import Approval, Authorization, Gate
from agentgate.integrations.langgraph import ScriptedChatModel, create_gated_agent
from agentgate.keys import SigningKey
from agentgate.policy import parse_policy
from agentgate.store import SQLiteStore, Store, open_store
from agentgate.store.approvals import ApprovalStore

GO = {"messages": [{"role": "user", "content": "go"}]}

# --- (1) GatedBroker.reconcile -----------------------------------------------------------------


@pytest.fixture
def world(store: Store) -> Iterator[World]:
    made = World(store.url)
    yield made
    made.process.gate.close()


def _lose_the_journal(world: World) -> None:
    """The broker's journal loses its leases and queue (written before they were made)."""
    with world.process.store.transaction() as tx:
        tx.execute("DELETE FROM broker_leases")
        tx.execute("DELETE FROM broker_queue")


def _related(world: World, index: int) -> tuple[list[int], list[int]]:
    """The indexes ``explain`` shows with entry ``index`` and those ``referring`` gives."""
    audit = world.process.gate.audit
    return [e.index for e in audit.explain(index).related], [e.index for e in audit.referring(index)]


def test_a_granted_and_renewed_lease_lost_is_charged_what_was_reserved_never_more(world: World) -> None:
    gated = world.process.gated
    spent_before = world.spent()
    decision = gated.submit(world.trainer, lease("ft-1")).authorization.audit_index
    assert decision is not None
    world.clock.now += 30
    gated.renew(world.trainer, "ft-1")  # 2 GPUs x 30 s more, 1,000 per GPU-second
    (decided,) = gated.decisions.all()
    reserved = sum(amount for _r, _u, amount in decided.reservations)
    assert reserved == 120_000 + 60_000
    indexed = _related(world, decision)
    _lose_the_journal(world)
    after = world.restart()
    assert after.gated.reconcile() == ["ft-1"]
    lost = after.entries()[-1]
    assert (lost.status, lost.ref, lost.budget_delta) == ("lease_lost", decision, reserved)
    assert world.spent() - spent_before == reserved
    assert world.remaining() == world.budget - reserved
    assert after.gated.reconcile() == []  # twice in a row: nothing more
    assert world.spent() - spent_before == reserved
    assert after.gate.verify().ok
    # The lookup reconcile uses gives the same entries through the index and by scanning the log.
    explained, referring = _related(world, decision)
    assert explained[: len(indexed[0])] == indexed[0] and lost.index in referring
    after.gate.audit.refs_indexed = False  # a role that could not build audit_refs: the scan path
    assert _related(world, decision) == (explained, referring)
    renewal = next(e for e in after.entries() if e.kind == "allow" and e.index > decision)
    assert _related(world, renewal.index)[0] == [
        e.index for e in after.gate.audit.explain(renewal.index).related
    ]


def test_a_lease_queued_around_the_gate_and_renewed_is_charged_when_lost(world: World) -> None:
    process = world.process
    spent_before = world.spent()
    process.broker.submit(GangRequest("side", "team-a", 2, gpu_type="H100", holder=world.trainer.did))
    world.clock.now += 30
    process.gated.renew(world.trainer, "side")  # the lease runs 30 s more: 60,000 reserved
    (decided,) = process.gated.decisions.all()
    assert [amount for _r, _u, amount in decided.reservations] == [60_000]
    _lose_the_journal(world)
    after = world.restart()
    assert after.gated.reconcile() == ["side"]
    lost = after.entries()[-1]
    assert lost.status == "lease_lost" and "never held GPUs" not in lost.reasons[0]
    assert lost.budget_delta == 60_000 and world.spent() - spent_before == 60_000


# --- (2) approval requests superseded, at the Gate --------------------------------------------

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


def test_prune_forgets_the_call_rows_of_expired_requests(approvals: Approvals) -> None:
    old = _request_id(approvals.ask(7, "m", "v1"))
    _request_id(approvals.ask(8, "m", "v2"))
    assert approvals.gate.store.query("SELECT COUNT(*) FROM approval_calls")[0][0] == 2
    assert approvals.gate.approvals.prune(time.time() + 10_000) == 2
    assert approvals.gate.store.query("SELECT COUNT(*) FROM approval_calls")[0][0] == 0
    assert approvals.gate.store.query("SELECT COUNT(*) FROM approvals WHERE id = ?", (old,))[0][0] == 0


# --- (3) LangGraph: injected arguments left out of the call decided ----------------------------

INJECTED_POLICY = """
version: 1
trust_anchors: {{root: {{did: "{root}"}}}}
principals:
  agent: {{kind: agent, did: "{agent}", roles: [worker]}}
tools:
  report:
    args: {{path: {{type: string, required: true}}}}
    loggable: [path]
  peek: {{}}
roles:
  worker:
    kind: agent
    capabilities:
      - {{resource: tool:report, constraints: {{path: {{prefix: "reports/"}}}}}}
      - {{resource: tool:peek}}
    budget: {{limit: 100, unit: calls}}
    ttl_s: 3600
"""


class ReportArgs(BaseModel):
    path: str
    state: Annotated[dict[str, Any], InjectedState]


class PeekArgs(BaseModel):
    state: Annotated[dict[str, Any], InjectedState]


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_forged_injected_field_of_a_custom_schema_is_not_decided_on(tmp_path: Path, mode: str) -> None:
    keys = {n: SigningKey.generate() for n in ("root", "agent")}
    text = INJECTED_POLICY.format(**{n: k.did for n, k in keys.items()})
    gate = Gate(parse_policy(text, source="injected.yaml"), SQLiteStore(tmp_path / "agentgate.db"))
    try:
        agent = gate.issue(keys["root"], name="agent", key=keys["agent"], role="worker")
        seen: list[tuple[str, object]] = []

        def report(path: str, state: dict[str, Any]) -> str:
            seen.append((path, sorted(state)))
            return "ok"

        def peek(state: dict[str, Any]) -> str:
            seen.append(("peek", sorted(state)))
            return "ok"

        tools = [
            StructuredTool.from_function(func=report, name="report", description="r", args_schema=ReportArgs),
            StructuredTool.from_function(func=peek, name="peek", description="p", args_schema=PeekArgs),
        ]
        forged = {"forged": True}
        turn = AIMessage(
            content="",
            tool_calls=[
                {"name": "report", "args": {"path": "reports/q1", "state": forged}, "id": "r1"},
                {"name": "peek", "args": {"state": forged}, "id": "p1"},
            ],
        )
        graph = create_gated_agent(
            gate, name="agent", model=ScriptedChatModel(turns=[turn]), tools=tools, gate_models=False
        )
        if mode == "sync":
            out = graph.invoke(GO, context=agent)
        else:
            out = asyncio.run(graph.ainvoke(GO, context=agent))
        answers = {m.tool_call_id: m for m in out["messages"] if isinstance(m, ToolMessage)}
        assert {k: m.status for k, m in answers.items()} == {"r1": "success", "p1": "success"}
        assert sorted(seen, key=repr) == sorted(
            [("reports/q1", ["messages"]), ("peek", ["messages"])], key=repr
        )  # the tools got the run's state, not the forgery
        gate.flush()
        allowed = {e.resource: e for e in gate.audit.entries() if e.kind == "allow"}
        assert allowed["tool:report"].args == {"path": "reports/q1"}
        assert allowed["tool:report"].args_digest == argument_digest({"path": "reports/q1"})
        assert allowed["tool:peek"].args_digest == argument_digest({})
        assert gate.verify().ok
    finally:
        gate.close()


def test_an_edit_that_appends_the_corrected_answer_closes_the_old_request(tmp_path: Path) -> None:
    rig = timetravel._rig(tmp_path)
    try:
        graph = timetravel._agent(rig, timetravel._turn(("publish", {"path": "reports/a"}, "pub-1")))
        config = timetravel._thread("edit-append")
        paused = graph.invoke(GO, config, context=rig.agent)
        corrected = AIMessage(
            content="", tool_calls=[{"name": "publish", "args": {"path": "reports/b"}, "id": "pub-1"}]
        )
        graph.update_state(config, {"messages": [corrected]}, as_node="model")  # appended: a new id
        old = rig.approve(paused["__interrupt__"][0].value)
        asked = graph.invoke(Command(resume=old), config, context=rig.agent)
        (again,) = asked["__interrupt__"]
        assert again.value["request"]["args"] == {"path": "reports/b"}  # the corrected call is asked
        done = graph.invoke(Command(resume=rig.approve(again.value)), config, context=rig.agent)
        assert "__interrupt__" not in done and rig.ran == ["publish:reports/b"]
        assert rig.pending_requests() == []  # the request for reports/a stays pending
    finally:
        rig.gate.close()


def test_a_lease_whose_grant_could_not_be_recorded_is_charged_its_time_after_a_restart(
    tmp_path: Path,
) -> None:
    """The grant outcome is the event the store refused; the process stops before it is recorded.
    The journal has the lease: the restored broker keeps it (reconcile leaves it alone) and its
    end is charged the time it was held, although the log never got its grant."""
    world = World(str(tmp_path / "agentgate.db"))
    try:
        warm = world.process.gated.submit(world.trainer, lease("warm"))  # every table exists
        world.process.gated.release(world.trainer, "warm")
        spent_before = world.spent()
        with second_dispatch.grant_outcomes_refused(Path(world.url)), pytest.raises((StoreError, AuditError)):
            world.process.gated.submit(world.trainer, lease("ft-1"))
        after = world.restart()
        assert [held.id for held in after.broker.leases()] == ["ft-1"]
        assert after.gated.reconcile() == []
        world.clock.now += 90  # past its 60 s ttl
        after.gated.advance()
        decision = next(
            e
            for e in after.entries()
            if e.kind == "allow" and e.index > (warm.authorization.audit_index or 0)
        )
        ends = [e for e in after.entries() if e.ref == decision.index and e.kind == "outcome"]
        assert [(e.status, e.budget_delta) for e in ends] == [("lease_expired", 120_000)]
        assert world.spent() - spent_before == 120_000
        assert after.gate.verify().ok
    finally:
        world.process.gate.close()


def test_using_a_superseded_requests_approval_says_it_was_superseded(approvals: Approvals) -> None:
    """The lead's follow-up of the observation above: the refusal of an approval of a closed
    request said only "is denied"; it now says the request was superseded."""
    first = approvals.ask(500, "m", "v1")
    approvals.ask(900, "m", "v2")  # the edit closes the first request
    with pytest.raises(Denied, match="superseded, its call was changed"):
        ApprovalStore(approvals.gate.store).approve(_request_id(first), approvals.keys["lead"].did)
