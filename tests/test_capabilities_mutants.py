"""Review R39, mutation angle: tests that kill mutants the existing suite let live.

Small hand-made mutations were applied, one at a time, to a private copy of the security-critical
code (capabilities, authority grants/decisions/invocations, the Merkle log and its store, the
budget ledger, the shared concurrency limits, the approval store), and the test files that
should catch each were run. Every test here kills at least one mutant that survived them: it
passes on the real code and was seen to fail on the copy with that mutant applied (the
docstring names the mutant). The report of the review lists every mutant and its fate.

What holds: the real code refuses each widening these tests build (no test here is xfail).
What did not hold: only the tests: these mutants survived the relevant existing test files.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import pytest
from test_audit_tamper import _attack, _fill, _row

from agentgate.audit.entry import AuditEntry
from agentgate.audit.merkle import leaf_hash
from agentgate.authority import (
    Budget,
    Chain,
    ChainCache,
    GrantRepository,
    Invocation,
    Outcome,
    decide,
    delegate,
    issue,
    verify_chain,
)
from agentgate.authority._grant import _encode_chain, _sign
from agentgate.capabilities import (
    Call,
    Capability,
    Constraint,
    attenuates,
    covers,
    pattern_matches,
    pattern_within,
    witness,
)
from agentgate.errors import BudgetExceeded, Denied, Expired, Revoked, ScopeCreep, TamperDetected
from agentgate.keys import SigningKey
from agentgate.store import SQLiteStore
from agentgate.store.approvals import ApprovalStore
from agentgate.store.ledger import BudgetLedger

NOW = 1_800_000_000
ROOT, ALICE, BOB = (SigningKey(bytes([i]) * 32) for i in range(71, 74))


@pytest.fixture
def repo(sqlite_store: SQLiteStore) -> GrantRepository:
    return GrantRepository(sqlite_store)


def _decide(
    repo: GrantRepository, key: SigningKey, chain: Chain, call: Call, now: int = NOW + 1
) -> tuple[Outcome, str | None]:
    """Sign ``call`` as ``key`` under ``chain`` and decide it: its outcome and first finding's code."""
    inv = Invocation.sign(key, chain, call, now=now)
    d = decide(inv, repo=repo, trusted=ROOT.public, now=now, cache=ChainCache())
    return d.outcome, (d.findings[0].code if d.findings else None)


# --- capabilities.py ---------------------------------------------------------------------------


def test_an_open_bound_is_not_widened_to_a_closed_one() -> None:
    """Kills C2 (``_subset``: ``hi_ok = child.hi <= parent.hi``, openness ignored) and C3 (the same
    for the lower bound): ``amount<=500`` under ``amount<500`` would pass as an attenuation and a
    delegate could then spend exactly 500."""
    for parent_text, child_text, edge in (
        ("tool:payments.refund?amount<500", "tool:payments.refund?amount<=500", 500),
        ("tool:payments.refund?amount>0", "tool:payments.refund?amount>=0", 0),
    ):
        parent, child = Capability.parse(parent_text), Capability.parse(child_text)
        assert not attenuates(parent, child)
        found = witness(parent, child)
        assert found is not None and found.args["amount"] == edge
        chain = issue(ROOT, ALICE.did, [parent_text], ttl=3600, now=NOW)
        with pytest.raises(ScopeCreep):
            delegate(chain, ALICE, BOB.did, [child_text], ttl=60, now=NOW)


def test_a_prefix_constraint_only_narrows_to_a_longer_prefix() -> None:
    """Kills C4 (``_subset`` for prefixes reversed: ``parent.prefix.startswith(child.prefix)``): a
    child ``path^=t`` would pass under ``path^=tmp_`` and reach every path starting with ``t``."""
    parent = Capability.parse("tool:files.read?path^=tmp_")
    wider = Capability.parse("tool:files.read?path^=t")
    narrower = Capability.parse("tool:files.read?path^=tmp_cache_")
    assert not attenuates(parent, wider)
    assert attenuates(parent, narrower)
    chain = issue(ROOT, ALICE.did, ["tool:files.read?path^=tmp_"], ttl=3600, now=NOW)
    with pytest.raises(ScopeCreep):
        delegate(chain, ALICE, BOB.did, ["tool:files.read?path^=t"], ttl=60, now=NOW)


def test_a_dotted_wildcard_stops_at_the_dot(repo: GrantRepository) -> None:
    """Kills C5 (``pattern_matches``: ``tool:payments.*`` tested with ``startswith("tool:payments")``,
    no dot boundary): a grant for ``tool:payments.*`` would cover ``tool:payments_admin.wipe``."""
    assert pattern_matches("tool:payments.*", "tool:payments.refund")
    assert not pattern_matches("tool:payments.*", "tool:payments_admin.wipe")
    assert not covers(Capability.parse("tool:payments.*"), Call.tool("payments_admin.wipe"))
    chain = issue(ROOT, ALICE.did, ["tool:payments.*"], ttl=3600, now=NOW)
    assert _decide(repo, ALICE, chain, Call.tool("payments.refund"))[0] is Outcome.ALLOW
    assert _decide(repo, ALICE, chain, Call.tool("payments_admin.wipe")) == (Outcome.DENY, "call_not_covered")


def test_a_wildcard_child_must_extend_the_parent_stem_at_a_dot(repo: GrantRepository) -> None:
    """Kills C6 (``pattern_within``: ``child[:-2].startswith(parent[:-2])``, no dot boundary): a
    holder of ``tool:payments.*`` could delegate ``tool:payments_admin.*``, which it never held."""
    assert not pattern_within("tool:payments_admin.*", "tool:payments.*")
    assert pattern_within("tool:payments.admin.*", "tool:payments.*")
    assert not attenuates(Capability.parse("tool:payments.*"), Capability.parse("tool:payments_admin.*"))
    chain = issue(ROOT, ALICE.did, ["tool:payments.*"], ttl=3600, now=NOW)
    with pytest.raises(ScopeCreep):
        delegate(chain, ALICE, BOB.did, ["tool:payments_admin.*"], ttl=60, now=NOW)


def test_eq_and_in_on_one_field_are_a_conjunction(repo: GrantRepository) -> None:
    """Kills C12 (``Constraint._normalize``: the ``in`` set no longer intersected with ``eq``):
    ``currency=EUR&currency=EUR|USD`` would allow USD."""
    both = Constraint.of({"eq": "EUR", "in": ["EUR", "USD"]})
    assert both.allows("EUR") and not both.allows("USD")
    chain = issue(ROOT, ALICE.did, ["tool:payments.refund?currency=EUR&currency=EUR|USD"], ttl=3600, now=NOW)
    assert _decide(repo, ALICE, chain, Call.tool("payments.refund", {"currency": "EUR"}))[0] is Outcome.ALLOW
    assert _decide(repo, ALICE, chain, Call.tool("payments.refund", {"currency": "USD"})) == (
        Outcome.DENY,
        "call_not_covered",
    )


# --- authority/_grant.py -------------------------------------------------------------------------


def _forged_child(parent: Chain, **changes: object) -> Chain:
    """A child link signed by the parent's holder (ALICE) with fields delegate() would never pick."""
    tip = parent.tip
    fields: dict[str, object] = {
        "audience": BOB.did,
        "capabilities": [Capability.parse("tool:payments.refund?amount<=100")],
        "budget": tip.budget,
        "not_before": tip.not_before,
        "expires": tip.expires,
        "max_depth": 0,
        "purpose": "",
        "parent": tip.id,
    }
    fields.update(changes)
    grant = _sign(ALICE, **fields)  # type: ignore[arg-type]
    links = (*parent.links, grant)
    return Chain(links, _encode_chain(links))


def _root() -> Chain:
    return issue(
        ROOT, ALICE.did, ["tool:payments.refund?amount<=500"], ttl=3600, budget=Budget(1_000_000), now=NOW
    )


def test_a_budget_one_unit_above_the_parent_is_refused() -> None:
    """Kills G4 (``link_findings``: ``child.budget.amount > parent.budget.amount + 1``)."""
    root = _root()
    kept = delegate(
        root, ALICE, BOB.did, ["tool:payments.refund?amount<=100"], ttl=60, budget=Budget(1_000_000), now=NOW
    )
    assert kept.tip.budget == Budget(1_000_000)
    with pytest.raises(ScopeCreep) as exc:
        delegate(
            root,
            ALICE,
            BOB.did,
            ["tool:payments.refund?amount<=100"],
            ttl=60,
            budget=Budget(1_000_001),
            now=NOW,
        )
    assert exc.value.finding.code == "budget_widened"  # type: ignore[attr-defined]


def test_a_child_without_a_budget_under_a_budgeted_parent_is_refused(repo: GrantRepository) -> None:
    """Kills G5 (``link_findings``: the ``child.budget is None`` check skipped): a child signed with
    no budget would spend without limit (``Decision.budgets`` would carry only the root's, but a
    root without one makes that nothing)."""
    chain = _forged_child(_root(), budget=None)
    with pytest.raises(ScopeCreep) as exc:
        verify_chain(chain.token, ROOT.public, now=NOW + 1)
    assert exc.value.finding.code == "budget_widened"  # type: ignore[attr-defined]
    assert _decide(repo, BOB, chain, Call.tool("payments.refund", {"amount": 5})) == (
        Outcome.DENY,
        "budget_widened",
    )


def test_a_child_starting_one_second_before_its_parent_is_refused() -> None:
    """Kills G8 (``link_findings``: ``child.not_before < parent.not_before - 1``)."""
    root = _root()
    same = _forged_child(root)
    assert verify_chain(same.token, ROOT.public, now=NOW + 1) == same
    early = _forged_child(root, not_before=root.tip.not_before - 1)
    with pytest.raises(ScopeCreep) as exc:
        verify_chain(early.token, ROOT.public, now=NOW + 1)
    assert exc.value.finding.code == "starts_before_parent"  # type: ignore[attr-defined]


def test_every_capability_of_a_delegation_is_checked_not_only_the_first(repo: GrantRepository) -> None:
    """Kills G15 (``link_findings`` checks ``child.capabilities[:1]`` only): a narrow first
    capability would smuggle a second one the parent never held."""
    root = _root()
    with pytest.raises(ScopeCreep) as exc:
        delegate(
            root, ALICE, BOB.did, ["tool:payments.refund?amount<=100", "tool:shell.run"], ttl=60, now=NOW
        )
    assert exc.value.finding.code == "capability_widened"  # type: ignore[attr-defined]
    forged = _forged_child(
        root,
        capabilities=[
            Capability.parse("tool:payments.refund?amount<=100"),
            Capability.parse("tool:shell.run"),
        ],
    )
    assert _decide(repo, BOB, forged, Call.tool("shell.run")) == (Outcome.DENY, "capability_widened")


# --- authority/_decision.py ----------------------------------------------------------------------


def test_the_call_must_have_the_action_that_was_signed(repo: GrantRepository) -> None:
    """Kills D3 (``_decide`` compares only the resource with the signed one, not the action): under
    a grant for every action (``#*``), an invocation signed for ``read`` would let a relay run
    ``delete`` with the holder's signature."""
    chain = issue(ROOT, ALICE.did, ["tool:files.report#*"], ttl=3600, now=NOW)
    signed = Invocation.sign(ALICE, chain, Call("tool:files.report", "read", {}), now=NOW)
    ok = decide(signed, repo=repo, trusted=ROOT.public, now=NOW + 1, cache=ChainCache())
    assert ok.outcome is Outcome.ALLOW
    moved = dataclasses.replace(signed, call=Call("tool:files.report", "delete", {}))
    d = decide(moved, repo=repo, trusted=ROOT.public, now=NOW + 1, cache=ChainCache())
    assert d.outcome is Outcome.DENY and d.findings[0].code == "call_mismatch"


def test_a_child_valid_from_later_than_its_root_is_not_yet_valid(repo: GrantRepository) -> None:
    """Kills G18 (``Chain.not_before`` is the earliest link's, not the latest's): ``_conclude``
    then skipped ``time_finding`` for a chain whose root is valid but whose tip is not yet."""
    root = _root()
    later = delegate(root, ALICE, BOB.did, ["tool:payments.refund?amount<=100"], ttl=600, now=NOW + 100)
    assert later.tip.not_before == NOW + 100 and later.not_before == NOW + 100
    call = Call.tool("payments.refund", {"amount": 5})
    assert _decide(repo, BOB, later, call, now=NOW + 69) == (Outcome.DENY, "grant_not_yet_valid")
    assert _decide(repo, BOB, later, call, now=NOW + 70)[0] is Outcome.ALLOW  # within the 30 s skew


def test_an_invocation_is_bound_to_the_tip_it_was_signed_for(repo: GrantRepository) -> None:
    """Kills D2 (``_decide`` skips ``inv.tip != tip.id``): an invocation that BOB signed under one
    chain would be accepted with another chain BOB also holds, which BOB never chose to use."""
    root = _root()
    narrow = delegate(root, ALICE, BOB.did, ["tool:payments.refund?amount<=100"], ttl=600, now=NOW)
    other = delegate(root, ALICE, BOB.did, ["tool:payments.refund?amount<=300"], ttl=600, now=NOW)
    signed = Invocation.sign(BOB, narrow, Call.tool("payments.refund", {"amount": 5}), now=NOW)
    moved = dataclasses.replace(signed, chain_token=other.token)
    d = decide(moved, repo=repo, trusted=ROOT.public, now=NOW + 1, cache=ChainCache())
    assert d.outcome is Outcome.DENY and d.findings[0].code == "tip_mismatch"


def test_an_invocation_dated_just_beyond_the_skew_is_not_yet_valid(repo: GrantRepository) -> None:
    """Kills D7 (``inv.issued_at > t + skew + 1``): the tolerance on a caller's clock is exactly
    ``skew`` seconds."""
    chain = _root()
    call = Call.tool("payments.refund", {"amount": 5})
    t = NOW + 100
    for dated, expected in (
        (t + 30, (Outcome.ALLOW, None)),
        (t + 31, (Outcome.DENY, "invocation_not_yet_valid")),
    ):
        inv = Invocation.sign(ALICE, chain, call, now=dated)
        d = decide(inv, repo=repo, trusted=ROOT.public, now=t, cache=ChainCache())
        assert (d.outcome, d.findings[0].code if d.findings else None) == expected


def test_verifiers_with_different_skews_share_one_nonce_per_invocation(repo: GrantRepository) -> None:
    """Kills D14 (the nonce row keyed by ``inv.expires + skew``, the verifier's own tolerance,
    instead of the fixed ``DEFAULT_SKEW``): the nonce table's key holds the expiry, so two
    verifiers configured with different skews over one store each accepted the same invocation
    once: a replay."""
    chain = _root()
    inv = Invocation.sign(ALICE, chain, Call.tool("payments.refund", {"amount": 5}), now=NOW)
    first = decide(inv, repo=repo, trusted=ROOT.public, now=NOW + 1, skew=30, cache=ChainCache())
    again = decide(inv, repo=repo, trusted=ROOT.public, now=NOW + 1, skew=60, cache=ChainCache())
    assert first.outcome is Outcome.ALLOW
    assert again.outcome is Outcome.DENY and again.findings[0].code == "replayed_invocation"


# --- store/audit.py ------------------------------------------------------------------------------


def test_verify_names_a_checkpoint_row_whose_root_column_was_edited(sqlite_store: SQLiteStore) -> None:
    """Kills A1 (``verify`` compares only the size column with the signed note, not the root
    column): an edited root column makes every later ``checkpoint()`` refuse to sign, and
    ``verify`` must say why rather than report the log intact."""
    log = _fill(sqlite_store)
    log.checkpoint()
    assert log.verify().ok
    _attack(sqlite_store, ("UPDATE audit_checkpoints SET root = ?", (b"\x00" * 32,)))
    report = log.verify()
    assert not report.ok
    assert any("root column does not match its signed note" in p for p in report.problems)
    with pytest.raises(TamperDetected):
        log.checkpoint()


def test_checkpoint_refuses_to_sign_over_an_entry_edited_after_the_last_checkpoint(
    sqlite_store: SQLiteStore,
) -> None:
    """Kills A5 (``checkpoint()`` no longer compares the bytes of entries newer than the last
    checkpoint with their stored leaf hashes): an entry whose decision was flipped, leaf hash
    left as it was, would be covered by a fresh signature."""
    log = _fill(sqlite_store, 6)
    log.checkpoint()
    for i in range(2):
        log.append({"kind": "allow", "principal": "did:key:zAlice", "budget_delta": 100 + i})
    data, _stored = _row(sqlite_store, 7)
    entry = AuditEntry.from_bytes(data)
    forged = entry.model_copy(update={"kind": "deny"}).to_bytes()
    _attack(sqlite_store, ("UPDATE audit_log SET entry = ? WHERE idx = 7", (forged,)))
    before = log.checkpoints()
    with pytest.raises(TamperDetected, match="entry 7"):
        log.checkpoint()
    assert log.checkpoints() == before


def test_checkpoint_refuses_to_sign_over_rows_swapped_after_the_last_checkpoint(
    sqlite_store: SQLiteStore,
) -> None:
    """Kills A6 (``checkpoint()`` no longer checks that each newer entry carries its own index):
    two entries swapped with their leaf hashes (each row self-consistent) would be signed in the
    wrong order."""
    log = _fill(sqlite_store, 6)
    log.checkpoint()
    for i in range(2):
        log.append({"kind": "allow", "principal": "did:key:zAlice", "budget_delta": 100 + i})
    six, seven = _row(sqlite_store, 6), _row(sqlite_store, 7)
    sql = "UPDATE audit_log SET entry = ?, leaf_hash = ? WHERE idx = ?"
    _attack(sqlite_store, (sql, (*seven, 6)), (sql, (*six, 7)))
    before = log.checkpoints()
    with pytest.raises(TamperDetected, match="entry 6 does not carry its own index"):
        log.checkpoint()
    assert log.checkpoints() == before


def test_explain_proves_the_last_entry_a_checkpoint_covers(sqlite_store: SQLiteStore) -> None:
    """Kills A9 (``_prove_included`` treats ``idx < size - 1`` as covered): the last entry of the
    latest checkpoint was then neither proven nor listed as unproven, so one rewritten with a
    matching leaf hash after the checkpoint was explained as if it were in the signed tree."""
    log = _fill(sqlite_store, 6)
    log.checkpoint()
    shown = log.explain(5)
    assert shown.unproven == () and shown.checkpoint is not None and shown.checkpoint.size == 6
    data, _stored = _row(sqlite_store, 5)
    forged = AuditEntry.from_bytes(data).model_copy(update={"kind": "deny"}).to_bytes()
    assert forged != data
    _attack(
        sqlite_store,
        ("UPDATE audit_log SET entry = ?, leaf_hash = ? WHERE idx = 5", (forged, leaf_hash(forged))),
    )
    with pytest.raises(TamperDetected, match="entry 5"):
        log.explain(5)


# --- store/ledger.py ----------------------------------------------------------------------------


class _Between:
    """A real transaction that runs ``meanwhile`` (another connection's committed work) right after
    its first conditional overrun charge matched no row: the moment READ COMMITTED lets another
    transaction's refund land between two statements of ``BudgetLedger._commit``."""

    def __init__(self, tx: Any, meanwhile: Callable[[], None]) -> None:
        self.tx, self.meanwhile, self.fired = tx, meanwhile, False

    def execute(self, sql: str, params: Sequence[Any] = ()) -> Any:
        rows = self.tx.execute(sql, params)
        if not self.fired and "AND remaining >= ?" in sql and self.tx.rowcount == 0:
            self.fired = True
            self.meanwhile()
        return rows

    @property
    def rowcount(self) -> int:
        return int(self.tx.rowcount)


@pytest.mark.postgres
def test_an_exhausting_commit_charges_only_the_overrun_when_a_refund_lands_meanwhile(
    postgres_url: str,
) -> None:
    """Kills L4 (``BudgetLedger._commit``: ``charged = left`` instead of ``min(left, -delta)``).

    On SQLite (one writer) the two are the same; on PostgreSQL a refund committed by another
    process between the failed conditional charge and the locking read makes ``left`` larger
    than the overrun, and the mutant charged all of it: a call that cost 800 of a 1000 budget
    was booked as 1000 spent, and the other process's refund vanished."""
    from agentgate.store._postgres import PostgresStore

    one, two = PostgresStore(postgres_url), PostgresStore(postgres_url)
    try:
        ledger, other = BudgetLedger(one), BudgetLedger(two)
        caps = {"g" * 64: 1000}
        first = ledger.reserve(None, ["g" * 64], caps, 600)
        second = ledger.reserve(None, ["g" * 64], caps, 300)
        assert ledger.remaining("g" * 64) == 100
        with one.transaction() as tx:
            between = _Between(tx, lambda: other.release(second))
            shortfall = ledger.commit(first, 800, between, exhaust=True)  # type: ignore[arg-type]
        assert between.fired
        assert shortfall == 0  # the overrun of 200 fit once the refund of 300 was in
        assert ledger.remaining("g" * 64) == 200
        assert ledger.spent("g" * 64) == 800
    finally:
        one.close()
        two.close()


def test_a_reservation_beyond_a_new_grants_cap_writes_nothing(sqlite_store: SQLiteStore) -> None:
    """Kills L2 (``_reserve``: ``cap < amount - 1``): a reservation one unit above the cap of a
    grant never used then created the grant's row before refusing, so a caller that goes on in
    its transaction (as ``reserve`` allows) committed a write for a refused reservation."""
    ledger = BudgetLedger(sqlite_store)
    with sqlite_store.transaction() as tx, pytest.raises(BudgetExceeded):
        ledger.reserve(tx, ["c" * 64], {"c" * 64: 100}, 101)
    assert ledger.remaining("c" * 64) is None


# --- store/approvals.py --------------------------------------------------------------------------


def test_an_approval_given_before_its_grant_was_revoked_cannot_be_used(sqlite_store: SQLiteStore) -> None:
    """Kills P7 (``ApprovalStore.consume`` without the revocation condition): a request approved,
    then its chain's root revoked, must not be consumed (``Revoked``), or the approved call runs
    on a dead grant."""
    grants = GrantRepository(sqlite_store)
    approvals = ApprovalStore(sqlite_store)
    chain = ("a" * 64, "b" * 64)
    asked = approvals.request("call-1", "did:agent", NOW + 600, grants=chain)
    approvals.approve(asked, "did:alice", call_hash="call-1", now=NOW)
    assert approvals.get(asked).state == "approved"
    grants.revoke(chain[0], now=NOW + 1, reason="compromised root")
    with pytest.raises(Revoked):
        approvals.consume(asked, "call-1", now=NOW + 2)
    assert approvals.get(asked).state == "approved"  # not consumed: nothing ran on it


def test_no_vote_is_taken_at_the_instant_a_request_expires(sqlite_store: SQLiteStore) -> None:
    """Kills P4 (the vote's condition ``expires_at >= ?``): at its expiry instant a request is
    expired (``open_for`` and ``consume`` say so too), and a late yes never approves it."""
    approvals = ApprovalStore(sqlite_store)
    asked = approvals.request("call-1", "did:agent", NOW + 600)
    with pytest.raises(Expired):
        approvals.approve(asked, "did:alice", call_hash="call-1", now=NOW + 600)
    assert approvals.get(asked).state == "pending"
    assert approvals.approvers(asked) == ()


def test_the_requester_cannot_deny_its_own_request(sqlite_store: SQLiteStore) -> None:
    """Kills P6 (``deny`` without ``requester <> ?``): as for approving, the approver must differ
    from the requester; an agent closing its own request would hide it from the humans."""
    approvals = ApprovalStore(sqlite_store)
    asked = approvals.request("call-1", "did:agent", NOW + 600)
    with pytest.raises(Denied, match="must not be the requester"):
        approvals.deny(asked, "did:agent", now=NOW)
    assert approvals.get(asked).state == "pending"
    approvals.deny(asked, "did:alice", now=NOW)
    assert approvals.get(asked).state == "denied"
