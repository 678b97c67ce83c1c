"""Review R48 (mutation testing, third round on the Gate): hand mutations of ``Gate.run`` and its
outcome recording, budgets and cost, approvals, once-only calls, refusals and revocation (R46
mutated the Gate's decision and delegation, R47 the LangGraph hooks). Each test kills a mutant
that no other test killed; its docstring names the mutant and the rule it pins."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
import threading
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest

from agentgate.audit.entry import AuditEntry
from agentgate.capabilities import Call
from agentgate.errors import AgentGateError, Denied, InputError, SchedulingError
from agentgate.gate import AgentIdentity, Approval, Authorization, Gate
from agentgate.keys import SigningKey
from agentgate.policy import parse_policy
from agentgate.store import SQLiteStore

POLICY = """
version: 1
trust_anchors:
  root: {{did: "{root}"}}
tenants:
  team-a: {{}}
principals:
  agent: {{kind: agent, did: "{agent}", tenant: team-a, roles: [worker]}}
  lead: {{kind: human, did: "{lead}", roles: [lead]}}
  second: {{kind: human, did: "{second}", roles: [lead]}}
tools:
  lookup:
    args: {{id: {{type: string, required: true}}}}
    idempotent: true
  refund:
    args: {{amount: {{type: integer, required: true}}}}
  transfer:
    args: {{amount: {{type: integer, required: true}}}}
models:
  small: {{cost_per_mtok: {{input: 1000000, output: 2000000}}}}
  tiny: {{cost_per_mtok: {{input: 1, output: 1}}}}
gpus:
  h100: {{cost_per_gpu_hour: 3600000}}
roles:
  worker:
    kind: agent
    capabilities:
      - resource: tool:lookup
      - resource: tool:refund
      - resource: tool:transfer
      - resource: model:small
      - resource: model:tiny
      - resource: gpu:h100
    budget: {{limit: {budget}, unit: usd_micros}}
    ttl_s: 600
    delegation:
      max_depth: 1
      capabilities:
        - resource: tool:lookup
        - resource: tool:refund
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
  transfer-two:
    resource: tool:transfer
    approvers: [lead, second]
    quorum: 2
"""


class Setup:
    def __init__(self, path: Path, budget: int = 10_000_000) -> None:
        self.keys = {n: SigningKey.generate() for n in ("root", "agent", "lead", "second", "helper")}
        self.text = text = POLICY.format(budget=budget, **{n: k.did for n, k in self.keys.items()})
        self.path = path
        self.gate = Gate(parse_policy(text, source="gate.yaml"), SQLiteStore(path / "agentgate.db"))
        self.agent = self.gate.issue(self.keys["root"], name="agent", key=self.keys["agent"], role="worker")

    def entries(self) -> list[AuditEntry]:
        self.gate.flush()
        return list(self.gate.audit.entries())

    def spent(self, identity: AgentIdentity | None = None) -> int:
        return self.gate.remaining(identity or self.agent)[(identity or self.agent).chain.root.id][0]


@pytest.fixture
def setup(tmp_path: Path) -> Iterator[Setup]:
    made = Setup(tmp_path)
    yield made
    made.gate.close()


def _approved(setup: Setup, call: Call, call_id: str = "c1", run_id: str = "run-1") -> Authorization:
    asked = setup.gate.authorize(setup.agent, call, call_id=call_id, run_id=run_id)
    assert asked.needs_approval
    approval = Approval.sign(asked.approval_payload(), setup.keys["lead"])
    auth = setup.gate.authorize(setup.agent, call, call_id=call_id, run_id=run_id, approval=approval)
    assert auth.allowed, auth.explain()
    return auth


# --- budgets and cost ---------------------------------------------------------------------------


def test_a_negative_token_estimate_is_refused_before_anything_is_reserved(setup: Setup) -> None:
    """Kills: _token_counts accepting negative counts (``n >= 0`` dropped). A negative estimate
    makes the call's cost negative, so nothing is reserved and the call runs free: it must be an
    InputError, nothing recorded."""
    before = len(setup.entries())
    for tokens in ((-1_000_000, 10), (10, -1)):
        with pytest.raises(InputError, match="non-negative"):
            setup.gate.authorize(setup.agent, Call.model("small"), tokens=tokens)
    assert len(setup.entries()) == before
    assert setup.gate.ledger.usage(setup.agent.chain.root.id) == (0, 0)


def test_a_gpu_lease_reserves_the_gpu_time_it_adds_not_its_whole_ttl(setup: Setup) -> None:
    """Kills: _cost pricing a lease by ``ttl_s`` even when ``hold_s`` is given. A renewal adds
    ``hold_s`` seconds of GPU time; priced by its ttl it would reserve (and charge) far more."""
    call = Call("gpu:h100", "lease", {"count": 2, "ttl_s": 600, "hold_s": 60, "priority": 0})
    auth = setup.gate.authorize(setup.agent, call)
    assert auth.allowed, auth.explain()
    assert [(unit, amount) for _, unit, amount in auth.reservations] == [("usd_micros", 120_000)]
    by_ttl = setup.gate.authorize(
        setup.agent, Call("gpu:h100", "lease", {"count": 2, "ttl_s": 600, "priority": 0})
    )
    assert [amount for _, _, amount in by_ttl.reservations] == [1_200_000]


def test_a_model_call_costs_its_micro_dollars_rounded_up_never_down_to_free(setup: Setup) -> None:
    """Kills: _cost rounding a model call's price down (``per_million // 1_000_000``). At one
    micro-dollar per million tokens a short call costs a fraction of a micro-dollar: rounded down
    it is 0, nothing is reserved and the call is free however often it runs; and prompt and
    output tokens are priced at their own rates (not swapped)."""
    auth = setup.gate.authorize(setup.agent, Call.model("tiny"), tokens=(3, 2))
    assert [(unit, amount) for _, unit, amount in auth.reservations] == [("usd_micros", 1)]
    setup.gate.run(auth, lambda: "answer")
    assert setup.spent() == 1
    priced = setup.gate.authorize(setup.agent, Call.model("small"), tokens=(100, 10))
    assert [amount for _, _, amount in priced.reservations] == [120]  # 100 x 1 + 10 x 2


def test_a_model_call_that_failed_after_reporting_usage_is_charged_that_usage(setup: Setup) -> None:
    """Kills: _write_outcome charging a call only when its status is ``ok`` (``or actual is not
    None`` dropped): a model call whose result says it failed but reports the tokens it used
    (a refusal by the model, a truncated answer) consumed them, and its reservation would be
    released: every failing generation free."""
    auth = setup.gate.authorize(setup.agent, Call.model("small"), tokens=(1000, 1000))
    setup.gate.run(auth, lambda: "broken", failed=lambda _: True, spent=lambda _: (400, 100))
    assert setup.spent() == 600  # 400 x 1 + 100 x 2, not the 3,000 reserved, not 0
    outcome = setup.entries()[-1]
    assert outcome.kind == "outcome" and outcome.status == "error" and outcome.budget_delta == 600


# --- once-only calls ----------------------------------------------------------------------------


def test_a_once_only_call_that_failed_is_refused_again_without_a_cached_answer_key(setup: Setup) -> None:
    """Kills: _refuse_ran_before handing out the once key for any earlier state (``ran = once``
    for ``error`` too). The key tells an integration the call completed and its kept answer may
    be given again: for a call that failed there is no answer to give."""
    call = Call.tool("refund", {"amount": 50})
    auth = setup.gate.authorize(setup.agent, call, call_id="c2", run_id="run-2")
    with pytest.raises(RuntimeError):
        setup.gate.run(
            auth, lambda: (_ for _ in ()).throw(RuntimeError("boom")), call_id="c2", run_id="run-2"
        )
    failed = setup.gate.authorize(setup.agent, call, call_id="c2", run_id="run-2")
    assert not failed.allowed and failed.once_key is None
    done = setup.gate.authorize(setup.agent, call, call_id="c3", run_id="run-2")
    setup.gate.run(done, lambda: "refunded", call_id="c3", run_id="run-2")
    ran = setup.gate.authorize(setup.agent, call, call_id="c3", run_id="run-2")
    assert not ran.allowed and ran.once_key == done.once_key  # the precondition: ``ok`` keeps it


class _Interrupt(Exception):
    """What a framework raises inside a tool to pause it for a person (LangGraph's interrupt())."""


def test_a_once_only_call_that_paused_runs_when_its_run_resumes(setup: Setup) -> None:
    """Kills: _once_state leaving a paused call in ``error`` (its ``paused`` state dropped). A
    non-idempotent tool that asks a person mid-call is run again from its start when the run
    resumes: recorded as failed, the resumed call would be refused for ever."""
    call = Call.tool("refund", {"amount": 50})
    auth = setup.gate.authorize(setup.agent, call, call_id="p1", run_id="run-p")
    assert auth.once_key is not None

    def ask() -> str:
        raise _Interrupt("confirm the refund?")

    with pytest.raises(_Interrupt):
        setup.gate.run(
            auth, ask, call_id="p1", run_id="run-p", paused=lambda exc: isinstance(exc, _Interrupt)
        )
    resumed = setup.gate.authorize(setup.agent, call, call_id="p1", run_id="run-p")
    assert resumed.allowed, resumed.explain()
    setup.gate.run(resumed, lambda: "refunded", call_id="p1", run_id="run-p")
    assert not setup.gate.authorize(setup.agent, call, call_id="p1", run_id="run-p").allowed  # ran: once


def test_an_allow_already_used_or_a_refusal_cannot_be_abandoned(setup: Setup) -> None:
    """Kills: abandon without its ``_check_allowed``. Abandoning an allow that ran would write a
    second outcome for one call (and settle its settled reservation again); abandoning a refusal
    would write an outcome for a call that was never allowed."""
    auth = setup.gate.authorize(setup.agent, Call.model("small"), tokens=(100, 10))
    setup.gate.run(auth, lambda: "answer", spent=lambda _: (50, 5))
    refused = setup.gate.authorize(setup.agent, Call.tool("lookup", {"id": 5}))
    assert not refused.allowed
    before = setup.entries()
    for used in (auth, refused):
        with pytest.raises(Denied):
            setup.gate.abandon(used)
    assert setup.entries() == before
    assert setup.gate.ledger.usage(setup.agent.chain.root.id) == (60, 0)


def test_an_allow_runs_its_call_once_however_it_is_handed_on(setup: Setup) -> None:
    """Kills: ``_Once.take`` always answering True. One decision is one run: the same allow run
    again (or abandoned after it ran, or a copy of it run) is refused with nothing run, one
    outcome recorded and the budget charged once."""
    auth = setup.gate.authorize(setup.agent, Call.model("small"), tokens=(100, 10))
    ran: list[str] = []
    setup.gate.run(auth, lambda: ran.append("first"), spent=lambda _: (100, 10))
    with pytest.raises(Denied, match="already used"):
        setup.gate.run(auth, lambda: ran.append("again"), spent=lambda _: (100, 10))
    with pytest.raises(Denied, match="already used"):
        setup.gate.run(dataclasses.replace(auth), lambda: ran.append("copy"), spent=lambda _: (100, 10))
    assert ran == ["first"]
    assert [e.ref for e in setup.entries() if e.kind == "outcome"] == [auth.audit_index]
    assert setup.spent() == 120


# --- refusals, tenants ----------------------------------------------------------------------------


def test_a_refusal_recorded_for_an_integration_keeps_its_findings_in_the_log(setup: Setup) -> None:
    """Kills: record_refusal dropping its ``findings``. An integration's own refusal (a tool call
    without an id, an inherited identity) names its finding; the audit log is the evidence and
    must keep it."""
    from agentgate.findings import Finding, FindingKind

    finding = Finding(kind=FindingKind.IMPLICIT_TRUST_INHERITANCE, code="inherited_identity", message="m")
    refused = setup.gate.record_refusal(
        setup.agent, Call.tool("lookup", {"id": "1"}), ["no call id"], findings=[finding]
    )
    assert not refused.allowed and refused.audit_index is not None
    entry = setup.entries()[refused.audit_index]
    assert entry.kind == "deny"
    assert "no call id" in entry.reasons and f"{finding.kind}:inherited_identity" in entry.reasons


def _helper(setup: Setup) -> AgentIdentity:
    return setup.gate.delegate(
        setup.agent,
        name="helper",
        key=setup.keys["helper"],
        capabilities=["tool:lookup"],
        ttl=timedelta(seconds=60),
    )


def test_a_sub_agent_is_counted_in_its_supervisors_tenant_and_not_disowned(setup: Setup) -> None:
    """Kills: tenant_of and disowns reading the sub-agent's own key (``identity.did``) instead of
    the principal its chain was issued to: a sub-agent's key, made at run time, is in no policy,
    so its quotas would fall to the ``default`` tenant and the integration would refuse all its
    calls as those of a principal removed from the policy."""
    helper = _helper(setup)
    assert setup.gate.tenant_of(helper) == "team-a" == setup.gate.tenant_of(setup.agent)
    assert not setup.gate.disowns(helper) and not setup.gate.disowns(setup.agent)


# --- outcomes -------------------------------------------------------------------------------------

_NEVER_CLOSED = """
import sys
from pathlib import Path
from agentgate.audit.entry import AuditEntry
from agentgate.capabilities import Call
from agentgate.gate import Gate
from agentgate.keys import SigningKey
from agentgate.policy import parse_policy
from agentgate.store import SQLiteStore

sys.path.insert(0, {tests!r})
from test_gate_run_mutants import POLICY

keys = {{n: SigningKey.generate() for n in ("root", "agent", "lead", "second", "helper")}}
text = POLICY.format(budget=10_000_000, **{{n: k.did for n, k in keys.items()}})
Path({policy!r}).write_text(text)
gate = Gate(parse_policy(text, source="gate.yaml"), SQLiteStore({db!r}))
# The thread that commits outcomes is a daemon: stopped here, as the interpreter's exit stops it.
gate._outcomes._closed.set()
gate._outcomes._thread.join()
agent = gate.issue(keys["root"], name="agent", key=keys["agent"], role="worker")
auth = gate.authorize(agent, Call.model("small"), tokens=(100, 10))
gate.run(auth, lambda: "answer", spent=lambda _: (50, 5))
print(agent.chain.root.id)
# No gate.close(): the program ends with the outcome still pending.
"""


def test_a_program_that_never_closes_its_gate_still_records_its_last_outcome(tmp_path: Path) -> None:
    """Kills: _flush_at_exit not flushing the open gates. A program that ends without
    ``Gate.close()`` would lose its last call's outcome (the log says it was allowed, never how it
    ended) and leave its reservation held against the budget."""
    db, policy = tmp_path / "agentgate.db", tmp_path / "gate.yaml"
    script = _NEVER_CLOSED.format(tests=str(Path(__file__).parent), policy=str(policy), db=str(db))
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    grant = done.stdout.strip()
    gate = Gate(parse_policy(policy.read_text(), source="gate.yaml"), SQLiteStore(db))
    try:
        kinds = [(e.kind, e.status) for e in gate.audit.entries()]
        assert kinds[-2:] == [("allow", None), ("outcome", "ok")], kinds
        assert gate.ledger.usage(grant) == (60, 0)  # charged as reported, nothing left held
    finally:
        gate.close()


def test_an_overrun_reported_after_the_call_ran_is_recorded_and_exhausts_the_budget(tmp_path: Path) -> None:
    """Kills: _settle_reservations committing without ``exhaust=True``. A call that ran and
    reports more than its budget had left is a fact: its outcome must be recorded and the budget
    left at zero. Without ``exhaust`` the commit raises, the outcome is dropped, its reservation
    stays held and the overrun is never charged."""
    setup = Setup(tmp_path, budget=1_000)
    try:
        auth = setup.gate.authorize(setup.agent, Call.model("small"), tokens=(10, 10))
        assert auth.allowed
        setup.gate.run(auth, lambda: "long prompt", spent=lambda _: (5_000, 10))
        outcome = setup.entries()[-1]
        assert outcome.kind == "outcome" and outcome.ref == auth.audit_index
        assert any("overran the usd_micros budget" in r for r in outcome.reasons), outcome.reasons
        assert setup.gate.ledger.usage(setup.agent.chain.root.id) == (1_000, 0)
        after = setup.gate.authorize(setup.agent, Call.model("small"), tokens=(1, 1))
        assert not after.allowed and after.budget_exhausted
    finally:
        setup.gate.close()


def test_a_call_started_while_the_gate_closes_is_refused_recorded_and_released(tmp_path: Path) -> None:
    """Kills: _begin_run refusing a call once ``close`` began without settling it (the
    ``_settle(... "SchedulingError" ...)`` dropped). The allow was recorded and its budget
    reserved: refused unrecorded, the log would end at an allow with no outcome and the
    reservation would stay held."""
    setup = Setup(tmp_path)
    gate = setup.gate
    running, release = threading.Event(), threading.Event()
    first = gate.authorize(setup.agent, Call.tool("lookup", {"id": "1"}))
    late = gate.authorize(setup.agent, Call.model("small"), tokens=(100, 10))
    assert first.allowed and late.allowed and late.reservations

    def slow() -> str:
        running.set()
        assert release.wait(30)
        return "done"

    caller = threading.Thread(target=lambda: gate.run(first, slow), daemon=True)
    caller.start()
    assert running.wait(30)
    closer = threading.Thread(target=gate.close, daemon=True)
    closer.start()
    try:
        for _ in range(3000):  # close() has begun: it now waits for the running call
            if gate._closing:
                break
            threading.Event().wait(0.01)
        ran: list[str] = []
        with pytest.raises(SchedulingError):
            gate.run(late, lambda: ran.append("late"))
        assert ran == []
    finally:
        release.set()
        closer.join(30)
        caller.join(30)
    reopened = Gate(parse_policy(setup.text, source="gate.yaml"), SQLiteStore(tmp_path / "agentgate.db"))
    try:
        outcomes = {e.ref: e for e in reopened.audit.entries() if e.kind == "outcome"}
        assert outcomes[late.audit_index].status == "error"
        assert outcomes[late.audit_index].reasons == ("SchedulingError",)
        assert reopened.ledger.usage(setup.agent.chain.root.id) == (0, 0)  # released, not held
    finally:
        reopened.close()


def test_a_call_that_failed_before_any_usage_gives_its_whole_reservation_back(setup: Setup) -> None:
    """Kills: _settle_reservations not releasing a reservation it does not charge (the
    ``ledger.release`` dropped). A model call whose backend failed used nothing: what it reserved
    must return to the budget at its outcome, or every failure shrinks the budget for good."""
    auth = setup.gate.authorize(setup.agent, Call.model("small"), tokens=(1_000, 500))
    assert setup.gate.ledger.usage(setup.agent.chain.root.id) == (0, 2_000)  # the precondition: held
    with pytest.raises(ConnectionError):
        setup.gate.run(auth, lambda: (_ for _ in ()).throw(ConnectionError("backend down")))
    setup.gate.flush()
    assert setup.gate.ledger.usage(setup.agent.chain.root.id) == (0, 0)
    outcome = setup.entries()[-1]
    assert outcome.kind == "outcome" and outcome.status == "error" and outcome.budget_delta == 0


def test_a_budget_refusal_says_how_much_calls_in_flight_hold(tmp_path: Path) -> None:
    """Kills: _budget_reason leaving out what calls in flight hold. A budget that looks unspent
    but refuses is held by running calls: the refusal must say so (the agent, and the person
    reading the log, would otherwise see "0 of 1000 spent" and a refusal that contradicts it)."""
    setup = Setup(tmp_path, budget=1_000)
    try:
        running = setup.gate.authorize(setup.agent, Call.model("small"), tokens=(400, 200))
        assert running.allowed  # holds 800
        refused = setup.gate.authorize(setup.agent, Call.model("small"), tokens=(100, 100))
        assert not refused.allowed and refused.budget_exhausted
        assert any(
            "0 of 1000 usd_micros spent and 800 held by calls in flight" in r for r in refused.reasons
        ), refused.reasons
    finally:
        setup.gate.close()


# --- approvals ----------------------------------------------------------------------------------


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


def test_outcomes_carried_by_a_decision_that_fails_are_kept_for_the_next_commit(setup: Setup) -> None:
    """Kills: _decision_transaction not putting back the outcomes it took when the decision fails
    (``restore`` dropped). A pending outcome rides with the next decision's transaction; a
    decision that raises (here a revocation of a grant that is none) rolls it back, and the
    outcome must be written later, not lost with its reservation held."""
    setup.gate._outcomes._closed.set()  # no background commit: only decisions carry outcomes
    setup.gate._outcomes._thread.join()
    auth = setup.gate.authorize(setup.agent, Call.model("small"), tokens=(100, 10))
    setup.gate.run(auth, lambda: "answer", spent=lambda _: (50, 5))
    with pytest.raises(AgentGateError):  # a grant that is none
        setup.gate.revoke("not a grant")
    outcomes = [e for e in setup.entries() if e.kind == "outcome"]
    assert [e.ref for e in outcomes] == [auth.audit_index]
    assert setup.gate.ledger.usage(setup.agent.chain.root.id) == (60, 0)


def test_a_call_refused_as_foreign_is_audited(setup: Setup) -> None:
    """Kills: refuse_foreign returning the refusal without recording it. A delegation asked on an
    inherited identity is refused there, and every refusal is evidence: it must be a ``deny``
    entry naming the inherited identity."""
    call = Call("agent:helper", "delegate", {})
    assert setup.gate.refuse_foreign(setup.agent, call, agent="agent") is None
    refused = setup.gate.refuse_foreign(setup.agent, call, agent="intruder")
    assert refused is not None and not refused.allowed and refused.audit_index is not None
    entry = setup.entries()[refused.audit_index]
    assert entry.kind == "deny" and entry.resource == "agent:helper"
    assert any("inherited_identity" in r for r in entry.reasons)
