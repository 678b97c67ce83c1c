"""``audit verify`` names every PostgreSQL rule on the log's tables, and ``checkpoint`` refuses.

Until review R59 rules (``CREATE RULE ... ON INSERT TO audit_log DO INSTEAD ...``) were not read:
a rule that drops each deny as it is appended (the INSERT succeeds, nothing is written) or turns an
edit into nothing was reported by nothing, and the next checkpoint signed what was left. Rules
checked here: such a rule, on any of the log's tables, is a problem of ``verify`` (``unprotected``:
TAMPERED, exit 1) naming it, its table and ``DROP RULE``; ``checkpoint`` refuses to sign while it
is there; a writer's opening leaves it; once dropped, nothing is reported.
"""

from __future__ import annotations

import psycopg
import pytest
from test_audit_r57_repairs import ENTRY, KEY, ORIGIN, _postgres

from agentgate.errors import TamperDetected
from agentgate.store.audit import FOREIGN_TRIGGER, AuditLog

pytestmark = pytest.mark.postgres

DENY = {"kind": "deny", "principal": "did:key:zA", "resource": "tool:t"}

DROPS_DENIES = (
    "CREATE RULE keep_it_quiet AS ON INSERT TO audit_log "
    "WHERE convert_from(NEW.entry, 'UTF8') LIKE '%\"kind\":\"deny\"%' DO INSTEAD NOTHING"
)
"""A rule that drops every deny as it is appended (the INSERT succeeds and writes nothing)."""


def _log(url: str) -> None:
    with _postgres(url) as store:
        log = AuditLog(store, KEY, ORIGIN)
        log.append_many([ENTRY] * 2)
        log.checkpoint()


def test_a_rule_that_drops_entries_is_reported_and_refused(postgres_url: str) -> None:
    """Review R59: a PostgreSQL rule on audit_log (dropping each deny) was neither reported nor refused."""
    _log(postgres_url)
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute(DROPS_DENIES)  # type: ignore[arg-type]
        conn.execute('CREATE RULE "Quiet" AS ON UPDATE TO audit_repairs DO INSTEAD NOTHING')
    with _postgres(postgres_url) as store:
        log = AuditLog(store, KEY, ORIGIN)  # a writer's opening leaves them
        log.append(DENY)
        assert log.size() == 2  # the deny is gone, and the entries still verify ...
        report = log.verify()
        assert report.entries_verify
        assert not report.ok  # ... but verify names the rules
        assert [line.split(": it ")[0] for line in report.unprotected] == [
            "the rule keep_it_quiet on table audit_log is not one agentgate made",
            'the rule "Quiet" on table audit_repairs is not one agentgate made',
        ]
        assert all(FOREIGN_TRIGGER in line for line in report.unprotected)
        assert (
            "`DROP RULE keep_it_quiet ON audit_log` run as the table's owner removes it"
            in report.unprotected[0]
        )
        log.append(ENTRY)
        with pytest.raises(TamperDetected, match="keep_it_quiet"):
            log.checkpoint()  # nothing signs what it may have dropped
        assert len(log.checkpoints()) == 1
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute("DROP RULE keep_it_quiet ON audit_log")
        conn.execute('DROP RULE "Quiet" ON audit_repairs')
    with _postgres(postgres_url) as store:
        log = AuditLog(store, KEY, ORIGIN)
        assert log.unprotected() == ()
        log.checkpoint()
        assert len(log.checkpoints()) == 2
