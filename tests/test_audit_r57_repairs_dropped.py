"""A dropped record of repairs is seen, not made again empty.

Until review R57 the owner of the store could DROP ``audit_repairs`` (its triggers go with it):
``audit verify`` found no table and said nothing of the repairs it held, and the next writer's
opening made it again empty, as for a store of an earlier release, so the evidence of a repair
was erased. Rules checked here: ``agentgate_store_parts`` records ``audit_repairs`` as made in the
transaction that makes it; where that record is there and the table is not, ``verify`` reports
it (TAMPERED) and a writer's opening refuses (``LogDropped``) and makes nothing, as for a dropped
log; a store without the record (an earlier release) opens, verifies and gets both.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import psycopg
import pytest
from test_audit_r57_repairs import ENTRY, KEY, ORIGIN, _postgres, _run, as_made_before_the_record_of_repairs

from agentgate.errors import LogDropped
from agentgate.keys import PublicKey
from agentgate.store import SQLiteStore, Store
from agentgate.store.audit import AuditLog, open_log_key

DROPPED = "the record of repairs was dropped from this store: its table audit_repairs is missing"


def _parts(store: Store) -> list[str]:
    return sorted(str(row[0]) for row in store.query("SELECT part FROM agentgate_store_parts"))


def _held(store: Store) -> bool:
    """Whether ``audit_repairs`` is a table of the store (as the store's statements find it)."""
    from agentgate.store.audit._schema import _tables_held

    return "audit_repairs" in _tables_held(store, ("audit_repairs",))


def _assert_reported_and_refused(store: Store, public_key: PublicKey) -> None:
    (line,) = AuditLog(store, public_key, ORIGIN, create=False).unprotected()
    assert line.startswith(DROPPED)
    assert "restore from a backup and verify against the checkpoint saved outside it" in line
    with pytest.raises(LogDropped, match=f"{DROPPED}.*nothing was created in its place"):
        AuditLog(store, KEY, ORIGIN)
    assert not _held(store)  # not made again empty


def test_a_new_log_records_its_record_of_repairs_as_made(tmp_path: Path) -> None:
    """Review R57: agentgate_store_parts did not record audit_repairs as made, so its drop could not be told."""
    with SQLiteStore(tmp_path / "agentgate.db") as store:
        AuditLog(store, KEY, ORIGIN)
        assert _parts(store) == ["audit_log", "audit_repairs"]


def test_a_dropped_record_of_repairs_is_reported_and_not_made_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R57: a dropped audit_repairs verified as intact and the next writer made it again empty, erasing the repairs."""
    db = tmp_path / "agentgate.db"
    with SQLiteStore(db) as store:
        log = AuditLog(store, open_log_key(store, create=True), ORIGIN)
        log.append_many([ENTRY] * 2)
        log.checkpoint()
    raw = sqlite3.connect(db)
    raw.execute("DROP TABLE audit_repairs")
    raw.commit()
    raw.close()
    with SQLiteStore(db) as store:
        _assert_reported_and_refused(store, open_log_key(store).public)
    monkeypatch.setattr("agentgate.cli.main.GROUPS", ("agentgate.cli.audit", "agentgate.cli.store"))
    monkeypatch.setenv("AGENTGATE_LOG_ORIGIN", ORIGIN)
    monkeypatch.delenv("AGENTGATE_LOG_PREVIOUS_KEYS", raising=False)
    monkeypatch.delenv("AGENTGATE_LOG_KEY", raising=False)
    monkeypatch.setenv("AGENTGATE_STORE", str(db))
    capsys.readouterr()
    assert _run(["audit", "verify"]) == 1
    out = capsys.readouterr().out
    assert out.startswith("TAMPERED: 1 problem(s)\n") and DROPPED in out
    with SQLiteStore(db) as store:
        assert not _held(store)  # the verb that only reads wrote nothing


def test_a_store_made_before_the_record_opens_and_gets_it(tmp_path: Path) -> None:
    """Review R57: a store of an earlier release (no audit_repairs, no record of it) cannot tell, and is no false alarm."""
    db = tmp_path / "agentgate.db"
    with SQLiteStore(db) as store:
        AuditLog(store, KEY, ORIGIN).append_many([ENTRY] * 2)
    as_made_before_the_record_of_repairs(db)
    with SQLiteStore(db) as store:
        assert AuditLog(store, KEY.public, ORIGIN, create=False).verify().ok
        assert _parts(store) == ["audit_log"]  # the reader wrote nothing
    with SQLiteStore(db) as store:
        log = AuditLog(store, KEY, ORIGIN)
        assert _held(store) and _parts(store) == ["audit_log", "audit_repairs"]
        assert log.verify().ok


@pytest.mark.postgres
def test_a_dropped_postgresql_record_of_repairs_is_reported_and_not_made_again(postgres_url: str) -> None:
    """Review R57: a dropped PostgreSQL audit_repairs verified as intact and the next writer made it again empty."""
    with _postgres(postgres_url) as store:
        log = AuditLog(store, KEY, ORIGIN)
        log.append_many([ENTRY] * 2)
        log.checkpoint()
        assert _parts(store) == ["audit_log", "audit_repairs"]
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute("DROP TABLE audit_repairs")
    with _postgres(postgres_url) as store:
        _assert_reported_and_refused(store, KEY.public)
