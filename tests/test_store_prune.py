"""``store prune`` forgets grants long expired; ``policy_hash`` covers the
keys a policy's key files hold.

What holds (tested here, on SQLite and PostgreSQL where the ``store`` fixture runs):

- ``BudgetLedger.prune_expired`` then ``GrantRepository.prune`` remove the record of every grant
  recorded as expired before the cut (a whole delegated subtree), its budget row and its
  revocation; they keep a live grant and its revocation, the revocation of a grant never recorded,
  the budget (and so the record) of an expired grant with a reservation still held (pruned once it
  is settled), and the revocation (and record) of an expired grant that an approval request still
  kept names.
- A grant row made up by a role that may insert rows (an old ``expires`` for the id of a revoked
  grant it never recorded, with another token or the grant's own) never removes that revocation:
  only the recorded token's signed expiry counts.
- A grant that expired less than an hour ago is kept whatever ``--older-than`` says.
- ``agentgate store prune`` as PostgreSQL's application role (docs/operations.md's GRANTs, no
  DELETE on grants and revocations) with expired grants to delete prunes the rest (budgets of
  expired grants included), prints ``null`` for the grants and says why on stderr, exit 0; the
  owner then prunes them.
- ``policy_hash`` of a policy naming key files is the documented recomputation
  (docs/audit-format.md), changes with the keys those files hold (``key_dir`` too), and is the
  file's plain SHA-256 for a policy without key files; a Gate records it.
"""

from __future__ import annotations

import hashlib
import json
import math
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from test_gate_many_in_one_process import _policy_with_key_files
from test_gate_policy_change import KEYS, policy_text

from agentgate.authority import Budget, Chain, delegate, issue, prune_grants, record, revoke
from agentgate.cli.main import main
from agentgate.errors import InputError
from agentgate.keys import SigningKey
from agentgate.policy import load_policy
from agentgate.store import Store
from agentgate.store.approvals import ApprovalStore
from agentgate.store.grants import GrantRepository
from agentgate.store.ledger import BudgetLedger

DAY = 86400
YEAR_AGO = int(time.time()) - 365 * DAY
ROOT, ALICE, BOB = SigningKey(b"\x11" * 32), SigningKey(b"\x12" * 32), SigningKey(b"\x13" * 32)


def expired_tree(repo: GrantRepository) -> tuple[Chain, Chain]:
    """A root grant with a budget and a child delegated from it (holding the same budget), both
    expired a year ago, recorded."""
    root = issue(ROOT, ALICE.did, ["tool:search"], ttl=600, budget=Budget(100, "eur"), now=YEAR_AGO)
    child = delegate(root, ALICE, BOB.did, ["tool:search"], ttl=300, now=YEAR_AGO + 10)
    record(repo, child, now=YEAR_AGO + 10)
    return root, child


def spend(ledger: BudgetLedger, chain: Chain, *, settle: bool = True) -> str:
    caps = {link.id: link.budget.amount for link in chain.links if link.budget is not None}
    reservation = ledger.reserve(None, list(chain.ids), caps, 5)
    if settle:
        ledger.commit(reservation, 5)
    return reservation


def ids(store: Store, table: str, column: str) -> set[str]:
    return {str(r[0]) for r in store.query(f"SELECT {column} FROM {table}")}


def test_prune_forgets_grants_long_expired_and_keeps_what_may_still_be_needed(store: Store) -> None:
    repo, ledger, approvals = GrantRepository(store), BudgetLedger(store), ApprovalStore(store)
    try:
        _, child = expired_tree(repo)
        spend(ledger, child)
        revoke(repo, child, now=YEAR_AGO + 20)
        held_root = issue(ROOT, ALICE.did, ["tool:search"], ttl=600, budget=Budget(50, "eur"), now=YEAR_AGO)
        record(repo, held_root, now=YEAR_AGO)
        held = spend(ledger, held_root, settle=False)  # decided, never settled: its budget is needed
        asked = issue(ROOT, ALICE.did, ["tool:search"], ttl=600, now=YEAR_AGO)
        record(repo, asked, now=YEAR_AGO)
        revoke(repo, asked, now=YEAR_AGO + 30)
        approvals.request("h-kept", ALICE.did, time.time() + 3600, grants=[asked.id])
        live = issue(ROOT, ALICE.did, ["tool:search"], ttl=DAY)
        record(repo, live)
        revoke(repo, live)
        never_recorded = issue(ROOT, ALICE.did, ["tool:search"], ttl=600, now=YEAR_AGO)
        revoke(repo, never_recorded, now=YEAR_AGO + 30)

        cut = time.time() - 30 * DAY
        assert ledger.prune_expired(cut) == 2  # the root's and its child's; the held one stays
        assert prune_grants(repo, cut) == (2, 1)  # the root and its child; the child's revocation
        assert ids(store, "agentgate_grants", "id") == {held_root.id, asked.id, live.id}
        assert ids(store, "agentgate_revocations", "grant_id") == {asked.id, live.id, never_recorded.id}
        assert ids(store, "budget_ledger", "grant_id") == {held_root.id}
        assert ledger.prune_expired(cut) == 0 and prune_grants(repo, cut) == (0, 0)  # nothing more

        ledger.release(held)  # settled: its budget is no longer needed, nor the record
        approvals.prune(time.time() + 7200)  # the request naming ``asked`` is gone
        assert ledger.prune_expired(cut) == 1
        assert prune_grants(repo, cut) == (2, 1)
        assert ids(store, "agentgate_grants", "id") == {live.id}
        assert ids(store, "agentgate_revocations", "grant_id") == {live.id, never_recorded.id}
        assert ids(store, "budget_ledger", "grant_id") == set()
    finally:
        repo.close()


def test_a_made_up_grant_row_never_removes_a_revocation(store: Store) -> None:
    """The application role may insert grant rows: one with an old ``expires`` for the id of a live
    grant revoked (never recorded here) must not make a prune bring that grant back to life."""
    repo = GrantRepository(store)
    try:
        stolen = issue(ROOT, ALICE.did, ["tool:search"], ttl=DAY)
        other = issue(ROOT, ALICE.did, ["tool:search"], ttl=600, now=YEAR_AGO)
        revoke(repo, stolen)
        for token in (other.token, stolen.token, "not a token"):
            with store.transaction() as tx:
                tx.execute("DELETE FROM agentgate_grants")
                tx.execute(
                    "INSERT INTO agentgate_grants (id, parent, issuer, audience, expires, recorded_at, token) "
                    "VALUES (?, NULL, ?, ?, ?, ?, ?)",
                    (stolen.id, ROOT.did, ALICE.did, YEAR_AGO + 600, YEAR_AGO, token),
                )
            assert prune_grants(repo, time.time() - DAY)[1] == 0, token
            assert ids(store, "agentgate_revocations", "grant_id") == {stolen.id}, token
    finally:
        repo.close()


def test_a_grant_expired_less_than_an_hour_ago_is_kept(store: Store) -> None:
    repo, ledger = GrantRepository(store), BudgetLedger(store)
    try:
        recent = issue(
            ROOT, ALICE.did, ["tool:search"], ttl=60, budget=Budget(10, "eur"), now=time.time() - 900
        )
        record(repo, recent, now=time.time() - 900)
        with store.transaction() as tx:  # its budget row, as a call under it made it
            tx.execute(
                "INSERT INTO budget_ledger (grant_id, cap, remaining) VALUES (?, 10, 10)", (recent.id,)
            )
        revoke(repo, recent)
        assert ledger.prune_expired(time.time()) == 0
        assert prune_grants(repo, time.time()) == (0, 0)
        assert ids(store, "agentgate_grants", "id") == {recent.id}
    finally:
        repo.close()


def test_store_prune_prints_the_grant_counts(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from agentgate.store import SQLiteStore

    path = tmp_path / "ag.db"
    with SQLiteStore(path) as store:
        repo = GrantRepository(store)
        _, child = expired_tree(repo)
        spend(BudgetLedger(store), child)
        revoke(repo, child, now=YEAR_AGO + 20)
        repo.close()
    assert main(["store", "prune", "--older-than", "30d", "--store", str(path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[3:] == [
        "expired grant budgets: 2 pruned",
        "expired grants: 2 pruned",
        "expired grant revocations: 1 pruned",
    ]


@pytest.mark.postgres
def test_store_prune_as_the_application_role_prunes_the_rest_and_says_the_grants_were_not(
    postgres_server: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    from test_cli_postgresql import documented_app_role, role_url

    from agentgate.store._postgres import PostgresStore

    owner = postgres_server.create_database()
    assert main(["store", "init", "--store", owner]) == 0
    role = "r39fix_" + uuid.uuid4().hex[:8]
    documented_app_role(owner, role)
    with PostgresStore(owner) as store:
        repo = GrantRepository(store)
        _, child = expired_tree(repo)
        spend(BudgetLedger(store), child)
        revoke(repo, child, now=YEAR_AGO + 20)
        repo.close()
    capsys.readouterr()
    assert main(["store", "prune", "--older-than", "30d", "--json", "--store", role_url(owner, role)]) == 0
    out, err = capsys.readouterr()
    pruned = json.loads(out)["pruned"]
    assert pruned["expired_grant_budgets"] == 2  # budget_ledger: the application role may delete
    assert pruned["expired_grants"] is None and pruned["expired_grant_revocations"] is None
    assert "expired grants not pruned" in err and "permission denied" in err and len(err.splitlines()) == 1
    assert main(["store", "prune", "--older-than", "30d", "--json", "--store", owner]) == 0
    pruned = json.loads(capsys.readouterr().out)["pruned"]
    assert (pruned["expired_grants"], pruned["expired_grant_revocations"]) == (2, 1)


# --- policy_hash ---------------------------------------------------------------------------------


def documented_policy_hash(path: Path, principals: dict[str, Any], anchors: dict[str, Any]) -> str:
    """docs/audit-format.md, "Recomputing policy_hash", as an auditor would."""
    doc = {
        "file": hashlib.sha256(path.read_bytes()).hexdigest(),
        "principals": principals,
        "trust_anchors": anchors,
    }
    text = json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()


def test_policy_hash_of_a_policy_with_key_files_is_the_documented_recomputation(tmp_path: Path) -> None:
    path = _policy_with_key_files(tmp_path / "a", "root")
    policy = load_policy(path)
    assert policy.digest == documented_policy_hash(
        path, dict(policy.principal_dids), {"root": KEYS["root"].did}
    )
    assert policy.digest != hashlib.sha256(path.read_bytes()).hexdigest()
    # The same file read with other key files (key_dir) trusts another root: another hash.
    other = _policy_with_key_files(tmp_path / "b", "root2").parent
    elsewhere = load_policy(path, key_dir=other)
    assert elsewhere.anchor_dids["root"] == KEYS["root2"].did and elsewhere.digest != policy.digest
    # The same keys give the same hash, wherever the files are.
    assert load_policy(_policy_with_key_files(tmp_path / "c", "root")).digest == policy.digest


def test_policy_hash_of_a_self_contained_policy_is_the_files_sha256(tmp_path: Path) -> None:
    path = tmp_path / "policy.yaml"
    path.write_text(policy_text())
    assert load_policy(path).digest == hashlib.sha256(path.read_bytes()).hexdigest()


def test_the_gate_records_the_policy_hash_that_covers_the_keys(tmp_path: Path) -> None:
    from agentgate.gate import Gate
    from agentgate.store import SQLiteStore

    policy = load_policy(_policy_with_key_files(tmp_path / "a", "root"))
    gate = Gate(policy, SQLiteStore(tmp_path / "ag.db"))
    try:
        gate.issue(KEYS["root"], name="agent", key=KEYS["agent"], role="worker")
        entries = list(gate.audit.entries())
    finally:
        gate.close()
    assert [e.policy_hash for e in entries] == [policy.digest]


@pytest.mark.parametrize("before", [math.nan, math.inf, True, "100", pytest.param(10**400, id="10**400")])
def test_every_prune_refuses_a_time_that_is_not_a_finite_number_and_forgets_nothing(
    store: Store, before: object
) -> None:
    """Review R57: ``ApprovalStore.prune(nan)`` forgot every approval request on PostgreSQL (NaN
    sorts above every number there) and none on SQLite; ``BudgetLedger.prune``,
    ``BudgetLedger.prune_expired`` and ``GrantRepository.prune`` ended in a ``ValueError``
    traceback. Rule: each refuses a prune time that is not a finite number with an ``InputError``
    naming what it prunes, on both stores, before it deletes anything."""
    approvals, ledger, grants = ApprovalStore(store), BudgetLedger(store), GrantRepository(store)
    with store.transaction() as tx:
        tx.execute(
            "INSERT INTO approvals (id, call_hash, requester, state, created, expires_at) "
            "VALUES ('a-1', 'h', 'did:key:zA', 'pending', 1.0, 2.0)"
        )
    prunes = {
        "approval requests": approvals.prune,
        "settled reservations": ledger.prune,
        "expired budgets": ledger.prune_expired,
        "grants": lambda cut: grants.prune(cut, expired=lambda *_: True),
    }
    for what, prune in prunes.items():
        with pytest.raises(
            InputError, match=rf"^the {what}' prune time must be a finite number of Unix seconds"
        ):
            prune(before)
    assert store.query("SELECT id FROM approvals") == [("a-1",)]
    grants.close()
