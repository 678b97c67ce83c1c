"""Review r38, the lead's own fixes of what review r37 left open.

- PostgreSQL: a store made by a version before commit 0626663 (2026-11-30 04:00) keeps the
  reference trigger's first body (a backtracking regex, about 2.8x slower per append); the owner
  opening the log now remakes it, with the same rows kept.
- Approvals counted against the policy in force (``QuorumRule``) behave the same on SQLite and
  PostgreSQL (the policy-change scenarios are in tests/test_review_r37_policy_change.py).
"""

from __future__ import annotations

import time

import pytest
from test_audit_scale import KEY, ORIGIN, decision

from agentgate.errors import Denied
from agentgate.store import Store
from agentgate.store.approvals import ApprovalStore, QuorumRule
from agentgate.store.audit import AuditLog

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
