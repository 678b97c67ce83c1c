"""``agentgate store prune``, the PostgreSQL reference trigger of earlier stores, and approvals
counted against the policy in force on both stores.

- PostgreSQL: a store made by a version before commit 0626663 (2026-11-30 04:00) keeps the
  reference trigger's first body (a backtracking regex, about 2.8x slower per append); the owner
  opening the log now remakes it, with the same rows kept.
- ``agentgate store prune`` deletes expired approval requests, settled budget reservations and
  old dead letters (review r38's leak hunt: each kept one row per call for ever), never a held
  reservation, an open request or the audit log.
- Approvals counted against the policy in force (``QuorumRule``) behave the same on SQLite and
  PostgreSQL (the policy-change scenarios are in tests/test_gate_policy_change.py).
"""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path

import pytest
from test_audit_scale import KEY, ORIGIN, decision

from agentgate.cli.main import main
from agentgate.errors import Denied
from agentgate.store import SQLiteStore, Store
from agentgate.store.approvals import ApprovalStore, QuorumRule
from agentgate.store.audit import AuditLog
from agentgate.store.dead_letters import DeadLetterStore

_EARLIER_BODY = r"""
CREATE OR REPLACE FUNCTION agentgate_audit_index_ref() RETURNS trigger LANGUAGE plpgsql
SECURITY DEFINER AS $fn$
DECLARE
    found text := substring(encode(NEW.entry, 'escape') FROM '^.*,"ref":(null|[0-9]{1,18}),"resource":');
BEGIN
    IF found IS NOT NULL AND found <> 'null' THEN
        INSERT INTO audit_refs (idx, ref) VALUES (NEW.idx, found::bigint)
        ON CONFLICT (idx) DO UPDATE SET ref = EXCLUDED.ref;
    END IF;
    RETURN NULL;
END;
$fn$
"""


@pytest.mark.postgres
def test_the_reference_trigger_of_an_earlier_version_is_remade_by_the_owner(postgres_url: str) -> None:
    from agentgate.store._postgres import PostgresStore

    body = "SELECT prosrc FROM pg_proc WHERE proname = 'agentgate_audit_index_ref'"
    with PostgresStore(postgres_url) as owner:
        log = AuditLog(owner, KEY, origin=ORIGIN)
        allow = log.append(decision())
        with owner.transaction() as tx:  # as a version before 0626663 made it
            tx.execute(_EARLIER_BODY)
        assert ':"fer",' not in owner.query(body)[0][0]
        log.append(decision("outcome", ref=allow, status="ok"))
    with PostgresStore(postgres_url) as owner:
        log = AuditLog(owner, KEY, origin=ORIGIN)
        assert ':"fer",' in owner.query(body)[0][0]
        later = log.append(decision())
        log.append(decision("outcome", ref=later, status="ok"))
        assert owner.query("SELECT idx, ref FROM audit_refs ORDER BY idx") == [(1, 0), (3, 2)]
        assert [p for p in log.verify().problems] == []
        stamp = owner.query("SELECT xmin::text FROM pg_proc WHERE proname = 'agentgate_audit_index_ref'")
    with PostgresStore(postgres_url) as owner:  # remade once, not on every start
        AuditLog(owner, KEY, origin=ORIGIN)
        assert (
            owner.query("SELECT xmin::text FROM pg_proc WHERE proname = 'agentgate_audit_index_ref'") == stamp
        )


def test_a_request_is_counted_against_the_rule_in_force_on_both_stores(store: Store) -> None:
    """``QuorumRule``: only the named approvers' votes count, the stored quorum follows the rule,
    and a request approved under a smaller quorum waits again (SQLite and PostgreSQL)."""
    approvals = ApprovalStore(store)
    asked = approvals.request("call-1", "did:agent", time.time() + 600, quorum=1)
    approvals.approve(asked, "did:alice", call_hash="call-1")  # approved under quorum 1
    assert approvals.get(asked).state == "approved"
    rule = QuorumRule(2, frozenset({"did:bob", "did:carol"}))
    approvals.approve(asked, "did:bob", call_hash="call-1", rule=rule)
    assert approvals.get(asked).state == "pending" and approvals.get(asked).quorum == 2
    assert approvals.approvers(asked, rule=rule) == ("did:bob",)
    with pytest.raises(Denied, match="is pending"):
        approvals.consume(asked, "call-1", rule=rule)
    approvals.approve(asked, "did:carol", call_hash="call-1", rule=rule)
    assert approvals.consume(asked, "call-1", rule=rule) == ("did:bob", "did:carol")
    with pytest.raises(Denied, match="already used"):
        approvals.consume(asked, "call-1", rule=rule)
    nobody = approvals.request("call-2", "did:agent", time.time() + 600, quorum=1)
    approvals.approve(nobody, "did:alice", call_hash="call-2", rule=QuorumRule(1, frozenset()))
    assert approvals.get(nobody).state == "pending"  # an empty rule counts no vote


# --- agentgate store prune (review r38, leaks: four tables kept a row per call for ever) ---------


def test_store_prune_forgets_what_is_over_and_nothing_that_is_live(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from test_gate_policy_change import LOOKUP, MODEL, issued_under_old, restart
    from test_store_dead_letters import letter

    agent, _ = issued_under_old(tmp_path)
    gate = restart(tmp_path)
    try:
        for _ in range(2):  # two model calls: two reservations, settled
            auth = gate.authorize(agent, MODEL, tokens=(10, 5))
            gate.run(auth, lambda: "text", spent=lambda _: (10, 2))
        held = gate.authorize(agent, MODEL, tokens=(10, 5))  # decided, not run: its reservation is held
        assert held.allowed and gate.authorize(agent, LOOKUP).allowed
        gate.flush()
    finally:
        gate.close()
    path = tmp_path / "ag.db"
    with SQLiteStore(path) as store:
        approvals = ApprovalStore(store)
        expired = approvals.request("call-old", "did:agent", time.time() - 3600)
        approvals.approve(expired, "did:alice", now=time.time() - 7200)
        live = approvals.request("call-new", "did:agent", time.time() + 3600)
        letters = DeadLetterStore(store)
        letters.record(dataclasses.replace(letter(1), recorded_at=time.time() - 3600))
        letters.record(dataclasses.replace(letter(2), recorded_at=time.time()))
        with store.transaction() as tx:  # the settled reservations, as if settled an hour ago
            tx.execute(
                "UPDATE budget_reservations SET settled = ?, created = ? WHERE state <> 'reserved'",
                ("2000-01-01T00:00:00.000000Z", "2000-01-01T00:00:00.000000Z"),
            )
            tx.execute(
                "UPDATE budget_reservations SET created = ? WHERE state = 'reserved'",
                ("2000-01-01T00:00:00.000000Z",),
            )
        log_size = store.query("SELECT count(*) FROM audit_log")[0][0]

    assert main(["store", "prune", "--older-than", "10m", "--store", str(path), "--json"]) == 0
    pruned = json.loads(capsys.readouterr().out)["pruned"]
    assert pruned == {
        **{"approval_requests": 1, "settled_reservations": 2, "dead_letters": 1},
        **{"expired_grant_budgets": 0, "expired_grants": 0, "expired_grant_revocations": 0},
    }
    with SQLiteStore(path) as store:
        assert [r[0] for r in store.query("SELECT id FROM approvals")] == [live]
        assert store.query("SELECT count(*) FROM approval_votes")[0][0] == 0
        assert [r[0] for r in store.query("SELECT state FROM budget_reservations")] == ["reserved"]
        assert [r[0] for r in store.query("SELECT id FROM agentgate_dead_letters")] == ["id-2"]
        assert store.query("SELECT count(*) FROM audit_log")[0][0] == log_size
    assert main(["store", "prune", "--older-than", "10m", "--store", str(path)]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "approval requests: 0 pruned",
        "settled reservations: 0 pruned",
        "dead letters: 0 pruned",
        "expired grant budgets: 0 pruned",
        "expired grants: 0 pruned",
        "expired grant revocations: 0 pruned",
    ]


@pytest.mark.parametrize("duration", ["0s", "-1d", "30", "forever"])
def test_store_prune_refuses_a_duration_that_is_not_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], duration: str
) -> None:
    SQLiteStore(tmp_path / "ag.db").close()
    assert main(["store", "prune", f"--older-than={duration}", "--store", str(tmp_path / "ag.db")]) == 2
    assert "duration" in capsys.readouterr().err
    assert main(["store", "prune", "--older-than", "1d", "--store", str(tmp_path / "none.db")]) == 2
    assert not (tmp_path / "none.db").exists()
