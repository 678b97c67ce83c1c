"""A store made by an earlier agentgate and opened by this one ends with the schema a fresh store
gets: the same columns (type, nullability, default, key), constraints, indexes, triggers and
functions, on a real SQLite file and the session's real PostgreSQL server.

``tests/test_store_r68_schema_fingerprint.py`` checks the DDL a fresh store is made with; the
statements that only an upgrade runs (``ALTER TABLE ... ADD COLUMN``, a part's ``IF NOT EXISTS``
keeping an earlier table) escape it. Here the schema an earlier version made is replayed from
``tests/schema/earlier/COMMIT.DIALECT.sql`` (recorded from that commit's own code by
``tests/schema/earlier/record.py``), ``agentgate store init`` of this code upgrades it, and what
it holds is compared with a fresh store's, object by object. Column order is not compared (an
added column comes last; agentgate names every column it reads or writes).

The earlier states: 896aa7a8 (2026-11-29 16:18, the first with every part agentgate then had: the
oldest store there is) and ca7a6bb2 (2026-12-05, schema version 1, ``tests/schema/v1.*``).
"""

from __future__ import annotations

import io
import re
import sqlite3
import time
from contextlib import redirect_stdout
from pathlib import Path
from typing import Any

import psycopg
import pytest

from agentgate.cli.main import main
from agentgate.store import open_store
from agentgate.store.approvals import ApprovalStore

EARLIER = Path(__file__).parent / "schema" / "earlier"

KEPT: dict[tuple[str, str], set[str]] = {
    ("896aa7a8", "sqlite"): {
        # The nonce table keyed (principal, nonce), before review R29 (2026-11-29 17:05): kept and
        # still refuses a replay (tests/test_store_upgrade_earlier_forms.py).
        "table agentgate_nonces",
        "index agentgate_nonces_expires",
        # The reservations before WITHOUT ROWID (2026-11-29 19:12, commit 6696a8f): kept
        # (tests/test_store_upgrade_nesting_and_rowids.py).
        "table budget_reservations",
    },
    ("896aa7a8", "postgresql"): {
        "constraint agentgate_nonces agentgate_nonces_pkey",
        "index agentgate_nonces agentgate_nonces_expires",
        "index agentgate_nonces agentgate_nonces_pkey",
    },
}
"""Per earlier state and dialect, the objects an upgrade deliberately leaves in their earlier form
(this code reads and writes them as they are, each shown by the test named); any other difference
from a fresh store fails."""

COMMITS = ("896aa7a8", "ca7a6bb2")


def _init(url: str) -> None:
    with redirect_stdout(io.StringIO()):
        assert main(["store", "init", "--store", url]) == 0


def _one_line(sql: str) -> str:
    return re.sub(r"\s*([(),;])\s*", r"\1", " ".join(sql.split()))


def _checks(sql: str) -> list[str]:
    """The ``CHECK (...)`` clauses of a ``CREATE TABLE`` statement, sorted."""
    found = []
    for match in re.finditer(r"\bCHECK\s*\(", sql, re.IGNORECASE):
        depth, end = 0, match.end() - 1
        for end in range(match.end() - 1, len(sql)):
            depth += {"(": 1, ")": -1}.get(sql[end], 0)
            if depth == 0:
                break
        found.append(_one_line(sql[match.start() : end + 1]))
    return sorted(found)


def _sqlite_layout(path: Path) -> dict[str, Any]:
    """Each table (columns by name, key, checks, foreign keys, indexes incl. implicit ones,
    rowid or not), explicit index, trigger and view of the SQLite file."""
    conn = sqlite3.connect(path)
    try:
        layout: dict[str, Any] = {}
        rows = conn.execute(
            "SELECT type, name, sql FROM sqlite_master WHERE sql IS NOT NULL AND name NOT LIKE 'sqlite_%'"
        ).fetchall()
        for kind, name, sql in rows:
            if kind != "table":
                layout[f"{kind} {name}"] = _one_line(sql)
                continue
            indexes = []
            for _, index, unique, origin, partial in conn.execute(f'PRAGMA index_list("{name}")'):
                columns = [row[2] for row in conn.execute(f'PRAGMA index_info("{index}")')]
                indexes.append((unique, origin, partial, columns))
            layout[f"table {name}"] = {
                "columns": sorted(row[1:] for row in conn.execute(f'PRAGMA table_info("{name}")')),
                "checks": _checks(sql),
                "foreign keys": sorted(row[2:] for row in conn.execute(f'PRAGMA foreign_key_list("{name}")')),
                "indexes": sorted(indexes),
                "without rowid": _one_line(sql).upper().endswith("WITHOUT ROWID"),
            }
        return layout
    finally:
        conn.close()


_PG_CATALOG = {
    "column": (
        "SELECT table_name, column_name, data_type || ' nullable ' || is_nullable || ' default ' "
        "|| coalesce(column_default, '') FROM information_schema.columns WHERE table_schema = 'public'"
    ),
    "constraint": (
        "SELECT conrelid::regclass::text, conname, pg_get_constraintdef(oid) FROM pg_constraint "
        "WHERE connamespace = 'public'::regnamespace"
    ),
    "index": "SELECT tablename, indexname, indexdef FROM pg_indexes WHERE schemaname = 'public'",
    "trigger": (
        "SELECT tgrelid::regclass::text, tgname, pg_get_triggerdef(oid) || ' enabled ' || tgenabled::text "
        "FROM pg_trigger WHERE NOT tgisinternal AND tgrelid::regclass::text NOT LIKE 'pg_%'"
    ),
    "function": (
        "SELECT proname, pg_get_function_identity_arguments(oid), "
        "format_type(prorettype, NULL) || ': ' || prosrc FROM pg_proc "
        "WHERE pronamespace = 'public'::regnamespace"
    ),
    "sequence": "SELECT sequencename, '', data_type::text FROM pg_sequences WHERE schemaname = 'public'",
    "view": "SELECT viewname, '', definition FROM pg_views WHERE schemaname = 'public'",
}
"""What PostgreSQL's catalog says of each object of the schema ``public``: ``(where, name, what)``."""


def _postgresql_layout(url: str) -> dict[str, str]:
    layout = {}
    with psycopg.connect(url, autocommit=True) as conn:
        for kind, query in _PG_CATALOG.items():
            for where, name, what in conn.execute(query).fetchall():
                layout[f"{kind} {where} {name}".rstrip()] = " ".join(str(what).split())
    return layout


def _differences(upgraded: dict[str, Any], fresh: dict[str, Any]) -> dict[str, tuple[Any, Any]]:
    return {
        key: (upgraded.get(key), fresh.get(key))
        for key in sorted(set(upgraded) | set(fresh))
        if upgraded.get(key) != fresh.get(key)
    }


def _unexpected(commit: str, dialect: str, differences: dict[str, tuple[Any, Any]]) -> str:
    kept = KEPT.get((commit, dialect), set())
    return "".join(
        f"\n{key}:\n  upgraded: {upgraded}\n  fresh:    {fresh}"
        for key, (upgraded, fresh) in differences.items()
        if key not in kept
    )


def _earlier_store(tmp_path: Path, postgres: Any, dialect: str, commit: str, rows: str = "") -> str:
    """A store holding the schema ``commit`` made and ``rows`` (statements), upgraded by ``store
    init``; its URL."""
    script = (EARLIER / f"{commit}.{dialect}.sql").read_text()
    if dialect == "sqlite":
        url = str(tmp_path / "earlier.db")
        conn = sqlite3.connect(url)
        conn.executescript(script + rows)
        conn.close()
    else:
        url = postgres.create_database()
        for statements in (script, rows):  # pg_dump's script empties the session's search_path
            with psycopg.connect(url, autocommit=True) as pg:
                pg.execute(statements or "SELECT 1")
    _init(url)
    return url


@pytest.mark.parametrize("commit", COMMITS)
def test_a_sqlite_store_of_an_earlier_version_upgrades_to_the_schema_of_a_fresh_one(
    tmp_path: Path, commit: str
) -> None:
    """Review R69: the fingerprint covered a fresh store only, so a store an earlier version made
    could end, once upgraded, with another schema than a fresh one and nothing would say so (the
    approvals table of 896aa7a8 kept no ``quorum`` column, which every approval request writes)."""
    earlier = _earlier_store(tmp_path, None, "sqlite", commit)
    _init(str(tmp_path / "fresh.db"))
    differences = _differences(_sqlite_layout(Path(earlier)), _sqlite_layout(tmp_path / "fresh.db"))
    assert _unexpected(commit, "sqlite", differences) == ""
    assert set(differences) == KEPT.get((commit, "sqlite"), set())


@pytest.mark.postgres
@pytest.mark.parametrize("commit", COMMITS)
def test_a_postgresql_store_of_an_earlier_version_upgrades_to_the_schema_of_a_fresh_one(
    tmp_path: Path, postgres_server: Any, commit: str
) -> None:
    """Review R69: as for SQLite, on PostgreSQL (its catalog: columns, constraints, indexes,
    triggers and whether they fire, functions by their text, sequences, views)."""
    earlier, fresh = (
        _earlier_store(tmp_path, postgres_server, "postgresql", commit),
        postgres_server.create_database(),
    )
    _init(fresh)
    differences = _differences(_postgresql_layout(earlier), _postgresql_layout(fresh))
    assert _unexpected(commit, "postgresql", differences) == ""
    assert set(differences) == KEPT.get((commit, "postgresql"), set())


@pytest.mark.parametrize("dialect", ["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def test_an_approval_of_a_quorum_is_asked_and_used_on_a_store_of_the_first_approvals_table(
    tmp_path: Path, request: pytest.FixtureRequest, dialect: str
) -> None:
    """Review R69: a store made before the approvals table had ``quorum`` (896aa7a8, 2026-11-29
    16:18; the column came at 17:27, commit 843da025, in the ``CREATE TABLE IF NOT EXISTS`` only)
    kept its table without the column after ``store init``, and every approval request failed
    (``StoreError``: table approvals has no column named quorum). Its requests, asked before the
    upgrade, need one approver, as that version's did."""
    postgres = request.getfixturevalue("postgres_server") if dialect == "postgresql" else None
    asked_before = (
        "INSERT INTO approvals (id, call_hash, requester, state, created, expires_at) "
        f"VALUES ('earlier', 'sha256:c', 'did:key:zAgent', 'pending', 1.0, {time.time() + 600});"
    )
    url = _earlier_store(tmp_path, postgres, dialect, "896aa7a8", asked_before)
    with open_store(url) as store:
        approvals = ApprovalStore(store)
        asked = approvals.request("sha256:call", "did:key:zAgent", time.time() + 600, quorum=2)
        approvals.approve(asked, "did:key:zHuman1", call_hash="sha256:call")
        assert approvals.get(asked).state == "pending"
        approvals.approve(asked, "did:key:zHuman2", call_hash="sha256:call")
        assert approvals.consume(asked, "sha256:call") == ("did:key:zHuman1", "did:key:zHuman2")
        assert approvals.get("earlier").quorum == 1
        approvals.approve("earlier", "did:key:zHuman1", call_hash="sha256:c")
        assert approvals.consume("earlier", "sha256:c") == ("did:key:zHuman1",)
