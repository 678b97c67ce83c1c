"""The store's schema version (``agentgate_schema``, ``agentgate.store._version``), on real SQLite
files and the session's real PostgreSQL server: recorded with the tables, a store of a newer
agentgate refused before anything is written, a store made before the record adopted, the
application role of docs/operations.md still served, and no statement more on a decision."""

from __future__ import annotations

import sqlite3
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from test_audit_reconciliation import _keys, _policy_text
from test_store_postgresql_operations import _docs_grants, _role_url

from agentgate.capabilities import Call
from agentgate.cli.main import main
from agentgate.errors import MalformedRow, NewerStore, StoreError
from agentgate.gate import Gate
from agentgate.policy import parse_policy
from agentgate.store import open_store
from agentgate.store._version import OLDEST_WRITER, SCHEMA_VERSION
from agentgate.store.grants import GrantRepository


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return str(tmp_path / "agentgate.db")
    return str(request.getfixturevalue("postgres_url"))


def _raw(url: str, *statements: str) -> list[tuple[Any, ...]]:
    """Run ``statements`` on the store outside agentgate (what another version, or an operator,
    does to it); the rows of the last."""
    rows: list[tuple[Any, ...]] = []
    if url.startswith("postgresql://"):
        with psycopg.connect(url, autocommit=True) as conn:
            for statement in statements:
                cursor = conn.execute(statement)
                rows = list(cursor.fetchall()) if cursor.description else []
        return rows
    conn = sqlite3.connect(url, isolation_level=None)
    try:
        for statement in statements:
            rows = conn.execute(statement).fetchall()
    finally:
        conn.close()
    return rows


def _contents(url: str) -> list[tuple[Any, ...]]:
    """Every agentgate table with its row count and the version row: what a write would change."""
    if url.startswith("postgresql://"):
        tables = [r[0] for r in _raw(url, "SELECT tablename FROM pg_tables WHERE schemaname = 'public'")]
    else:
        tables = [r[0] for r in _raw(url, "SELECT name FROM sqlite_master WHERE type = 'table'")]
    counts = [(t, _raw(url, f'SELECT count(*) FROM "{t}"')[0][0]) for t in sorted(tables)]
    return [*counts, *_raw(url, "SELECT id, version FROM agentgate_schema")]


def test_a_store_records_the_schema_version_with_its_tables(url: str) -> None:
    """Review R67: there was no schema version anywhere: a store written by a newer agentgate
    was refused only where a statement happened to fail. ``store init`` (and every part's
    tables) now record this version in one row, read as the store opens (since review R68 its
    ``version`` is the oldest schema version that may open the store, ``OLDEST_WRITER``)."""
    assert main(["store", "init", "--store", url]) == 0
    assert _raw(url, "SELECT id, version FROM agentgate_schema") == [(1, OLDEST_WRITER)]
    with open_store(url, create=False) as store:
        assert store.schema_version == SCHEMA_VERSION


@pytest.mark.parametrize("how", ["create", "existing", "read_only"])
def test_a_store_of_a_newer_agentgate_is_refused_before_anything_is_written(url: str, how: str) -> None:
    """Review R67: a store a newer agentgate wrote (a column added, a table changed) was opened and
    written as if it were this version's, and refused only where a statement happened to fail
    (``grant revoke`` on a NOT NULL column it did not know, SQLSTATE 23502). Now opening it,
    to write or to read only, is ``NewerStore`` naming the store, both versions and what to do."""
    assert main(["store", "init", "--store", url]) == 0
    _raw(url, f"UPDATE agentgate_schema SET version = {SCHEMA_VERSION + 1}")
    before = _contents(url)
    with pytest.raises(NewerStore) as refused:
        open_store(url, create=how == "create", read_only=how == "read_only").close()
    said = str(refused.value)
    shown = url if not url.startswith("postgresql://") else url.split("@", 1)[1]
    assert shown in said
    assert f"schema version {SCHEMA_VERSION + 1}" in said
    assert f"knows version {SCHEMA_VERSION}" in said
    assert "upgrade agentgate" in said
    assert (refused.value.recorded, refused.value.known) == (SCHEMA_VERSION + 1, SCHEMA_VERSION)
    assert _contents(url) == before


def test_the_cli_refuses_a_store_of_a_newer_agentgate_in_one_line(
    url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R67: the refusal reaches an operator as the CLI's one-line error, exit 2."""
    assert main(["store", "init", "--store", url]) == 0
    _raw(url, f"UPDATE agentgate_schema SET version = {SCHEMA_VERSION + 1}")
    capsys.readouterr()
    assert main(["store", "init", "--store", url]) == 2
    err = capsys.readouterr().err
    assert "written by a newer agentgate" in err
    assert len(err.strip().splitlines()) == 1


def test_a_part_opened_after_a_newer_agentgate_wrote_the_store_creates_nothing(url: str) -> None:
    """Review R67: a process opened before a newer agentgate wrote the store then created a part's
    tables in it as this version's. The version is read again under the schema lock: refused,
    and the part's tables are not made."""
    with open_store(url) as store:
        _raw(
            url,
            "CREATE TABLE agentgate_schema (id INTEGER PRIMARY KEY, version INTEGER NOT NULL)",
            f"INSERT INTO agentgate_schema VALUES (1, {SCHEMA_VERSION + 1})",
        )
        with pytest.raises(NewerStore):
            GrantRepository(store)
    tables = _contents(url)
    assert ("agentgate_grants", 0) not in tables
    assert (1, SCHEMA_VERSION + 1) in tables


def test_a_store_made_before_the_version_existed_is_adopted(url: str) -> None:
    """Review R67: every store in the field has no version row. Such a store (this version's tables
    without ``agentgate_schema``) is opened, to write and to read only, never refused, and its
    next writer records this version."""
    assert main(["store", "init", "--store", url]) == 0
    _raw(url, "DROP TABLE agentgate_schema")
    with open_store(url, create=False, read_only=True) as store:
        assert store.schema_version is None
        assert GrantRepository(store).revoked(["g1"]) == set()
    with open_store(url, create=False) as store:
        assert store.schema_version is None
        assert GrantRepository(store).revoke("g1", now=1, reason="r67") is True
    assert _raw(url, "SELECT id, version FROM agentgate_schema") == [(1, OLDEST_WRITER)]


@pytest.mark.postgres
def test_the_application_role_of_the_docs_reads_the_version_and_may_not_change_it(
    postgres_server: Any,
) -> None:
    """Review R67: the application role of docs/operations.md (no CREATE on the schema) must start
    on a store made before the version row (it cannot create the table: the owner's ``store
    init`` does), read the version once the owner recorded it, be refused a newer store, and not
    set the version itself (the GRANT block takes that right back)."""
    url = postgres_server.create_database()
    role = "r67_" + uuid.uuid4().hex[:8]
    assert main(["store", "init", "--store", url]) == 0
    _raw(
        url,
        "DROP TABLE agentgate_schema",
        f"CREATE ROLE {role} LOGIN",
        "REVOKE CREATE ON SCHEMA public FROM PUBLIC",
    )
    _raw(url, *[s for s in _docs_grants(role) if "agentgate_schema" not in s])  # the earlier block
    app_url = _role_url(url, postgres_server, role)
    with open_store(app_url, create=False) as app:
        repo = GrantRepository(app)
        assert repo.revoke("g1", now=1, reason="before the owner's store init")
        repo.close()
    assert _raw(url, "SELECT to_regclass('agentgate_schema') IS NULL") == [(True,)]
    assert main(["store", "init", "--store", url]) == 0
    _raw(url, *_docs_grants(role))
    with open_store(app_url, create=False) as app:
        assert app.schema_version == SCHEMA_VERSION
        repo = GrantRepository(app)
        assert repo.revoked(["g1"]) == {"g1"}
        repo.close()
        with pytest.raises(StoreError, match="permission denied"), app.transaction() as tx:
            tx.execute("UPDATE agentgate_schema SET version = 99")
    _raw(url, f"UPDATE agentgate_schema SET version = {SCHEMA_VERSION + 1}")
    with pytest.raises(NewerStore):
        open_store(app_url, create=False).close()


@pytest.fixture
def statements(url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Every SQL statement sent to the store from now on (the real drivers run them all)."""
    sent: list[str] = []
    if url.startswith("postgresql://"):
        for cls in (psycopg.Connection, psycopg.Cursor):
            real = cls.execute

            def execute(self: Any, query: Any, *args: Any, _real: Any = real, **kwargs: Any) -> Any:
                sent.append(str(query))
                return _real(self, query, *args, **kwargs)

            monkeypatch.setattr(cls, "execute", execute)
    else:
        real_connect = sqlite3.connect

        def connect(*args: Any, **kwargs: Any) -> sqlite3.Connection:
            conn = real_connect(*args, **kwargs)
            conn.set_trace_callback(sent.append)
            return conn

        monkeypatch.setattr(sqlite3, "connect", connect)
    yield sent


def test_a_decision_reads_no_schema_version(url: str, statements: list[str]) -> None:
    """Review R67: the version is read once, as the store opens; a decision sends no statement
    about it (the hot path gains no round trip)."""
    store = open_store(url)
    gate = Gate(parse_policy(_policy_text(), source="r67.yaml"), store)
    keys = _keys()
    boss = gate.issue(keys["root"], name="boss", key=keys["boss"], role="boss")
    assert gate.authorize(boss, Call.tool("lookup", {"id": "0"})).verdict == "allow"
    opened = len(statements)
    assert any("agentgate_schema" in s for s in statements[:opened])
    for n in range(3):
        assert gate.authorize(boss, Call.tool("lookup", {"id": str(n + 1)})).verdict == "allow"
    decided = statements[opened:]
    assert decided
    assert not [s for s in decided if "agentgate_schema" in s]
    gate.close()
    store.close()


@pytest.mark.postgres
def test_a_role_granted_no_table_reads_the_version_and_is_refused_a_newer_store(
    postgres_server: Any,
) -> None:
    """Review R67: a role given rights on a few tables only (an audit appender) could not read the
    version row, and every store it opened failed with ``permission denied for table
    agentgate_schema``. The table is made readable by every role, so such a role opens the store
    and is refused a newer one like any other."""
    url = postgres_server.create_database()
    role = "r67_" + uuid.uuid4().hex[:8]
    assert main(["store", "init", "--store", url]) == 0
    _raw(url, f"CREATE ROLE {role} LOGIN")
    role_url = _role_url(url, postgres_server, role)
    with open_store(role_url, create=False) as store:
        assert store.schema_version == SCHEMA_VERSION
    _raw(url, f"UPDATE agentgate_schema SET version = {SCHEMA_VERSION + 1}")
    with pytest.raises(NewerStore):
        open_store(role_url, create=False).close()


@pytest.mark.parametrize("garbage", ["'abc'", "'1.5'", "2.5", "-1"])
def test_a_version_row_edited_by_hand_is_refused_naming_it(url: str, garbage: str) -> None:
    """Review R67 (lead): a version row that is not a whole number of at least 1 (text, a
    fraction, a negative: edited by hand; SQLite keeps text in an INTEGER column) ended in a
    ``ValueError`` traceback from ``int()`` as the store opened, or was taken as a version. It is
    a ``MalformedRow`` naming the table and the value, before anything is written."""
    assert main(["store", "init", "--store", url]) == 0
    if url.startswith("postgresql://"):  # its INTEGER column holds neither: the column edited too
        kind = "text" if garbage.startswith("'") else "double precision"
        _raw(url, f"ALTER TABLE agentgate_schema ALTER COLUMN version TYPE {kind}")
    _raw(url, f"UPDATE agentgate_schema SET version = {garbage}")
    before = _contents(url)
    with pytest.raises(MalformedRow, match="agentgate_schema") as refused:
        open_store(url, create=False).close()
    assert garbage.strip("'") in str(refused.value)
    assert _contents(url) == before
