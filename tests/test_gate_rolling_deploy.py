"""A rolling deploy, two versions of the policy live at once on one store.

A new policy reaches the processes one by one: for minutes process A decides under v1 and process
B under v2, on the same store. docs/policy-reference.md ("Changing a policy") says that every
decision reads the policy its process runs now. Each test here opens two live ``Gate`` objects,
one per policy version, on one store (a shared SQLite file, each Gate with its own connection,
and a real PostgreSQL database), and interleaves their calls: alternating, from threads, and from
two real processes.

What holds:

- approvals: a request seen by A (quorum 2) and by B (quorum 1, the same or fewer approvers). In
  every interleaving of up to three votes given through A or through B (258 on SQLite, the 42 of
  up to two on PostgreSQL, for each of two pairs of policies), each verdict is the one the
  documented rule gives (the yeses on record, counted by the deciding policy's approvers and
  quorum), the call runs at most once, and only with the approvals that the
  policy of the process that runs it requires, counted among that policy's approvers (its
  ``allow`` lists them); the request never gets stuck: A completes it with the votes it lacks.
  Each yes that counted has exactly one ``approval_given`` entry, written before the ``allow``,
  referring to the request's ``approval_required`` entry; the ``allow``'s approvers each have
  one. Votes given at the same moment through A and B (threads) run the call exactly once.
- quotas: A and B with different limits on one count (same name, subject, unit, window) share
  it, and each refuses at its own limit: in the log's order, A's allows all come while the count
  was below A's limit, never past either (threads, both stores). A count written before quotas
  were keyed is carried once into the shared key, not once per process. A quota that counts calls
  under v1 and tokens under v2 keeps two counts (documented: a changed unit starts a fresh count),
  so calls decided by B are not in A's count of calls: see "design choices" below.
- delegation and budgets: a sub-agent's grant delegated by A under v1 is used by B under v2 (its
  capabilities stay the grant's while B's policy allows the call for its principal and B's
  delegation rule the delegation: review R57); a new delegation is bounded by B's delegation
  rule; both spend the sub-agent's budget at once from threads and never overspend it; a revocation by one is seen by the other at its next call,
  for the grant and everything below it.
- the audit log: two real processes, one per policy version, append to one log; it verifies
  (``Gate.verify()`` from either version, ``agentgate audit verify``); each decision entry's
  ``policy_hash`` is the digest of the policy of the process that decided it.

What did not, fixed by the lead in review r38 (plain tests now):

- a tool's concurrency limit, shared by the processes through the store (PostgreSQL), is N slot
  rows 0..N-1 per tool, and ``LeaseManager.try_acquire`` takes the first free slot below its own
  limit without counting the live slots at or above it. While v1 allows 3 at once and v2 allows
  1, v2 starts a call in slot 0 while v1 runs two in slots 1 and 2: three at once under a policy
  that allows one, against its own docstring ("at most ``limit`` held at once, by everyone"). The
  fix: no slot is taken while ``len(taken) >= limit`` (the lower limit then waits for the calls
  the higher one runs, as a lowered quota limit refuses the rest of a window; a process with the
  low limit may wait while the other keeps its slots busy). agentgate/store/leases.py. Tests:
  ``test_a_lower_concurrency_limit_counts_the_slots_a_higher_one_holds`` (the store, both
  dialects) and ``test_a_gate_on_a_lowered_concurrency_waits_for_the_calls_another_version_runs``
  (two Gates on PostgreSQL, through the scheduler).
- a delegation (or issuance) that a Gate refuses is recorded as a ``deny`` with no
  ``policy_hash``, while every other decision entry (tool, model and GPU calls, their refusals,
  grants issued and delegated, approvals) names its policy. During a rolling deploy the log then
  cannot tell whether v1 or v2 refused the delegation (the delegation rule is the policy's), which
  docs/policy-reference.md promises ("Each audit entry records the digest of the policy that
  decided it"). Fixed: the entry has ``policy_hash`` (agentgate/gate/,
  ``Gate._audited_refusal``). Test:
  ``test_a_delegation_refused_by_the_policy_names_the_policy_that_refused``.

Design choices for the lead (no defect by the documents; tests pin the behaviour):

- while v1 counts a quota in calls and v2 the same quota in tokens (or another subject or window),
  each process counts only its own decisions: the tenant's calls in the window may exceed v1's
  limit by whatever B allowed meanwhile. A change of what a quota counts is therefore not safe to
  roll out process by process if its limit matters; deploy it with all processes stopped (a
  rename is a new identity too: tests/test_docs_prune_and_store.py)
  (``test_a_quota_counted_in_calls_by_v1_and_in_tokens_by_v2_keeps_two_counts``).
- a tool's rate limit (PostgreSQL: shared by the processes) is one token bucket that each process
  refills at its own rate: while v1 and v2 differ, the process with the lower rate takes the
  tokens the higher rate refilled, so it exceeds its own rate
  (``test_a_rate_limit_shared_by_two_versions_is_one_bucket_refilled_at_either_rate``). A bucket
  per rate would bound each process by its own but let the two add up.
- likewise a quorum raised by v2 binds only B: while A runs v1, a call it decides needs only v1's
  quorum, and the stored quorum of a request follows whichever process counted it last.
"""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from agentgate.audit.entry import AuditEntry
from agentgate.capabilities import Call
from agentgate.cli.main import main
from agentgate.errors import Revoked, ScopeCreep
from agentgate.gate import AgentIdentity, Approval, Authorization, Gate
from agentgate.keys import SigningKey, save_key
from agentgate.policy import parse_policy
from agentgate.store import SQLiteStore, Store
from agentgate.store.quotas import window_start

NAMES = ("root", "agent", "alice", "bob", "carol", "sub", "sub2")
KEYS = {name: SigningKey(bytes([i + 1]) * 32) for i, name in enumerate(NAMES)}
"""Fixed seeds: the processes of the subprocess test make the same keys."""
LOG_SEED = b"\x42" * 32
LOG_KEY = SigningKey(LOG_SEED)

POLICY = """
version: 1
trust_anchors:
  root: {{did: "{root}"}}
tenants:
  acme: {{}}
principals:
  agent: {{kind: agent, did: "{agent}", roles: [worker], tenant: acme}}
  alice: {{kind: human, did: "{alice}", roles: [lead]}}
  bob: {{kind: human, did: "{bob}", roles: [lead]}}
  carol: {{kind: human, did: "{carol}", roles: [lead]}}
tools:
  lookup:
    args: {{id: {{type: string, required: true}}}}
    idempotent: true
    concurrency: {concurrency}
  refund:
    args: {{amount: {{type: integer, required: true}}}}
models:
  small: {{cost_per_mtok: {{input: {price}, output: {price}}}}}
roles:
  worker:
    kind: agent
    capabilities:
      - resource: tool:lookup
      - resource: tool:refund
        constraints: {{amount: {{le: 1000}}}}
      - resource: model:small
    budget: {{limit: 1000000, unit: usd_micros}}
    ttl_s: 600
    delegation:
      max_depth: 1
      capabilities:
{delegated}
  lead:
    kind: human
    capabilities:
      - resource: tool:refund
    ttl_s: 600
quotas:
  acme-usage:
    tenant: acme
    window_s: {quota_window_s}
    limit: {quota_limit}
    unit: {quota_unit}
approvals:
  big-refund:
    resource: tool:refund
    when: {{amount: {{gt: 100}}}}
    approvers: {approvers}
    quorum: {quorum}
"""

V1: dict[str, object] = {
    "price": 1_000_000,  # one micro-dollar a token
    "delegated": ("tool:lookup", "model:small"),
    "quota_limit": 1_000_000,
    "quota_unit": "calls",
    # The longest window (10 years): windows are aligned to the epoch, and an hour's could roll
    # over between the calls a test counts and the one that must be refused.
    "quota_window_s": 315_360_000,
    "approvers": "[alice, bob, carol]",
    "quorum": 2,
    "concurrency": 100,
}
REFUND = Call.tool("refund", {"amount": 500})
LOOKUP = Call.tool("lookup", {"id": "1"})
MODEL = Call.model("small", {"max_tokens": 10})


def policy_text(**changes: object) -> str:
    fields = {**V1, **changes}
    delegated = "\n".join(f"        - resource: {r}" for r in fields.pop("delegated"))  # type: ignore[attr-defined]
    return POLICY.format(**fields, delegated=delegated, **{n: KEYS[n].did for n in NAMES})


class Deploy:
    """One shared store and the Gates (one per policy version) that live on it at once."""

    def __init__(self, kind: str, url: str) -> None:
        self.kind, self.url = kind, url
        self.gates: list[Gate] = []

    def store(self) -> Store:
        if self.kind == "sqlite":
            return SQLiteStore(self.url)
        from agentgate.store._postgres import PostgresStore

        return PostgresStore(self.url)

    def gate(self, source: str, **changes: object) -> Gate:
        """A process on the shared store, running the policy changed from v1 by ``changes``."""
        gate = Gate(parse_policy(policy_text(**changes), source=source), self.store(), log_key=LOG_KEY)
        self.gates.append(gate)
        return gate

    def close(self) -> None:
        for gate in self.gates:
            gate.close()


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def deploy(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Deploy]:
    for name in (
        "AGENTGATE_LOG_KEY",
        "AGENTGATE_LOG_ORIGIN",
        "AGENTGATE_LOG_PREVIOUS_KEYS",
        "AGENTGATE_STORE",
    ):
        monkeypatch.delenv(name, raising=False)
    save_key(LOG_KEY, tmp_path, "log")  # beside the SQLite file: where every process finds it
    url = str(tmp_path / "ag.db") if request.param == "sqlite" else request.getfixturevalue("postgres_url")
    opened = Deploy(request.param, url)
    try:
        yield opened
    finally:
        opened.close()


def entries(gate: Gate) -> dict[int, AuditEntry]:
    gate.flush()
    return {e.index: e for e in gate.audit.entries()}


def together(*jobs: Callable[[], Any]) -> list[Any]:
    """Run ``jobs`` from threads released at once; their results, in order (an exception is re-raised)."""
    barrier = threading.Barrier(len(jobs))
    results: list[Any] = [None] * len(jobs)
    errors: list[BaseException] = []

    def work(i: int, job: Callable[[], Any]) -> None:
        barrier.wait()
        try:
            results[i] = job()
        except BaseException as exc:  # re-raised in the test's thread
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i, job)) for i, job in enumerate(jobs)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    if errors:
        raise errors[0]
    return results


# --- approvals: one request, two quorums ----------------------------------------------------------


def voters(gate: Gate, identity: AgentIdentity) -> tuple[int, frozenset[str]]:
    """The quorum and the approvers' DIDs of ``gate``'s approval gate for the refund."""
    verdict = gate.index.evaluate(gate._policy_principal(identity), REFUND)
    assert verdict.approval is not None
    return verdict.approval.quorum, frozenset(verdict.approval.approver_dids)


def check_allow(gate: Gate, identity: AgentIdentity, ran: Authorization) -> None:
    """The call ran with the approvals ``gate``'s own policy requires, counted among its approvers."""
    quorum, among = voters(gate, identity)
    assert ran.approver is not None
    approvers = set(ran.approver.split(","))
    assert approvers <= among, (approvers, among)
    assert len(approvers) >= quorum


def check_approval_log(log: dict[int, AuditEntry], runs: dict[str, tuple[int, int | None, Gate]]) -> None:
    """``runs``: request id -> (index of its approval_required entry, index of its allow or None,
    the gate that allowed it). Every counted yes has one approval_given entry, referring to the
    request's approval_required entry; the allow's approvers each have one, written before it."""
    given: dict[str, list[AuditEntry]] = {}
    for entry in log.values():
        if entry.kind == "approval_given":
            request = next(r for r in entry.reasons if r.startswith("request:")).removeprefix("request:")
            given.setdefault(request, []).append(entry)
    for request, (asked, allowed, gate) in runs.items():
        votes = given.get(request, [])
        who = [e.approver for e in votes]
        assert len(who) == len(set(who)), f"an approver's yes recorded twice on {request}: {who}"
        for vote in votes:
            assert vote.ref == asked and log[asked].kind == "approval_required"
            assert vote.chain_hash == log[asked].chain_hash and vote.args_digest == log[asked].args_digest
        if allowed is None:
            continue
        allow = log[allowed]
        assert allow.kind == "allow" and allow.policy_hash == gate.policy.digest
        assert allow.approver is not None
        before = {e.approver for e in votes if e.index < allowed}
        assert set(allow.approver.split(",")) <= before, (allow.approver, before)


@pytest.mark.parametrize(
    "b_changes",
    [{"quorum": 1}, {"quorum": 1, "approvers": "[bob, carol]"}],
    ids=["B-quorum-1", "B-quorum-1-without-alice"],
)
def test_every_interleaving_of_votes_runs_the_call_once_with_its_deciders_quorum(
    deploy: Deploy, b_changes: dict[str, object]
) -> None:
    a = deploy.gate("v1.yaml")  # quorum 2 of alice, bob, carol
    b = deploy.gate("v2.yaml", **b_changes)
    gates = {"A": a, "B": b}
    agent = a.issue(KEYS["root"], name="agent", key=KEYS["agent"], role="worker")
    steps = [(g, who) for g in "AB" for who in ("alice", "bob", "carol")]
    rules = {name: voters(gate, agent) for name, gate in gates.items()}
    lengths = (1, 2, 3) if deploy.kind == "sqlite" else (1, 2)
    runs: dict[str, tuple[int, int | None, Gate]] = {}
    for n, sequence in enumerate(
        itertools.chain.from_iterable(itertools.product(steps, repeat=k) for k in lengths)
    ):
        call_id = f"c{n}"
        asker = gates[sequence[0][0]]
        asked = asker.authorize(agent, REFUND, call_id=call_id)
        assert asked.needs_approval and asked.request is not None and asked.audit_index is not None
        ran: list[tuple[str, Authorization]] = []
        votes: set[str] = set()  # the model: the yeses on record, each counted by the policy that reads it
        for name, who in sequence:
            got = gates[name].authorize(
                agent, REFUND, call_id=call_id, approval=Approval.sign(asked.request, KEYS[who])
            )
            quorum, among = rules[name]
            if ran:
                expected = "deny"  # used once
            elif KEYS[who].did not in among:
                expected = "approval_required"  # not an approver of this policy: asked again
            else:
                votes.add(KEYS[who].did)
                expected = "allow" if len(votes & among) >= quorum else "approval_required"
            assert got.verdict == expected, f"{sequence} at {name}/{who}: {got.verdict} {got.reasons}"
            if got.allowed:
                check_allow(gates[name], agent, got)
                assert got.approver is not None and set(got.approver.split(",")) == votes & among
                ran.append((name, got))
            # Waiting, it is listed for the approvers (``agentgate approval list``); used, it is not.
            listed = {record.id for record in b.approvals.open_records()}
            assert (asked.request["id"] in listed) == (not ran), f"{sequence} at {name}/{who}"
        assert len(ran) <= 1, f"{sequence}: ran {len(ran)} times"
        if not ran:  # never stuck: A completes it with the votes it lacks
            for who in ("alice", "bob", "carol"):
                got = a.authorize(
                    agent, REFUND, call_id=call_id, approval=Approval.sign(asked.request, KEYS[who])
                )
                if got.allowed:
                    check_allow(a, agent, got)
                    ran.append(("A", got))
                    break
            assert ran, f"{sequence}: A cannot complete the request: {got.reasons}"
        name, allowed = ran[0]
        runs[asked.request["id"]] = (asked.audit_index, allowed.audit_index, gates[name])
    check_approval_log(entries(a), runs)
    assert a.verify().ok and b.verify().ok


def test_votes_given_at_once_through_both_processes_run_the_call_once(deploy: Deploy) -> None:
    a = deploy.gate("v1.yaml")  # quorum 2
    b = deploy.gate("v2.yaml", quorum=1, approvers="[bob, carol]")
    gates = {"A": a, "B": b}
    agent = a.issue(KEYS["root"], name="agent", key=KEYS["agent"], role="worker")
    runs: dict[str, tuple[int, int | None, Gate]] = {}
    for n in range(8):
        call_id = f"t{n}"
        asked = (a if n % 2 else b).authorize(agent, REFUND, call_id=call_id)
        assert asked.request is not None and asked.audit_index is not None
        plan = [("A", "alice"), ("B", "bob"), ("A", "carol")]

        def vote(
            name: str, who: str, request: dict[str, Any] = asked.request, call_id: str = call_id
        ) -> Authorization:
            approval = Approval.sign(request, KEYS[who])
            return gates[name].authorize(agent, REFUND, call_id=call_id, approval=approval)

        results = together(*(lambda name=name, who=who: vote(name, who) for name, who in plan))
        allowed = [(name, got) for (name, _), got in zip(plan, results, strict=True) if got.allowed]
        # B's vote (bob, quorum 1) runs it unless A, with alice and carol, ran it first: once, either way.
        assert len(allowed) == 1, [(name, got.reasons) for (name, _), got in zip(plan, results, strict=True)]
        name, got = allowed[0]
        check_allow(gates[name], agent, got)
        runs[asked.request["id"]] = (asked.audit_index, got.audit_index, gates[name])
    check_approval_log(entries(a), runs)


# --- quotas --------------------------------------------------------------------------------------


@pytest.mark.parametrize("legacy", [0, 2], ids=["fresh", "legacy-count-2"])
def test_two_limits_on_one_count_each_refuse_at_their_own(deploy: Deploy, legacy: int) -> None:
    """A (limit 3) and B (limit 6) count into one window from threads; a count written under the
    bare name before quotas were keyed is carried into it once, not once per process."""
    a = deploy.gate("v1.yaml", quota_limit=3)
    b = deploy.gate("v2.yaml", quota_limit=6)
    agent = a.issue(KEYS["root"], name="agent", key=KEYS["agent"], role="worker")
    if legacy:
        with a.store.transaction() as tx:
            tx.execute(
                "INSERT INTO quota_usage (quota, window_start, used) VALUES (?, ?, ?)",
                ("acme-usage", window_start(V1["quota_window_s"], time.time()), legacy),
            )
    jobs = [lambda g=g: [g.authorize(agent, LOOKUP) for _ in range(4)] for g in (a, b, a, b)]
    decided = [auth for batch in together(*jobs) for auth in batch]
    allowed = sorted((auth.audit_index, auth) for auth in decided if auth.allowed)
    assert len(allowed) == 6 - legacy  # B's limit, less what was carried (once)
    assert all(auth.quota_exceeded == "acme-usage" for auth in decided if not auth.allowed)
    log = entries(a)
    for position, (index, _) in enumerate(allowed):
        count_before = legacy + position  # the log's order is the count's order (one transaction)
        if log[index].policy_hash == a.policy.digest:
            assert count_before < 3, f"A allowed a call at count {count_before}, its limit is 3"
        else:
            assert log[index].policy_hash == b.policy.digest and count_before < 6
    rows = a.store.query("SELECT quota, used FROM quota_usage WHERE quota <> 'acme-usage'")
    assert rows == [(f"acme-usage tenant:acme calls {V1['quota_window_s']}", 6)]


def test_a_quota_counted_in_calls_by_v1_and_in_tokens_by_v2_keeps_two_counts(deploy: Deploy) -> None:
    """Design choice (docs: a changed unit starts a fresh count): during the rollout each process
    counts only its own decisions, so the tenant's calls in the window pass v1's limit of 2 by the
    calls B allowed, which v1's count never sees."""
    a = deploy.gate("v1.yaml", quota_limit=2)
    b = deploy.gate("v2.yaml", quota_limit=100, quota_unit="tokens")
    agent = a.issue(KEYS["root"], name="agent", key=KEYS["agent"], role="worker")
    assert all(b.authorize(agent, LOOKUP).allowed for _ in range(3))  # no tokens: not counted by B
    assert b.authorize(agent, MODEL, tokens=(80, 10)).allowed
    assert [a.authorize(agent, LOOKUP).allowed for _ in range(3)] == [True, True, False]
    assert b.authorize(agent, MODEL, tokens=(5, 10)).quota_exceeded == "acme-usage"  # 90 + 15 > 100


# --- concurrency limits: one set of slots, two limits ---------------------------------------------


def test_a_lower_concurrency_limit_counts_the_slots_a_higher_one_holds(deploy: Deploy) -> None:
    """try_acquire: 'at most limit held at once, by everyone'. v1 allows 3 at once and holds
    slots 1 and 2 (slot 0 came free); v2 allows 1: two calls run, so it must wait."""
    from agentgate.store.leases import LeaseManager

    v1, v2 = LeaseManager(deploy.store(), holder="v1"), LeaseManager(deploy.store(), holder="v2")
    try:
        first, *others = (v1.try_acquire("tool:lookup", 3) for _ in range(3))
        assert first is not None and all(others)
        v1.release(first)
        assert len(v1.rows("tool:lookup")) == 2
        assert v2.try_acquire("tool:lookup", 1) is None
    finally:
        v1.close()
        v2.close()
        v1.store.close()
        v2.store.close()


@pytest.mark.postgres
def test_a_gate_on_a_lowered_concurrency_waits_for_the_calls_another_version_runs(postgres_url: str) -> None:
    """Through the Gate's scheduler (its limits are shared through PostgreSQL): B (concurrency 1)
    runs its call while two of A's (concurrency 3) run."""
    from agentgate.store.leases import LeaseManager

    deploy = Deploy("postgresql", postgres_url)
    try:
        a = deploy.gate("v1.yaml", concurrency=3)
        b = deploy.gate("v2.yaml", concurrency=1)
        agent = a.issue(KEYS["root"], name="agent", key=KEYS["agent"], role="worker")
        probe = LeaseManager(a.store, holder="probe")
        started = [threading.Event() for _ in range(3)]
        finish = [threading.Event() for _ in range(3)]

        def hold(i: int) -> None:
            def tool() -> None:
                started[i].set()
                finish[i].wait(10)

            a.run(a.authorize(agent, LOOKUP), tool)

        holders = []
        for i in range(3):  # slots 0, 1, 2, in order
            holders.append(threading.Thread(target=hold, args=(i,)))
            holders[-1].start()
            assert started[i].wait(10)
        finish[0].set()  # slot 0 comes free; slots 1 and 2 stay held by A's calls
        holders[0].join(10)
        running_with_b: list[int] = []
        b_started = threading.Event()

        def b_tool() -> None:
            running_with_b.append(len(probe.rows("tool:lookup")))
            b_started.set()

        runner = threading.Thread(target=lambda: b.run(b.authorize(agent, LOOKUP), b_tool))
        runner.start()
        b_started.wait(0.5)  # a moment for B to start, if it does; A's calls end after it
        for event in finish:
            event.set()
        for thread in [*holders, runner]:
            thread.join(10)
        assert running_with_b and running_with_b[0] <= 1, (
            f"B ran with {running_with_b} slots live (its limit: 1)"
        )
    finally:
        deploy.close()


def test_a_rate_limit_shared_by_two_versions_is_one_bucket_refilled_at_either_rate(deploy: Deploy) -> None:
    """Design choice (pinned): a tool's rate limit is one token bucket per tool in the store, and
    each process refills it at its own policy's rate and caps it at its own burst. While v1 (1 per
    100 s, burst 1) and v2 (100 per s, burst 10) both run, v1 takes a token as soon as v2's refill
    left one: two within 50 ms, where its own policy allows one per 100 s."""
    from agentgate.store.leases import SharedRateLimits

    now = [1000.0]
    v1, v2 = (SharedRateLimits(deploy.store(), clock=lambda: now[0]) for _ in range(2))
    try:
        assert v1.try_take("tool:lookup", 0.01, 1) == 0.0
        now[0] += 0.05
        assert v1.try_take("tool:lookup", 0.01, 1) > 0  # v1's own refill: not yet
        assert v2.try_take("tool:lookup", 100, 10) == 0.0  # v2's refill: 5 tokens, one taken
        assert v1.try_take("tool:lookup", 0.01, 1) == 0.0  # v1 takes one of them
    finally:
        v1.store.close()
        v2.store.close()


# --- delegation and budgets ----------------------------------------------------------------------


def test_a_delegation_made_under_v1_is_used_under_v2_and_revoked_by_either(deploy: Deploy) -> None:
    a = deploy.gate("v1.yaml")  # may delegate lookup and the model
    b = deploy.gate("v2.yaml", price=2_000_000)  # the same delegation rule, another price
    agent = a.issue(KEYS["root"], name="agent", key=KEYS["agent"], role="worker")
    sub = a.delegate(
        agent, name="sub", key=KEYS["sub"], capabilities=["tool:lookup", "model:small"],
        ttl=timedelta(seconds=120), budget=200,
    )  # fmt: skip
    used = b.authorize(sub, MODEL, tokens=(10, 10))
    assert used.allowed and used.reservations[0][2] == 40  # at B's price
    # Both spend the sub-agent's budget (200) at once, each at its own price: never past it.
    jobs = [lambda g=g: [g.authorize(sub, MODEL, tokens=(5, 5)) for _ in range(6)] for g in (a, b, a, b)]
    reserved = 40 + sum(
        auth.reservations[0][2] for batch in together(*jobs) for auth in batch if auth.allowed
    )
    assert reserved <= 200
    assert reserved > 200 - 20  # the threads used it up: the last 10 tokens cost 10 or 20
    assert b.ledger.usage(sub.grant_id) == (0, reserved)  # held by the calls decided, none settled
    # A revokes the sub-agent's grant: B refuses it at its next call; B revokes the root: A refuses
    # the agent and everything below it, and delegates nothing from it.
    a.revoke(sub, reason="rollout test")
    refused = b.authorize(sub, LOOKUP)
    assert not refused.allowed and any("revoked" in r for r in refused.reasons), refused.reasons
    assert b.authorize(agent, LOOKUP).allowed
    b.revoke(agent, reason="rollout test")
    assert not a.authorize(agent, LOOKUP).allowed
    with pytest.raises(Revoked):
        a.delegate(
            agent,
            name="sub3",
            key=SigningKey.generate(),
            capabilities=["tool:lookup"],
            ttl=timedelta(seconds=60),
        )
    assert a.verify().ok and b.verify().ok


def test_a_delegation_refused_by_the_policy_names_the_policy_that_refused(tmp_path: Path) -> None:
    deploy = Deploy("sqlite", str(tmp_path / "ag.db"))
    try:
        a = deploy.gate("v1.yaml")
        b = deploy.gate("v2.yaml", delegated=("tool:lookup",))
        agent = a.issue(KEYS["root"], name="agent", key=KEYS["agent"], role="worker")
        with pytest.raises(ScopeCreep) as refused:
            b.delegate(
                agent, name="sub", key=KEYS["sub"], capabilities=["model:small"], ttl=timedelta(seconds=60)
            )
        index = refused.value.audit_index  # type: ignore[attr-defined]
        entry = entries(b)[index]
        assert entry.kind == "deny" and entry.resource == "agent:sub"
        assert entry.policy_hash == b.policy.digest  # v2's delegation rule refused it
        # A still may; the grant it makes is refused by B at each call, as B's rule does not let
        # the agent hand the model on (review R57: each link is held to the rule at decision time).
        sub = a.delegate(
            agent, name="sub", key=KEYS["sub"], capabilities=["tool:lookup", "model:small"],
            ttl=timedelta(seconds=60),
        )  # fmt: skip
        assert a.authorize(sub, LOOKUP).allowed
        outside = b.authorize(sub, LOOKUP)
        assert [(f.kind, f.code) for f in outside.findings] == [
            ("scope_creep", "delegation_wider_than_policy")
        ]
        assert entries(b)[outside.audit_index].policy_hash == b.policy.digest
    finally:
        deploy.close()


# --- the audit log: two processes, two policies --------------------------------------------------

WORKER = r"""
import json, sys, time
from pathlib import Path
sys.path.insert(0, sys.argv[4])
import test_gate_rolling_deploy as t
from agentgate.capabilities import Call
from agentgate.gate import Approval

deploy = t.Deploy(sys.argv[1], sys.argv[2])
changes = json.loads(sys.argv[3])
changes = {k: tuple(v) if isinstance(v, list) else v for k, v in changes.items()}
source = changes.pop("source")
gate = deploy.gate(source, **changes)
go = Path(sys.argv[5])
agent = gate.issue(t.KEYS["root"], name="agent", key=t.KEYS["agent"], role="worker")
while not go.exists():
    time.sleep(0.001)
decided = []
for i in range(12):
    tag = f"{source}-{i}"
    for call in (Call.tool("lookup", {"id": tag}), Call.tool("refund", {"amount": 5000})):
        decided.append(gate.authorize(agent, call).audit_index)
    asked = gate.authorize(agent, t.REFUND, call_id=tag)
    decided.append(asked.audit_index)
    ran = gate.authorize(agent, t.REFUND, call_id=tag, approval=Approval.sign(asked.request, t.KEYS["bob"]))
    decided.append(ran.audit_index)
deploy.close()
print(json.dumps({"digest": gate.policy.digest, "decided": decided, "grant": agent.audit_index}))
"""


def test_two_processes_on_two_policies_keep_one_log_that_names_each_decisions_policy(
    deploy: Deploy, tmp_path: Path
) -> None:
    go = tmp_path / "go"
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTGATE_")}
    here = str(Path(__file__).parent)
    versions = [{"source": "v1.yaml", "quorum": 1}, {"source": "v2.yaml", "quorum": 1, "approvers": "[bob]"}]
    workers = [
        subprocess.Popen(
            [sys.executable, "-c", WORKER, deploy.kind, deploy.url, json.dumps(v), here, str(go)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for v in versions
    ]
    go.touch()
    outputs = []
    for worker in workers:
        out, err = worker.communicate(timeout=60)
        assert worker.returncode == 0, err[-2000:]
        outputs.append(json.loads(out.strip().splitlines()[-1]))
    assert outputs[0]["digest"] != outputs[1]["digest"]
    gates = [deploy.gate("v1.yaml", quorum=1), deploy.gate("v2.yaml", quorum=1, approvers="[bob]")]
    log = entries(gates[0])
    for out, gate in zip(outputs, gates, strict=True):
        assert out["digest"] == gate.policy.digest
        kinds = set()
        for index in [*out["decided"], out["grant"]]:
            assert log[index].policy_hash == out["digest"], (index, log[index].kind)
            kinds.add(log[index].kind)
        assert kinds == {"allow", "deny", "approval_required"}
    given = [e for e in log.values() if e.kind == "approval_given"]
    assert len(given) == 24 and {e.policy_hash for e in given} == {o["digest"] for o in outputs}
    for gate in gates:
        report = gate.verify()
        assert report.ok, report.problems
    assert main(["audit", "verify", "--store", deploy.url, "--key", str(tmp_path / "log.pub")]) == 0
