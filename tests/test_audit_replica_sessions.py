"""``session_replication_role = replica`` skips no protection trigger, and ``audit verify`` reports it.

Until review R57 the PostgreSQL protection triggers were made with CREATE TRIGGER alone, which
fires them in ordinary sessions only: a session whose ``session_replication_role`` is ``replica``
(set by a superuser for itself, or with ``ALTER ROLE|DATABASE ... SET``, kept in
pg_db_role_setting) edited and deleted entries while verify said the triggers were in force.
Rules checked here: a writer makes every protection trigger ENABLE ALWAYS, after which an edit,
a deletion and a TRUNCATE in a replica session are refused; a setting of replica for a role, a
role in a database, every role or the database, and a session's own, is reported by verify
(TAMPERED, exit 1) with the triggers it skips and the ``ALTER ... RESET`` that removes it,
reading the catalog only; with no such setting a log of an earlier release is not reported.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import psycopg
import pytest
from test_audit_read_only import ORIGIN, _catalog, _postgres, _run
from test_audit_trigger_bodies import KEY

from agentgate.store.audit import AuditLog
from agentgate.store.audit._schema import PROTECTION_TRIGGERS

pytestmark = pytest.mark.postgres

REPLICA = "SET session_replication_role = replica"


def _log(url: str) -> None:
    with _postgres(url) as store:
        AuditLog(store, KEY, ORIGIN).append_many([{"kind": "allow", "principal": "did:key:zA"}] * 3)


def _states(url: str) -> dict[str, str]:
    with psycopg.connect(url) as conn:
        rows = conn.execute("SELECT tgname, tgenabled FROM pg_trigger WHERE NOT tgisinternal").fetchall()
    return {str(name): str(state) for name, state in rows}


def _database(url: str) -> str:
    with psycopg.connect(url) as conn:
        return str(conn.execute("SELECT current_database()").fetchall()[0][0])


def _as_before_r57(url: str) -> None:
    """Each protection trigger fires in ordinary sessions only, as earlier releases made them."""
    with psycopg.connect(url, autocommit=True) as conn:
        for name, table, _refuses in PROTECTION_TRIGGERS["postgresql"]:
            conn.execute(f"ALTER TABLE {table} ENABLE TRIGGER {name}")  # type: ignore[arg-type]


@pytest.fixture
def role(postgres_url: str) -> Iterator[str]:
    """A login role of this test's own, dropped (its settings with it) after the test: settings
    are the server's, and a later test's verify on the same server reads them all."""
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        name = f"r57_{_database(postgres_url)}"
        conn.execute(f"CREATE ROLE {name} LOGIN")  # type: ignore[arg-type]
    try:
        yield name
    finally:
        with psycopg.connect(postgres_url, autocommit=True) as conn:
            conn.execute("ALTER ROLE ALL RESET session_replication_role")
            conn.execute(f"DROP ROLE {name}")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "statement",
    [
        "UPDATE audit_log SET entry = entry WHERE idx = 1",
        "DELETE FROM audit_log WHERE idx = 2",
        "TRUNCATE audit_log",
        "UPDATE agentgate_store_parts SET made = made",
    ],
)
def test_an_edit_in_a_replica_session_is_refused(postgres_url: str, statement: str) -> None:
    """Review R57: a session with session_replication_role = replica edited entries past the protection triggers."""
    _log(postgres_url)
    states = _states(postgres_url)
    assert {name: states[name] for name, _t, _r in PROTECTION_TRIGGERS["postgresql"]} == {
        name: "A" for name, _t, _r in PROTECTION_TRIGGERS["postgresql"]
    }
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute(REPLICA)
        with pytest.raises(psycopg.errors.RaiseException, match="append-only"):
            conn.execute(statement)  # type: ignore[arg-type]


def test_a_writer_makes_the_triggers_of_an_earlier_release_fire_always(postgres_url: str) -> None:
    """Review R57: triggers made by an earlier release (ENABLE, not ALWAYS) stayed skippable under replica."""
    _log(postgres_url)
    _as_before_r57(postgres_url)
    with _postgres(postgres_url) as store:
        assert (
            AuditLog(store, KEY.public, ORIGIN, create=False).verify().ok
        )  # no replica setting: not reported
    _log(postgres_url)
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute(REPLICA)
        with pytest.raises(psycopg.errors.RaiseException):
            conn.execute("UPDATE audit_log SET entry = entry WHERE idx = 1")


def test_verify_reports_each_replica_setting_and_writes_nothing(
    postgres_url: str,
    role: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Review R57: verify said intact while ALTER ROLE/DATABASE ... SET session_replication_role = replica let sessions skip the triggers."""
    _log(postgres_url)
    _as_before_r57(postgres_url)
    database = _database(postgres_url)
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute(f"ALTER ROLE {role} SET session_replication_role = replica")  # type: ignore[arg-type]
        conn.execute(f"ALTER ROLE {role} IN DATABASE {database} SET session_replication_role = 'REPLICA'")  # type: ignore[arg-type]
        conn.execute("ALTER ROLE ALL SET session_replication_role TO replica")
        conn.execute(f"ALTER DATABASE {database} SET session_replication_role = replica")  # type: ignore[arg-type]
    with psycopg.connect(postgres_url, autocommit=True) as conn:  # a session under those settings
        conn.execute("UPDATE audit_log SET entry = entry WHERE idx = 1")  # the triggers refuse nothing
    before = _catalog(postgres_url)
    monkeypatch.setattr("agentgate.cli.main.GROUPS", ("agentgate.cli.audit",))
    monkeypatch.setenv("AGENTGATE_LOG_ORIGIN", ORIGIN)
    monkeypatch.setenv("AGENTGATE_STORE", postgres_url)
    capsys.readouterr()
    assert _run(["audit", "verify", "--key", KEY.public.did]) == 1
    out = capsys.readouterr().out
    assert _catalog(postgres_url) == before  # verify wrote nothing
    assert out.startswith("TAMPERED: 4 problem(s)\n")
    for whose, reset in [
        (f"database {database}", f"ALTER DATABASE {database}"),
        ("every role", "ALTER ROLE ALL"),
        (f"role {role}", f"ALTER ROLE {role}"),
        (f"role {role} in database {database}", f"ALTER ROLE {role} IN DATABASE {database}"),
    ]:
        assert (
            f"  - session_replication_role = replica is set for {whose}: the protection trigger(s) "
            "audit_log_next_index on table audit_log, audit_log_append_only on table audit_log" in out
        )
        assert f"`{reset} RESET session_replication_role` run as a superuser removes the setting" in out
    assert (
        "`agentgate store init` run as the store's owner makes the protection triggers fire in every session"
        in out
    )
    # A writer makes them fire always; the settings still skip the index's trigger, and say so.
    with _postgres(postgres_url) as store:
        AuditLog(store, KEY, ORIGIN)
    with _postgres(postgres_url) as store:
        report = AuditLog(store, KEY.public, ORIGIN, create=False).verify()
    assert report.entries_verify and len(report.unprotected) == 4
    assert all("protection trigger" not in line for line in report.unprotected)
    assert all("audit_log_index_ref does not fire there" in line for line in report.unprotected)
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute("ALTER ROLE ALL RESET session_replication_role")
        conn.execute(f"ALTER ROLE {role} RESET session_replication_role")  # type: ignore[arg-type]
        conn.execute(f"ALTER ROLE {role} IN DATABASE {database} RESET session_replication_role")  # type: ignore[arg-type]
        conn.execute(f"ALTER DATABASE {database} RESET session_replication_role")  # type: ignore[arg-type]
    with _postgres(postgres_url) as store:
        assert AuditLog(store, KEY.public, ORIGIN, create=False).verify().ok


def test_verify_reports_its_own_session_in_replica(postgres_url: str) -> None:
    """Review R57: a verify whose own session was in replica (the client's options) did not say so."""
    _log(postgres_url)
    _as_before_r57(postgres_url)
    joiner = "&" if "?" in postgres_url else "?"
    url = f"{postgres_url}{joiner}options={quote('-c session_replication_role=replica')}"
    with _postgres(url) as store:
        report = AuditLog(store, KEY.public, ORIGIN, create=False).verify()
    assert report.entries_verify and len(report.unprotected) == 1
    assert report.unprotected[0].startswith(
        "session_replication_role = replica is set for this session (client): the protection trigger(s) "
        "audit_log_next_index on table audit_log"
    )
