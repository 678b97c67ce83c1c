"""The store's schema version of review R68 (``agentgate.store._version``): beside the schema
version of the newest agentgate that wrote a store, the oldest one that may still open it, so that
a release whose change an older agentgate may write alongside (a new table, a nullable column)
does not lock that agentgate out; on real SQLite files and the session's real PostgreSQL server."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
from test_store_postgresql_operations import _docs_grants, _role_url
from test_store_r67_schema_version import _raw

from agentgate.cli.main import main
from agentgate.errors import MalformedRow, NewerStore
from agentgate.store import _version, open_store
from agentgate.store.grants import GrantRepository

S = _version.SCHEMA_VERSION


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return str(tmp_path / "agentgate.db")
    return str(request.getfixturevalue("postgres_url"))


def _as_release(monkeypatch: pytest.MonkeyPatch, version: int, oldest_writer: int) -> None:
    """This process from now on runs as the agentgate of schema ``version`` whose changes code of
    ``oldest_writer`` may write alongside (what a release sets the two constants to)."""
    monkeypatch.setattr(_version, "SCHEMA_VERSION", version)
    monkeypatch.setattr(_version, "OLDEST_WRITER", oldest_writer, raising=False)


def _row(url: str) -> list[tuple[Any, ...]]:
    return _raw(url, "SELECT id, version, newest FROM agentgate_schema")


def _everything(url: str) -> list[tuple[Any, ...]]:
    """Every agentgate table with its row count, and the version row: what a write would change."""
    if url.startswith("postgresql://"):
        tables = [r[0] for r in _raw(url, "SELECT tablename FROM pg_tables WHERE schemaname = 'public'")]
    else:
        tables = [r[0] for r in _raw(url, "SELECT name FROM sqlite_master WHERE type = 'table'")]
    counts = [(t, _raw(url, f'SELECT count(*) FROM "{t}"')[0][0]) for t in sorted(tables)]
    return [*counts, *_raw(url, "SELECT * FROM agentgate_schema")]


def test_a_release_an_older_agentgate_may_write_alongside_does_not_lock_it_out(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Review R68: the row held one number, the newest schema version that wrote the store, and
    every agentgate below it was refused: the first release to raise it, even for a new table an
    older process never touches, locked every older process out at once (no rolling upgrade).
    The row now also holds the oldest version that may open the store; an older agentgate at or
    above it opens the store, to write and to read only, and does not lower the row."""
    _as_release(monkeypatch, S + 1, S)
    assert main(["store", "init", "--store", url]) == 0
    _as_release(monkeypatch, S, S)
    with open_store(url, create=False) as store:
        assert GrantRepository(store).revoke("g1", now=1, reason="r68") is True
    with open_store(url, create=False, read_only=True) as store:
        assert GrantRepository(store).revoked(["g1"]) == {"g1"}
    assert _row(url) == [(1, S, S + 1)]


def test_a_release_an_older_agentgate_may_not_write_alongside_refuses_it(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Review R68: a release whose change an older agentgate would read or write wrongly raises the
    oldest writer to itself: that older agentgate is refused, to write and to read only, with
    nothing written, naming the version it needs; the refusal outlives a later write by the
    release that allows it (the row never goes down)."""
    _as_release(monkeypatch, S + 1, S + 1)
    assert main(["store", "init", "--store", url]) == 0
    _as_release(monkeypatch, S + 2, S)  # a later release: does not lower the floor it finds
    with open_store(url, create=False) as store:
        GrantRepository(store).close()
    assert _row(url) == [(1, S + 1, S + 2)]
    before = _everything(url)
    _as_release(monkeypatch, S, S)
    for read_only in (False, True):
        with pytest.raises(NewerStore) as refused:
            open_store(url, create=False, read_only=read_only).close()
        said = str(refused.value)
        assert f"schema version {S + 2}" in said
        assert f"upgrade agentgate to schema version {S + 1} or later" in said
        assert f"knows version {S} and older" in said
        assert (refused.value.recorded, refused.value.oldest_writer, refused.value.known) == (
            S + 2,
            S + 1,
            S,
        )
    assert _everything(url) == before


def test_this_code_records_the_oldest_writer_and_its_own_version(url: str) -> None:
    """Review R68: ``store init`` records ``version`` (the oldest schema version that may open the
    store: this code's ``OLDEST_WRITER``) and ``newest`` (this code's ``SCHEMA_VERSION``)."""
    assert main(["store", "init", "--store", url]) == 0
    assert _row(url) == [(1, _version.OLDEST_WRITER, S)]
    with open_store(url, create=False) as store:
        assert store.schema == _version.SchemaRecord(_version.OLDEST_WRITER, S)
        assert store.schema_version == S


def _v1_open(url: str) -> bool:
    """What agentgate of schema version 1 (``agentgate/store/_version.py`` at commit ca7a6bb2, the
    release before this one) does with the row as it opens a store and as it makes a part's
    tables, statement for statement: whether it lets itself in. It reads ``version`` alone."""
    exists = "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'agentgate_schema'"
    if url.startswith("postgresql://"):
        exists = "SELECT 1 WHERE to_regclass('agentgate_schema') IS NOT NULL"
    if not _raw(url, exists):
        return True
    rows = _raw(url, "SELECT version FROM agentgate_schema WHERE id = 1")
    recorded = rows[0][0] if rows else None
    if recorded is not None and recorded > 1:
        return False  # NewerStore
    if recorded != 1:
        _raw(
            url,
            "INSERT INTO agentgate_schema (id, version) VALUES (1, 1) "
            "ON CONFLICT (id) DO UPDATE SET version = excluded.version",
        )
    return True


def test_the_agentgate_in_the_field_opens_and_writes_a_store_this_one_made(url: str) -> None:
    """Review R68: this code adds ``newest`` to ``agentgate_schema`` (schema version 2), which
    schema version 1 does not know. Version 1 reads ``version`` alone and refuses the store when
    it is above 1; this code keeps there the oldest writer, 1, so version 1 still opens and
    writes a store this code made (no lock-out for this change) and changes nothing in the row."""
    assert main(["store", "init", "--store", url]) == 0
    assert _v1_open(url) is True
    assert _row(url) == [(1, 1, S)]


def test_a_row_of_schema_version_1_is_read_and_raised(url: str) -> None:
    """Review R68: a store version 1 made has ``agentgate_schema (id, version)`` without ``newest``:
    read as ``version`` for both numbers (to read only, nothing written), and its next writer adds
    the column and records this code's numbers in the transaction of a part's tables."""
    assert main(["store", "init", "--store", url]) == 0
    _raw(url, "DROP TABLE agentgate_schema")
    _raw(
        url, "CREATE TABLE agentgate_schema (id INTEGER PRIMARY KEY CHECK (id = 1), version INTEGER NOT NULL)"
    )
    if url.startswith("postgresql://"):
        _raw(url, "GRANT SELECT ON agentgate_schema TO PUBLIC")
    _raw(url, "INSERT INTO agentgate_schema (id, version) VALUES (1, 1)")
    with open_store(url, create=False, read_only=True) as store:
        assert store.schema == _version.SchemaRecord(1, 1)
        assert GrantRepository(store).revoked(["g1"]) == set()
    assert _raw(url, "SELECT * FROM agentgate_schema") == [(1, 1)]
    with open_store(url, create=False) as store:
        assert store.schema == _version.SchemaRecord(1, 1)
        assert GrantRepository(store).revoke("g1", now=1, reason="r68") is True
    assert _row(url) == [(1, _version.OLDEST_WRITER, S)]


@pytest.mark.parametrize("garbage", ["'abc'", "1.5", "0"])
def test_a_newest_edited_by_hand_is_refused_naming_it(url: str, garbage: str) -> None:
    """Review R68: ``newest`` that is not null nor a whole number of at least 1 (text, a fraction,
    0: edited by hand) is a ``MalformedRow`` naming the column and
    the value as the store opens, before anything is written."""
    assert main(["store", "init", "--store", url]) == 0
    if url.startswith("postgresql://"):  # its INTEGER column holds neither: the column edited too
        kind = "text" if garbage.startswith("'") else "double precision"
        _raw(url, f"ALTER TABLE agentgate_schema ALTER COLUMN newest TYPE {kind}")
    _raw(url, f"UPDATE agentgate_schema SET newest = {garbage}")
    before = _everything(url)
    with pytest.raises(MalformedRow, match="agentgate_schema: its newest holds") as refused:
        open_store(url, create=False).close()
    assert garbage.strip("'") in str(refused.value)
    assert _everything(url) == before


@pytest.mark.postgres
def test_the_application_role_starts_on_a_row_of_version_1_and_the_owner_raises_it(
    postgres_server: Any,
) -> None:
    """Review R68: on a store whose row version 1 wrote, the application role of
    docs/operations.md (no right to alter ``agentgate_schema``) must start all the same: adding
    ``newest`` is the owner's, whose ``store init`` then records both numbers."""
    url = postgres_server.create_database()
    role = "r68_" + uuid.uuid4().hex[:8]
    assert main(["store", "init", "--store", url]) == 0
    _raw(
        url,
        "ALTER TABLE agentgate_schema DROP COLUMN newest",
        "UPDATE agentgate_schema SET version = 1",
        f"CREATE ROLE {role} LOGIN",
        "REVOKE CREATE ON SCHEMA public FROM PUBLIC",
        *_docs_grants(role),
    )
    with open_store(_role_url(url, postgres_server, role), create=False) as app:
        assert app.schema == _version.SchemaRecord(1, 1)
        repo = GrantRepository(app)
        assert repo.revoke("g1", now=1, reason="r68") is True
        repo.close()
    assert _raw(url, "SELECT * FROM agentgate_schema") == [(1, 1)]
    assert main(["store", "init", "--store", url]) == 0
    assert _row(url) == [(1, _version.OLDEST_WRITER, S)]
