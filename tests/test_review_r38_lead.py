"""Review r38, the lead's own fixes of what review r37 left open.

- PostgreSQL: a store made by a version before commit 0626663 (2026-11-30 04:00) keeps the
  reference trigger's first body (a backtracking regex, about 2.8x slower per append); the owner
  opening the log now remakes it, with the same rows kept.
"""

from __future__ import annotations

import pytest
from test_audit_scale import KEY, ORIGIN, decision

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
