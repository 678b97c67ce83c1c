"""A writer's opening as the owner enables a disabled ``audit_log_index_ref`` and indexes what it missed.

Until review R59 a PostgreSQL ``audit_log_index_ref`` disabled by its table's owner (``ALTER TABLE
audit_log DISABLE TRIGGER``, or ``ENABLE REPLICA``, which fires in replica sessions only) stayed
disabled whoever opened the log, while a dropped one was put back: entries appended meanwhile were
left out of the reference index, ``explain`` read the index as complete, and ``verify`` kept
reporting the trigger until someone ran ``ALTER TABLE ... ENABLE TRIGGER`` by hand. Rules checked
here: the owner's opening enables it as ``CREATE TRIGGER`` makes it (``tgenabled`` O, not ALWAYS:
a logical-replication subscriber's apply worker must not fire it), indexes the entries appended
while it was disabled, and records no repair (it refuses nothing, like a dropped one put back).
"""

from __future__ import annotations

import psycopg
import pytest
from test_audit_r57_repairs import ENTRY, KEY, ORIGIN, _postgres

from agentgate.store.audit import AuditLog

pytestmark = pytest.mark.postgres

OUTCOME = {"kind": "outcome", "principal": "did:key:zA", "resource": "tool:t", "ref": 0, "status": "ok"}


@pytest.mark.parametrize("how", ["DISABLE", "ENABLE REPLICA"])
def test_a_disabled_index_trigger_is_enabled_and_the_entries_it_missed_indexed(
    postgres_url: str, how: str
) -> None:
    """Review R59: a disabled audit_log_index_ref was left disabled by every writer's opening, the owner's too."""
    with _postgres(postgres_url) as store:
        log = AuditLog(store, KEY, ORIGIN)
        log.append(ENTRY)
        log.checkpoint()
        with psycopg.connect(postgres_url, autocommit=True) as conn:
            conn.execute(f"ALTER TABLE audit_log {how} TRIGGER audit_log_index_ref")  # type: ignore[arg-type]
        log.append(OUTCOME)  # appended while it is disabled: not indexed
    with _postgres(postgres_url) as store:
        assert AuditLog(store, KEY, ORIGIN, create=False).unprotected()  # verify names it ...
    with _postgres(postgres_url) as store:
        log = AuditLog(store, KEY, ORIGIN)  # ... and the owner's opening enables it
        assert log.unprotected() == ()
        assert log.verify().ok  # the index holds the entry appended meanwhile
        log.append(OUTCOME)
        assert sorted(store.query("SELECT idx, ref FROM audit_refs")) == [(1, 0), (2, 0)]
        assert store.query("SELECT COUNT(*) FROM audit_repairs")[0][0] == 0  # no repair recorded
    with psycopg.connect(postgres_url) as conn:
        (state,) = conn.execute(
            "SELECT tgenabled FROM pg_trigger WHERE tgname = 'audit_log_index_ref'"
        ).fetchone() or ("",)
    assert state == "O"
