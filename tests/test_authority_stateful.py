"""Stateful model-based tests of the authority layer.

Two Hypothesis ``RuleBasedStateMachine``s (derandomized, bounded) drive the real components and
compare them, after every step, with a small reference model of what SHOULD happen.

``GateMachine``: a real ``Gate`` on a real SQLite file, its clock (``time.time``, which the
Gate and the store read) under the test's control. Steps: delegate (narrowing and widening:
capabilities, constraint, budget, depth, policy TTL), revoke any link, decide and run / fail /
abandon tool calls with random arguments and call ids, ask for an approval, sign it (by the
approver, the requester itself or a stranger), use it (also on edited arguments, replayed,
late), decline it, advance the clock past grant and approval expiries, and restart (close the
Gate and open a new one on the same file). The model keeps which grants are live, each grant's
spent and held budget, which once-only calls ran, each approval request's state and expiry,
and how many audit entries each step must add.

``CapabilityMachine``: random chains of delegations of single capabilities over a small finite
domain of resources, actions and argument values (chosen so that the domain is exact for the
constraints drawn: every difference between two of them has a member in it). The model is brute
force: the set of domain calls a capability covers. ``attenuates`` must equal set inclusion,
``witness`` must name a call that proves a refusal, ``authority.delegate`` must refuse exactly
the delegations that do not attenuate, and ``Authority.decide_held`` on the chain must allow
exactly the calls the tip covers.

Holds (checked on every step of every example):
- no allow the model says must be refused, no refusal of what it says must be allowed, and each
  refusal for the reason expected (policy, expiry, coverage, revocation, once-only, budget,
  approval not usable); a refused delegation raises the expected error and is audited;
- budgets: the ledger's (spent, held) per grant equals the model's, never above the cap and
  never below zero, across restarts; a refused call reserves nothing;
- approvals: single-use, bound to the exact call, expiring, void on revocation, superseded by a
  newer request only once expired, put back for a call abandoned before it started, and an
  approval by the requester or a key the policy does not name counts for nothing;
- once-only calls: a non-idempotent call that ran (ok or failed) is never decided allow again,
  one abandoned before it started may be;
- audit: every step adds exactly the entries the model expects, each decision's audit index
  names an entry of its kind, and the log verifies at every restart and at the end;
- capabilities: ``attenuates`` is exact over the domain, ``witness`` is sound, and a chain's
  tip never covers a call that a link above it does not.

Did not hold, fixed (store/approvals.py): ``Gate.decline`` of a request declined before, once it
had expired, recorded a second ``deny`` of it instead of raising ``InputError``
(``test_a_declined_request_that_has_since_expired_is_not_declined_twice``).

Not covered here: approval gates with a quorum above one, PostgreSQL (the machines run on SQLite),
concurrent callers.
"""

from __future__ import annotations

import itertools
import os
import shutil
import tempfile
import time
from dataclasses import dataclass, field, replace
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from agentgate.authority import Authority, GrantRepository, Invocation, delegate, issue
from agentgate.capabilities import Call, Capability, attenuates, covers, witness
from agentgate.errors import AgentGateError, DeadlineExceeded, Expired, InputError, Revoked, ScopeCreep
from agentgate.gate import AgentIdentity, Approval, Authorization, Gate
from agentgate.keys import SigningKey
from agentgate.policy import parse_policy
from agentgate.store import SQLiteStore

# --- the Gate machine ------------------------------------------------------------------------

ROOT_CAP = 4
ROOT_TTL = 1000
ROOT_DEPTH = 2
POLICY_PAY_LIMIT = 100
APPROVAL_ABOVE = 50
APPROVAL_EXPIRY = 300
DELEGATION_MAX_TTL = 800

POLICY = """
version: 1
trust_anchors:
  root: {{did: "{root}"}}
principals:
  sup: {{kind: agent, did: "{sup}", roles: [worker]}}
  dana: {{kind: human, did: "{dana}", roles: [approver]}}
tools:
  search:
    args: {{q: {{type: string, required: true}}}}
    idempotent: true
  pay:
    args: {{amount: {{type: integer, required: true}}}}
    loggable: [amount]
roles:
  worker:
    kind: agent
    capabilities:
      - resource: tool:search
      - resource: tool:pay
        constraints: {{amount: {{le: {pay_limit}}}}}
    budget: {{limit: {cap}, unit: calls}}
    ttl_s: {ttl}
    delegation:
      max_depth: {depth}
      max_ttl_s: {max_ttl}
      capabilities:
        - resource: tool:search
        - resource: tool:pay
          constraints: {{amount: {{le: {pay_limit}}}}}
  approver:
    kind: human
    capabilities:
      - resource: tool:pay
    ttl_s: 600
approvals:
  big-pay:
    resource: tool:pay
    when: {{amount: {{gt: {approval_above}}}}}
    approvers: [dana]
    expiry_s: {approval_expiry}
"""

AMOUNTS = (10, 40, 60, 90, 120)
PAY_LIMITS = (None, 20, 60, 100, 150)
CALL_IDS = ("c1", "c2")
ADVANCES = (1, 59, 120, 301)


class Clock:
    """``time.time`` for the whole process while a machine runs: whole seconds from the real
    time at start, advanced only by the machine (the Gate, the store and the authority engine
    all read ``time.time``)."""

    def __init__(self) -> None:
        self.real = time.time
        self.now = int(self.real())

    def __call__(self) -> float:
        return float(self.now)

    def install(self) -> None:
        time.time = self  # type: ignore[assignment]

    def remove(self) -> None:
        time.time = self.real  # type: ignore[assignment]


@dataclass
class Node:
    """What the model knows of one grant."""

    identity: AgentIdentity
    parent: Node | None
    search: bool
    pay_limit: int | None
    cap: int
    expires: int
    depth: int
    revoked: bool = False
    spent: int = 0
    held: int = 0

    def chain(self) -> list[Node]:
        out: list[Node] = []
        node: Node | None = self
        while node is not None:
            out.append(node)
            node = node.parent
        return out[::-1]

    def dead(self) -> bool:
        return any(n.revoked for n in self.chain())

    def expired(self, now: int) -> bool:
        return any(now >= n.expires for n in self.chain())

    def covers(self, tool: str, amount: int | None) -> bool:
        if tool == "search":
            return self.search
        return self.pay_limit is not None and amount is not None and amount <= self.pay_limit


@dataclass
class Request:
    """An approval request as the model sees it."""

    id: str
    key: tuple[str, int, str]
    expires_at: int
    state: str = "pending"  # pending, consumed, denied
    asked: list[Authorization] = field(default_factory=list)


@dataclass
class Pending:
    """An allow not yet run."""

    node: Node
    auth: Authorization
    key: tuple[str, int, str] | None
    approved: bool
    generation: int


@dataclass
class Signed:
    approval: Approval
    request: Request
    signer: str


class GateMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.dir = Path(tempfile.mkdtemp(prefix="r40-stateful-"))
        self.clock = Clock()
        self.clock.install()
        self.gate: Gate | None = None
        self.keys = {n: SigningKey.generate() for n in ("root", "sup", "dana", "stranger")}
        text = POLICY.format(
            pay_limit=POLICY_PAY_LIMIT,
            cap=ROOT_CAP,
            ttl=ROOT_TTL,
            depth=ROOT_DEPTH,
            max_ttl=DELEGATION_MAX_TTL,
            approval_above=APPROVAL_ABOVE,
            approval_expiry=APPROVAL_EXPIRY,
            **{n: k.did for n, k in self.keys.items()},
        )
        self.policy = parse_policy(text, source="r40.yaml")
        self.nodes: list[Node] = []
        self.requests: dict[str, Request] = {}
        self.signed: list[Signed] = []
        self.once: dict[tuple[str, int, str], str] = {}
        self.entries = 0
        self.names = itertools.count()
        self.pending: list[Pending] = []
        self.generation = 0

    # --- plumbing ---------------------------------------------------------------------------

    @property
    def g(self) -> Gate:
        assert self.gate is not None
        return self.gate

    def open(self) -> None:
        self.gate = Gate(self.policy, SQLiteStore(self.dir / "agentgate.db", synchronous="NORMAL"))

    def teardown(self) -> None:
        try:
            if self.gate is not None:
                report = self.g.verify()
                assert report.ok, report.problems
                self.g.close()
        finally:
            self.clock.remove()
            shutil.rmtree(self.dir, ignore_errors=True)

    def entry(self, index: int | None) -> Any:
        assert index is not None
        self.g.flush()
        return self.g.audit.entry(index)

    def node(self, i: int) -> Node:
        return self.nodes[i % len(self.nodes)]

    @initialize()
    def start(self) -> None:
        self.open()
        self.issue_root()

    def issue_root(self) -> None:
        """A fresh root grant for the principal (another run of the supervisor)."""
        root = self.g.issue(self.keys["root"], name="sup", key=self.keys["sup"], role="worker")
        self.entries += 1
        assert self.entry(root.audit_index).kind == "allow"
        self.nodes.append(
            Node(root, None, True, POLICY_PAY_LIMIT, ROOT_CAP, self.clock.now + ROOT_TTL, ROOT_DEPTH)
        )

    # --- delegation and revocation ----------------------------------------------------------

    @rule(
        parent=st.integers(0, 50),
        search=st.booleans(),
        pay_limit=st.sampled_from(PAY_LIMITS),
        budget=st.sampled_from((None, 0, 1, 2, ROOT_CAP, ROOT_CAP + 2)),
        ttl=st.sampled_from((100, 500, 900)),
    )
    def delegate_grant(
        self, parent: int, search: bool, pay_limit: int | None, budget: int | None, ttl: int
    ) -> None:
        up = self.node(parent)
        if not search and pay_limit is None:
            search = True
        caps = (["tool:search"] if search else []) + (
            [f"tool:pay?amount<={pay_limit}"] if pay_limit is not None else []
        )
        now = self.clock.now
        seconds = max(1, min(ttl, up.expires - now))
        expected: type[AgentGateError] | None = None
        if up.dead():
            expected = Revoked
        elif up.parent is None and (
            (pay_limit is not None and pay_limit > POLICY_PAY_LIMIT) or seconds > DELEGATION_MAX_TTL
        ):
            expected = ScopeCreep  # the policy's delegation rule for the root's role
        elif up.expired(now):
            expected = Expired
        elif (
            up.depth == 0
            or (search and not up.search)
            or (pay_limit is not None and (up.pay_limit is None or pay_limit > up.pay_limit))
            or (budget is not None and budget > up.cap)
        ):
            expected = ScopeCreep
        name = f"agent{next(self.names)}"
        key = SigningKey.generate()
        try:
            child = self.g.delegate(
                up.identity, name=name, key=key, capabilities=caps, ttl=timedelta(seconds=ttl), budget=budget
            )
        except AgentGateError as exc:
            assert expected is not None and type(exc) is expected, (expected, exc)
            event(f"delegate {expected.__name__}")
            self.entries += 1
            refused = self.entry(exc.audit_index)  # type: ignore[attr-defined]
            assert refused.kind == "deny" and refused.resource == f"agent:{name}"
            return
        assert expected is None, f"delegation allowed, model expected {expected.__name__}"
        event("delegate ok")
        self.entries += 1
        made = self.entry(child.audit_index)
        assert made.kind == "allow" and made.resource == f"agent:{name}"
        tip = child.chain.tip
        assert tip.expires == now + seconds <= up.expires
        assert tip.budget is not None and tip.budget.amount == (up.cap if budget is None else budget)
        assert tip.max_depth == up.depth - 1
        self.nodes.append(Node(child, up, search, pay_limit, tip.budget.amount, tip.expires, tip.max_depth))

    @rule(
        what=st.sampled_from(("revoke", "revoke", "restart", "issue", "expire_all")),
        which=st.integers(0, 50),
    )
    def disrupt(self, what: str, which: int) -> None:
        """The rarer steps, in one rule so that calls and approvals get most of the steps."""
        event(f"disrupt {what}")
        if what == "revoke":
            self.revoke(which)
        elif what == "restart":
            self.restart()
        elif what == "issue":
            self.issue_root()
        else:
            self.clock.now += ROOT_TTL + 1

    def revoke(self, which: int) -> None:
        node = self.node(which)
        done = self.g.revoke(node.identity, by="r40", reason="model")
        assert (done.grant_id, done.already) == (node.identity.grant_id, node.revoked)
        self.entries += 0 if node.revoked else 1  # revoked again: nothing written (R53)
        if not node.revoked:
            # The open requests of the grant and of the grants below it are closed, each with a
            # deny entry (review R55, ``Gate._void_revoked``).
            holders = {n.identity.grant_id: n for n in self.nodes}
            for request in self.requests.values():
                held = holders.get(request.key[0])
                if (
                    request.state == "pending"
                    and request.expires_at > self.clock.now
                    and held is not None
                    and node in held.chain()
                ):
                    request.state = "denied"
                    self.entries += 1
        node.revoked = True

    @rule(seconds=st.sampled_from(ADVANCES))
    def advance(self, seconds: int) -> None:
        self.clock.now += seconds

    def restart(self) -> None:
        report = self.g.verify()
        assert report.ok, report.problems
        self.g.close()
        self.open()
        self.generation += 1

    # --- the model of one decision -----------------------------------------------------------

    def open_request(self, key: tuple[str, int, str], node: Node) -> Request | None:
        if node.dead():
            return None
        live = [
            r
            for r in self.requests.values()
            if r.key == key and r.state == "pending" and r.expires_at > self.clock.now
        ]
        return live[-1] if live else None

    def expect(
        self, node: Node, tool: str, amount: int | None, call_id: str | None, signed: Signed | None
    ) -> tuple[str, str]:
        """(verdict, why) the model expects; ``why`` is the refusal's kind."""
        now = self.clock.now
        # The authority's refusals first, as at the gateway (review R59): times, then a revoked
        # link (whatever the call asks for), then coverage; the policy's after them.
        if node.expired(now):
            return "deny", "grant_expired"
        if node.dead():
            return "deny", "revoked"
        if not node.covers(tool, amount):
            return "deny", "call_not_covered"
        if tool == "pay" and amount is not None and amount > POLICY_PAY_LIMIT:
            return "deny", "policy"
        key = (node.identity.grant_id, amount or 0, call_id or "")
        if tool == "pay" and call_id and self.once.get(key) in ("ok", "error", "started"):
            return "deny", "once"
        if tool == "pay" and amount is not None and amount > APPROVAL_ABOVE:
            valid = signed is not None and signed.signer == "dana" and signed.request.key == key
            if valid:
                assert signed is not None
                own, newest = signed.request, self.open_request(key, node)
                superseded = (
                    newest is not None
                    and newest is not own
                    and own.state != "consumed"
                    and own.expires_at <= now
                )
                if not superseded:
                    if own.state != "pending" or own.expires_at <= now:
                        return "deny", "approval_unusable"
                    if self.budget_short(node):
                        return "deny", "budget"
                    return "allow", "approved"
            return "approval_required", ""
        if self.budget_short(node):
            return "deny", "budget"
        return "allow", ""

    @staticmethod
    def budget_short(node: Node) -> bool:
        return any(n.cap - n.spent - n.held < 1 for n in node.chain())

    def decide(
        self,
        node: Node,
        tool: str,
        amount: int | None,
        call_id: str | None,
        signed: Signed | None,
        q: str = "x",
    ) -> tuple[Authorization, str]:
        args: dict[str, Any] = {"amount": amount} if tool == "pay" else {"q": q}
        verdict, why = self.expect(node, tool, amount, call_id, signed)
        key = (node.identity.grant_id, amount or 0, call_id or "")
        before = self.open_request(key, node) if tool == "pay" and call_id else None
        auth = self.g.authorize(
            node.identity,
            Call.tool(tool, args),
            call_id=call_id,
            approval=signed.approval if signed is not None else None,
        )
        assert auth.verdict == verdict, (verdict, why, auth.verdict, auth.reasons, auth.findings)
        event(f"{tool} {verdict} {why}")
        recorded = self.entry(auth.audit_index)
        assert recorded.kind == verdict and recorded.chain_hash == node.identity.grant_id
        codes = {f.code for f in auth.findings}
        if verdict == "deny":
            self.entries += 1
            if why in ("grant_expired", "call_not_covered", "revoked"):
                assert why in codes, (why, auth.reasons, codes)
            elif why == "policy":
                assert auth.decision is None
            elif why == "once":
                assert "runs once" in " ".join(auth.reasons)
            elif why == "budget":
                assert auth.budget_exhausted
            elif why == "approval_unusable":
                assert auth.reasons[0].startswith("approval not usable"), auth.reasons
            if why not in ("budget", "approval_unusable") and before is not None:
                before.state = "denied"  # a refusal of the call closes its open request
            assert auth.reservations == ()
        elif verdict == "approval_required":
            assert auth.request is not None
            if before is not None:
                assert auth.request["id"] == before.id  # asked again: the same request
                before.asked.append(auth)
                if signed is not None and not (signed.signer == "dana" and signed.request.key == key):
                    # An approval no approver gave for this call (the requester's own, a
                    # stranger's, another call's) is an entry of its own, referring to the
                    # request's (review R52); a yes that no longer counts writes nothing.
                    self.entries += 1
                    newest = self.entry(self.g.audit.size() - 1)
                    assert newest.kind == "approval_required" and newest.ref == auth.audit_index
            else:
                self.entries += 1
                assert auth.request["id"] not in self.requests
                made = Request(auth.request["id"], key, self.clock.now + APPROVAL_EXPIRY, asked=[auth])
                assert auth.request["expires_at"] == made.expires_at
                self.requests[made.id] = made
        else:
            self.entries += 2 if why == "approved" else 1
            if why == "approved":
                assert signed is not None
                assert auth.approver == self.keys["dana"].did
                signed.request.state = "consumed"
            for n in node.chain():
                n.held += 1
            if tool == "pay" and call_id:
                self.once[key] = "started"  # until its outcome says how it ended
            assert len(auth.reservations) == 1 and auth.reservations[0][1:] == ("calls", 1)
        return auth, why

    def settle(
        self, node: Node, auth: Authorization, how: str, key: tuple[str, int, str] | None, approved: bool
    ) -> None:
        """Run (``ok``, ``fail``), abandon, or ``hold`` an allow for ``settle_held``."""
        if how == "hold":
            self.pending.append(Pending(node, auth, key, approved, self.generation))
            return
        if how in ("ok", "fail") and self.clock.now >= node.expires:
            # Decided while the grant lived, run after it expired: refused before it starts.
            with pytest.raises(DeadlineExceeded):
                self.g.run(auth, lambda: "late")
            how = "abandon"
        elif how == "ok":
            assert self.g.run(auth, lambda: "done") == "done"
        elif how == "fail":
            with pytest.raises(RuntimeError):
                self.g.run(auth, _boom)
        else:
            self.g.abandon(auth)
        self.entries += 1
        for n in node.chain():
            n.held -= 1
            if how == "ok":
                n.spent += 1
        if key is not None:
            self.once[key] = {"ok": "ok", "fail": "error", "abandon": "not_run"}[how]
        if approved and how == "abandon":
            assert auth.request is not None
            self.requests[auth.request["id"]].state = "pending"  # put back: the call never started
        # An allow is good for one run.
        with pytest.raises(AgentGateError):
            self.g.run(auth, lambda: "again")

    @rule(pick=st.integers(0, 50), how=st.sampled_from(("ok", "fail", "abandon")))
    def settle_held(self, pick: int, how: str) -> None:
        """An allow decided earlier, settled now: after a clock advance, a revocation (it still
        runs: revocation stops the next decision), or a restart (another Gate's allow: refused,
        and its reservation stays held, so the budget is never overspent)."""
        if not self.pending:
            return
        held = self.pending.pop(pick % len(self.pending))
        if held.generation != self.generation:
            with pytest.raises(AgentGateError, match="not decided by this Gate"):
                self.g.run(held.auth, lambda: "stale")
            with pytest.raises(AgentGateError):
                self.g.abandon(held.auth)
            return
        self.settle(held.node, held.auth, how, held.key, held.approved)

    # --- calls -------------------------------------------------------------------------------

    @rule(
        which=st.integers(0, 50),
        q=st.sampled_from(("a", "b")),
        how=st.sampled_from(("ok", "fail", "abandon", "hold")),
    )
    def search(self, which: int, q: str, how: str) -> None:
        node = self.node(which)
        auth, _ = self.decide(node, "search", None, None, None, q=q)
        if auth.allowed:
            self.settle(node, auth, how, None, approved=False)

    @rule(
        which=st.integers(0, 50),
        amount=st.sampled_from(AMOUNTS),
        call_id=st.sampled_from(CALL_IDS),
        how=st.sampled_from(("ok", "fail", "abandon", "hold")),
    )
    def pay(self, which: int, amount: int, call_id: str, how: str) -> None:
        node = self.node(which)
        auth, _ = self.decide(node, "pay", amount, call_id, None)
        if auth.allowed:
            self.settle(node, auth, how, (node.identity.grant_id, amount, call_id), approved=False)

    @rule(
        which=st.integers(0, 50),
        amount=st.sampled_from((60, 90)),
        call_id=st.sampled_from(CALL_IDS),
        signer=st.sampled_from(("dana", "dana", "dana", "sup", "stranger")),
        then=st.sampled_from(("use", "use", "use", "edit", "wait", None)),
        how=st.sampled_from(("ok", "ok", "fail", "abandon", "hold")),
    )
    def ask_sign_use(
        self, which: int, amount: int, call_id: str, signer: str, then: str | None, how: str
    ) -> None:
        """A call that needs approval; when asked, an approval signed for it, and then maybe the
        call resumed with it (as asked, with edited arguments, or after a wait)."""
        node = self.node(which)
        auth, _ = self.decide(node, "pay", amount, call_id, None)
        if not auth.needs_approval:
            return
        assert auth.request is not None
        self.sign(list(self.requests).index(auth.request["id"]), signer)
        if then is None:
            return
        if then == "wait":
            self.clock.now += APPROVAL_EXPIRY
        self.use_approval(len(self.signed) - 1, (150 - amount) if then == "edit" else None, how)

    @rule(pick=st.integers(0, 50), signer=st.sampled_from(("dana", "dana", "sup", "stranger")))
    def sign(self, pick: int, signer: str) -> None:
        if not self.requests:
            return
        requests = list(self.requests.values())
        request = requests[pick % len(requests)]
        asked = request.asked[-1]
        key = (
            self.keys[signer]
            if signer != "sup"
            else next(n for n in self.nodes if n.identity.grant_id == request.key[0]).identity.key
        )  # the requester itself
        # Approval.sign, not Gate.approve: the model signs requests that are closed, and keys
        # that never count, which Gate.approve refuses since review R71.
        approval = Approval.sign(asked.approval_payload(), key)
        self.signed.append(Signed(approval, request, "dana" if signer == "dana" else "other"))

    @rule(
        pick=st.integers(0, 50),
        edit=st.sampled_from((None, None, 60, 90)),
        how=st.sampled_from(("ok", "ok", "fail", "abandon", "hold")),
    )
    def use_approval(self, pick: int, edit: int | None, how: str) -> None:
        if not self.signed:
            return
        signed = self.signed[pick % len(self.signed)]
        grant, amount, call_id = signed.request.key
        node = next(n for n in self.nodes if n.identity.grant_id == grant)
        amount = edit if edit is not None else amount
        auth, why = self.decide(node, "pay", amount, call_id, signed)
        if auth.allowed:
            self.settle(node, auth, how, (grant, amount, call_id), approved=why == "approved")

    @rule(pick=st.integers(0, 50))
    def decline(self, pick: int) -> None:
        if not self.requests:
            return
        requests = list(self.requests.values())
        request = requests[pick % len(requests)]
        node = next(n for n in self.nodes if n.identity.grant_id == request.key[0])
        now = self.clock.now
        if request.state in ("consumed", "denied"):  # decided: the log says how it ended
            with pytest.raises(InputError):
                self.g.decline(request.asked[-1], "no")
            return
        refused = self.g.decline(request.asked[-1], "no")
        self.entries += 1
        assert refused.verdict == "deny"
        assert self.entry(refused.audit_index).kind == "deny"
        if request.state == "pending" and request.expires_at > now and not node.dead():
            request.state = "denied"

    # --- what must hold after every step -----------------------------------------------------

    @invariant()
    def budgets_and_log_agree(self) -> None:
        if self.gate is None:
            return
        self.g.flush()
        for node in self.nodes:
            spent, held = self.g.ledger.usage(node.identity.grant_id)
            assert (spent, held) == (node.spent, node.held), node.identity.name
            assert 0 <= spent + held <= node.cap
            remaining = self.g.ledger.remaining(node.identity.grant_id)
            assert remaining is None or remaining == node.cap - node.spent - node.held
        assert self.g.audit.size() == self.entries


def _boom() -> str:
    raise RuntimeError("the tool failed")


# R40_EXAMPLES / R40_RANDOM: a longer, randomized exploration when hunting (not in the suite).
EXAMPLES = int(os.environ.get("R40_EXAMPLES", "0"))
RANDOM = bool(os.environ.get("R40_RANDOM"))

GateMachine.TestCase.settings = settings(
    max_examples=EXAMPLES or 60,
    stateful_step_count=25,
    derandomize=not RANDOM,
    deadline=None,
    suppress_health_check=list(HealthCheck),
)
TestGateModel = GateMachine.TestCase


# --- the capability machine ------------------------------------------------------------------

PATTERNS = ("tool:*", "tool:pay", "tool:pay.*", "tool:pay.x", "tool:pay.x.*", "tool:other")
RESOURCES = (
    "tool:pay",
    "tool:pay.x",
    "tool:pay.x.y",
    "tool:pay.zz",
    "tool:pay.x.zz",
    "tool:payx",
    "tool:other",
    "tool:zz",
)
CAP_ACTIONS = ("invoke", "*")
CALL_ACTIONS = ("invoke", "other")
ABSENT = object()
N_VALUES: tuple[object, ...] = (ABSENT, -1, -0.5, 0, 0.5, 1, 1.5, 2, 2.5, 3, 3.5, 4, True, "1")
S_VALUES: tuple[object, ...] = (ABSENT, "", "a", "ab", "abzz", "azz", "b", "bzz", "zz", 1)
"""Exact for the constraints drawn below: integer bounds 0..3 (half-integers lie between and
beyond them), sets of those integers, string prefixes '', 'a', 'ab' and sets of 'a', 'ab', 'b'
(each prefix extended by 'zz' lies in no set); a boolean, a number for a string and a string for a
number, and a missing argument, each refused by every constraint."""

N_SPECS: tuple[dict[str, Any] | None, ...] = (
    None,
    {"le": 2},
    {"lt": 2},
    {"ge": 1},
    {"gt": 1},
    {"eq": 1},
    {"in": [1, 2]},
    {"ge": 1, "le": 2},
    {"gt": 0, "lt": 3},
    {"le": 3},
    {"ge": 2, "le": 1},  # contradictory: covers nothing
    {"in": [0, 1, 2, 3]},
)
S_SPECS: tuple[dict[str, Any] | None, ...] = (
    None,
    {"eq": "a"},
    {"in": ["a", "ab"]},
    {"in": ["a", "ab", "b"]},
    {"prefix": "a"},
    {"prefix": "ab"},
    {"prefix": ""},
    {"eq": "b"},
)


def _is_num(v: object) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


def _allows(spec: dict[str, Any] | None, value: object) -> bool:
    """The reference meaning of one constraint, written out from the docs (not the algebra)."""
    if spec is None:
        return True
    if value is ABSENT:
        return False
    for op, bound in spec.items():
        if op == "prefix":
            ok = isinstance(value, str) and value.startswith(bound)
        elif op == "eq":
            ok = (
                type(value) is type(bound) and value == bound
                if not _is_num(bound)
                else _is_num(value) and value == bound
            )
        elif op == "in":
            ok = any(
                (_is_num(b) and _is_num(value) and value == b) or (isinstance(b, str) and value == b)
                for b in bound
            )
        else:
            ok = (
                _is_num(value)
                and {
                    "le": value <= bound,  # type: ignore[operator]
                    "lt": value < bound,  # type: ignore[operator]
                    "ge": value >= bound,  # type: ignore[operator]
                    "gt": value > bound,  # type: ignore[operator]
                }[op]
            )
        if not ok:
            return False
    return True


def _named(pattern: str, resource: str) -> bool:
    """The reference meaning of a resource pattern: exact, ``kind:*``, or ``stem.*`` (one or more
    further segments)."""
    if pattern.endswith(":*"):
        return resource.startswith(pattern[:-1]) and len(resource) > len(pattern) - 1
    if pattern.endswith(".*"):
        return resource.startswith(pattern[:-1])
    return resource == pattern


DOMAIN = [
    (r, a, n, v)
    for r in RESOURCES
    for a in CALL_ACTIONS
    for n in range(len(N_VALUES))
    for v in range(len(S_VALUES))
]


@dataclass(frozen=True)
class Spec:
    pattern: str
    action: str
    n: int
    s: int

    def capability(self) -> Capability:
        constraints = {
            name: spec for name, spec in (("n", N_SPECS[self.n]), ("s", S_SPECS[self.s])) if spec is not None
        }
        return Capability.of(self.pattern, self.action, constraints)

    def covered(self) -> frozenset[tuple[str, str, int, int]]:
        return _covered(self)


_COVERED: dict[Spec, frozenset[tuple[str, str, int, int]]] = {}


def _covered(spec: Spec) -> frozenset[tuple[str, str, int, int]]:
    """Brute force: the domain calls ``spec`` covers, by the reference meanings above."""
    if spec not in _COVERED:
        _COVERED[spec] = frozenset(
            (r, a, n, v)
            for r, a, n, v in DOMAIN
            if _named(spec.pattern, r)
            and spec.action in ("*", a)
            and _allows(N_SPECS[spec.n], N_VALUES[n])
            and _allows(S_SPECS[spec.s], S_VALUES[v])
        )
    return _COVERED[spec]


def _call(r: str, a: str, n: int, v: int) -> Call:
    args = {k: val for k, val in (("n", N_VALUES[n]), ("s", S_VALUES[v])) if val is not ABSENT}
    return Call(r, a, args)


specs = st.builds(
    Spec,
    st.sampled_from(PATTERNS),
    st.sampled_from(CAP_ACTIONS),
    st.integers(0, len(N_SPECS) - 1),
    st.integers(0, len(S_SPECS) - 1),
)


@dataclass
class Link:
    chain: Any
    key: SigningKey
    specs: tuple[Spec, ...]
    parent: Link | None
    expires: int
    depth: int
    revoked: bool = False

    def lineage(self) -> list[Link]:
        out: list[Link] = []
        link: Link | None = self
        while link is not None:
            out.append(link)
            link = link.parent
        return out

    def covered(self) -> frozenset[tuple[str, str, int, int]]:
        return frozenset().union(*(s.covered() for s in self.specs))


@dataclass
class SignedCall:
    link: Link
    invocation: Any
    signer_is_holder: bool
    allowed: bool


class CapabilityMachine(RuleBasedStateMachine):
    """Delegation chains of capabilities from the small domain, decided by the authority engine
    with signed invocations (nonces) on a real SQLite grant store, its clock passed as ``now``."""

    def __init__(self) -> None:
        super().__init__()
        self.dir = Path(tempfile.mkdtemp(prefix="r40-caps-"))
        self.anchor = SigningKey.generate()
        self.stranger = SigningKey.generate()
        self.now = int(time.time())
        self.links: list[Link] = []
        self.signed: list[SignedCall] = []
        self.open()

    def open(self) -> None:
        self.store = SQLiteStore(self.dir / "grants.db", synchronous="NORMAL")
        self.repo = GrantRepository(self.store)
        self.authority = Authority(self.repo, [self.anchor.public])

    def close(self) -> None:
        self.repo.close()
        self.store.close()

    def teardown(self) -> None:
        self.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    @initialize(caps=st.lists(specs, min_size=1, max_size=2))
    def root(self, caps: list[Spec]) -> None:
        key = SigningKey.generate()
        chain = issue(
            self.anchor, key.public, [c.capability() for c in caps], ttl=1000, max_depth=4, now=self.now
        )
        self.links.append(Link(chain, key, tuple(caps), None, self.now + 1000, 4))

    @rule(
        parent=st.integers(0, 50),
        changes=st.lists(
            st.tuples(
                st.integers(0, 1), st.sampled_from(("pattern", "action", "n", "s", None)), st.integers(0, 50)
            ),
            min_size=1,
            max_size=2,
        ),
        ttl=st.sampled_from((50, 400, 2000)),
    )
    def delegate(self, parent: int, changes: list[tuple[int, str | None, int]], ttl: int) -> None:
        """A child whose capabilities are the parent's, each with at most one field redrawn
        (narrower, wider or unrelated)."""
        up = self.links[parent % len(self.links)]
        caps = []
        for base, name, value in changes:
            spec = up.specs[base % len(up.specs)]
            if name is not None:
                choices = {"pattern": PATTERNS, "action": CAP_ACTIONS, "n": N_SPECS, "s": S_SPECS}[name]
                new = choices[value % len(choices)] if name in ("pattern", "action") else value % len(choices)
                spec = replace(spec, **{name: new})
            caps.append(spec)
        # attenuates is exact: set inclusion over the domain, and witness proves a refusal.
        for child in caps:
            for held in up.specs:
                inside = child.covered() <= held.covered()
                assert attenuates(held.capability(), child.capability()) == inside, (held, child)
                proof = witness(held.capability(), child.capability())
                assert (proof is None) == inside, (held, child, proof)
                if proof is not None:
                    assert covers(child.capability(), proof) and not covers(held.capability(), proof)
        narrower = all(any(c.covered() <= h.covered() for h in up.specs) for c in caps)
        expires = self.now + ttl
        if self.now >= min(link.expires for link in up.lineage()):
            expected: type[AgentGateError] | None = Expired
        elif up.depth == 0 or not narrower or expires > up.expires:
            expected = ScopeCreep
        else:
            expected = None
        key = SigningKey.generate()
        try:
            chain = delegate(
                up.chain, up.key, key.public, [c.capability() for c in caps], ttl=ttl, now=self.now
            )
        except AgentGateError as exc:
            assert expected is not None and type(exc) is expected, (expected, exc)
            event(f"delegate {expected.__name__}")
            return
        assert expected is None, (expected, caps, up.specs)
        event("delegate ok")
        self.links.append(Link(chain, key, tuple(caps), up, expires, up.depth - 1))

    @rule(
        which=st.integers(0, 50),
        picks=st.lists(st.tuples(st.booleans(), st.integers(0, len(DOMAIN) - 1)), min_size=1, max_size=6),
        holder=st.sampled_from((True, True, True, False)),
    )
    def decide(self, which: int, picks: list[tuple[bool, int]], holder: bool) -> None:
        """Calls from the whole domain, or from what the tip covers."""
        link = self.links[which % len(self.links)]
        covered = link.covered()
        inside = sorted(covered, key=repr)
        # No link covers a call that a link above it does not (attenuation is transitive).
        for above in link.lineage()[1:]:
            assert covered <= above.covered()
        for within, pick in picks:
            r, a, n, v = inside[pick % len(inside)] if within and inside else DOMAIN[pick]
            call = _call(r, a, n, v)
            tip_covers = any(covers(s.capability(), call) for s in link.specs)
            assert tip_covers == ((r, a, n, v) in covered), (link.specs, call)
            key = link.key if holder else self.stranger
            invocation = Invocation.sign(key, link.chain, call, now=self.now)
            decision = self.authority.decide(invocation, now=self.now)
            codes = {f.code for f in decision.findings}
            lineage = link.lineage()
            if not holder:
                assert codes == {"wrong_holder"}
            elif self.now >= min(x.expires for x in lineage):
                assert codes == {"grant_expired"}
            elif not tip_covers:
                assert codes == {"call_not_covered"}
            elif any(x.revoked for x in lineage):
                assert codes == {"revoked"}
            else:
                assert decision.allowed, decision.reasons
            event(f"decide {decision.outcome.value} {','.join(sorted(codes))}")
            self.signed.append(SignedCall(link, invocation, holder, decision.allowed))

    @rule(pick=st.integers(0, 200))
    def replay(self, pick: int) -> None:
        """The same signed invocation again: never allowed twice (a nonce is spent once, also
        across a restart); one refused before keeps being refused."""
        if not self.signed:
            return
        signed = self.signed[pick % len(self.signed)]
        decision = self.authority.decide(signed.invocation, now=self.now)
        assert not decision.allowed
        codes = {f.code for f in decision.findings}
        lineage = signed.link.lineage()
        if not signed.signer_is_holder:
            assert codes == {"wrong_holder"}
        elif self.now >= signed.invocation.expires:
            assert codes == {"invocation_expired"}
        elif self.now >= min(x.expires for x in lineage):
            assert codes == {"grant_expired"}
        elif signed.allowed and not any(x.revoked for x in lineage):
            assert codes == {"replayed_invocation"}
        event(f"replay {','.join(sorted(codes))}")

    @rule(which=st.integers(0, 50))
    def revoke(self, which: int) -> None:
        link = self.links[which % len(self.links)]
        self.authority.revoke(link.chain, reason="model", now=self.now)
        link.revoked = True

    @rule(seconds=st.sampled_from((1, 30, 61, 400)))
    def advance(self, seconds: int) -> None:
        self.now += seconds

    @rule()
    def restart(self) -> None:
        self.close()
        self.open()


CapabilityMachine.TestCase.settings = settings(
    max_examples=EXAMPLES or 60,
    stateful_step_count=20,
    derandomize=not RANDOM,
    deadline=None,
    suppress_health_check=list(HealthCheck),
)
TestCapabilityModel = CapabilityMachine.TestCase


# --- found by the Gate machine ---------------------------------------------------------------


def test_a_declined_request_that_has_since_expired_is_not_declined_twice(tmp_path: Path) -> None:
    """Found by ``GateMachine`` (fixed in store/approvals.py): ``Gate.decline`` of a request
    declined before, once that request had expired, recorded a second ``deny`` of it, where its
    contract is ``InputError`` and nothing written (the log already says how it ended).
    ``ApprovalStore._explain`` said ``expired`` before ``denied``, and ``decline`` takes an
    expired request as one nobody answered."""
    keys = {n: SigningKey.generate() for n in ("root", "sup", "dana", "stranger")}
    text = POLICY.format(
        pay_limit=POLICY_PAY_LIMIT,
        cap=ROOT_CAP,
        ttl=ROOT_TTL,
        depth=ROOT_DEPTH,
        max_ttl=DELEGATION_MAX_TTL,
        approval_above=APPROVAL_ABOVE,
        approval_expiry=APPROVAL_EXPIRY,
        **{n: k.did for n, k in keys.items()},
    )
    clock = Clock()
    clock.install()
    try:
        with Gate(parse_policy(text, source="r40.yaml"), SQLiteStore(tmp_path / "agentgate.db")) as gate:
            sup = gate.issue(keys["root"], name="sup", key=keys["sup"], role="worker")
            asked = gate.authorize(sup, Call.tool("pay", {"amount": 60}), call_id="c1")
            assert asked.needs_approval
            assert gate.decline(asked, "no").verdict == "deny"
            with pytest.raises(InputError):
                gate.decline(asked, "no")  # decided: nothing written
            size = gate.audit.size()
            clock.now += APPROVAL_EXPIRY + 1
            with pytest.raises(InputError):
                gate.decline(asked, "no, again")
            gate.flush()
            assert gate.audit.size() == size
            assert gate.approvals.get(asked.request["id"]).state == "denied"  # type: ignore[index]
            assert gate.verify().ok
    finally:
        clock.remove()
