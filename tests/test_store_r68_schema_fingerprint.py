"""The whole schema a fresh store gets, against the one recorded for ``SCHEMA_VERSION``
(``tests/schema/vN.DIALECT.txt``), on a real SQLite file and the session's real PostgreSQL server:
a part's DDL changed without raising ``SCHEMA_VERSION`` (and deciding ``OLDEST_WRITER``) fails
here, saying what to do (docs/operations.md, Upgrading, "Rolling upgrades").

To record the layout of a new version: ``AGENTGATE_RECORD_SCHEMA=1 pytest
tests/test_store_r68_schema_fingerprint.py`` writes the file of the current ``SCHEMA_VERSION``
for each dialect it runs (and skips); review its diff against the previous version's and commit it.
``v1.*`` was recorded by the code of main at ca7a6bb2 (schema version 1, before ``newest``).
"""

from __future__ import annotations

import difflib
import importlib
import io
import os
import pkgutil
import re
import sqlite3
from contextlib import redirect_stdout
from pathlib import Path

import psycopg
import pytest

import agentgate.store
from agentgate.cli.main import main
from agentgate.store._sqlite import tables_of
from agentgate.store._version import SCHEMA_VERSION

RECORDED = Path(__file__).parent / "schema"
RECORDED_ON = 15
"""The major version of the PostgreSQL server the ``*.postgresql.txt`` layouts were recorded on."""


def _one_line(sql: str) -> str:
    return " ".join(sql.split())


def _sqlite_schema(path: str) -> str:
    """Every table, index, trigger and view of the SQLite file, as SQLite keeps its DDL."""
    conn = sqlite3.connect(path)
    try:
        rows = conn.execute(
            "SELECT type, name, tbl_name, sql FROM sqlite_master WHERE sql IS NOT NULL ORDER BY type, name"
        ).fetchall()
    finally:
        conn.close()
    return "".join(f"{kind} {name} ON {table}: {_one_line(sql)}\n" for kind, name, table, sql in rows)


_PG_CATALOG = {
    "column": (
        "SELECT table_name, column_name, data_type, is_nullable, coalesce(column_default, '') "
        "FROM information_schema.columns WHERE table_schema = 'public' ORDER BY table_name, ordinal_position"
    ),
    "constraint": (
        "SELECT conrelid::regclass::text, conname, pg_get_constraintdef(oid) FROM pg_constraint "
        "WHERE connamespace = 'public'::regnamespace ORDER BY 1, 2"
    ),
    "index": "SELECT tablename, indexname, indexdef FROM pg_indexes WHERE schemaname = 'public' ORDER BY 1, 2",
    "trigger": (
        "SELECT tgrelid::regclass::text, tgname, pg_get_triggerdef(oid) FROM pg_trigger "
        "WHERE NOT tgisinternal AND tgrelid::regclass::text NOT LIKE 'pg_%' ORDER BY 1, 2"
    ),
    "function": (
        "SELECT proname, pg_get_function_identity_arguments(oid), format_type(prorettype, NULL), prosrc "
        "FROM pg_proc WHERE pronamespace = 'public'::regnamespace ORDER BY 1, 2"
    ),
    "sequence": "SELECT sequencename, data_type::text FROM pg_sequences WHERE schemaname = 'public' ORDER BY 1",
    "view": "SELECT viewname, definition FROM pg_views WHERE schemaname = 'public' ORDER BY 1",
}
"""What PostgreSQL's catalog says of every object in the schema ``public`` (the fixture's
database holds agentgate's only): a function by its own text, as agentgate wrote it."""


def _postgresql_schema(url: str) -> str:
    lines = []
    with psycopg.connect(url, autocommit=True) as conn:
        for kind, query in _PG_CATALOG.items():
            for row in conn.execute(query).fetchall():
                lines.append(f"{kind} " + " | ".join(_one_line(str(value)) for value in row) + "\n")
    return "".join(lines)


def _fresh_store(url: str) -> None:
    with redirect_stdout(io.StringIO()):
        assert main(["store", "init", "--store", url]) == 0


def _compare(dialect: str, made: str, server: str = "") -> None:
    """Fail unless ``made`` is the layout recorded for ``SCHEMA_VERSION`` (or record it)."""
    recorded = RECORDED / f"v{SCHEMA_VERSION}.{dialect}.txt"
    if os.environ.get("AGENTGATE_RECORD_SCHEMA"):
        recorded.write_text(made)
        pytest.skip(f"recorded {recorded}")
    if not recorded.exists():
        pytest.fail(
            f"no layout recorded for schema version {SCHEMA_VERSION} ({recorded} is missing): "
            "record it (AGENTGATE_RECORD_SCHEMA=1, this module's docstring) and commit it"
        )
    if made != recorded.read_text():
        pytest.fail(
            f"the {dialect} schema this code makes is not the one recorded for SCHEMA_VERSION "
            f"{SCHEMA_VERSION} ({recorded}): a part's DDL changed without a version. Raise "
            "SCHEMA_VERSION in agentgate/store/_version.py, decide OLDEST_WRITER (kept only where "
            "an agentgate of that version, which knows nothing of the change, still reads and "
            "writes the store correctly: docs/operations.md, Upgrading, 'Rolling upgrades'), then "
            "record the new layout (AGENTGATE_RECORD_SCHEMA=1, this module's docstring). Only for "
            "a version no store has been written by yet (unreleased), record it again instead."
            + server
            + "\n--- recorded\n+++ made\n"
            + _diff(recorded.read_text(), made)
        )


def _diff(old: str, new: str) -> str:
    return "".join(difflib.unified_diff(old.splitlines(True), new.splitlines(True), n=0))


def _every_ddl() -> dict[str, dict[str, str]]:
    """Every part's DDL in ``agentgate.store`` (each module-level dict with a script per dialect)."""
    found: dict[str, dict[str, str]] = {}
    for info in pkgutil.walk_packages(agentgate.store.__path__, "agentgate.store."):
        module = importlib.import_module(info.name)
        for name, value in vars(module).items():
            scripts = (
                value.values() if isinstance(value, dict) and set(value) == {"sqlite", "postgresql"} else ()
            )
            if scripts and all(isinstance(script, str) and "CREATE" in script.upper() for script in scripts):
                found[f"{info.name}.{name}"] = value
    return found


def test_every_part_s_ddl_is_in_the_store_store_init_makes(tmp_path: Path) -> None:
    """Review R68: the fingerprint covers only what ``store init`` makes; every part's DDL must be
    made there, or a part's change would escape it."""
    path = str(tmp_path / "agentgate.db")
    _fresh_store(path)
    conn = sqlite3.connect(path)
    held = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    conn.close()
    ddl = _every_ddl()
    assert len(ddl) >= 10
    missing = {where: sorted(tables_of(scripts["sqlite"]) - held) for where, scripts in ddl.items()}
    assert {where: tables for where, tables in missing.items() if tables} == {}


def test_the_sqlite_schema_is_the_one_recorded_for_this_version(tmp_path: Path) -> None:
    """Review R68: nothing tied a part's DDL to ``SCHEMA_VERSION``: a column could be added or a
    table changed without raising it, and an older agentgate would then open a store it writes
    wrongly. The whole schema a fresh SQLite store gets (``sqlite_master``) must be the one
    recorded for this version."""
    path = str(tmp_path / "agentgate.db")
    _fresh_store(path)
    _compare("sqlite", _sqlite_schema(path))


@pytest.mark.postgres
def test_the_postgresql_schema_is_the_one_recorded_for_this_version(postgres_url: str) -> None:
    """Review R68: as for SQLite, the whole schema a fresh PostgreSQL store gets (columns,
    constraints, indexes, triggers, functions, sequences, views of its catalog)."""
    _fresh_store(postgres_url)
    with psycopg.connect(postgres_url) as conn:
        running = conn.info.server_version // 10000
    server = (
        f" (This server is PostgreSQL {running}; the layouts were recorded on PostgreSQL "
        f"{RECORDED_ON}: one of another major version may word a constraint, index or trigger "
        "differently, which is no DDL change: record the layout again there and compare.)"
    )
    _compare("postgresql", _postgresql_schema(postgres_url), "" if running == RECORDED_ON else server)


def test_no_layout_is_recorded_for_a_version_above_this_one() -> None:
    """Review R68: a layout recorded for a version this code is not (yet) is a bump half done."""
    versions = {
        int(m.group(1)) for p in RECORDED.iterdir() if (m := re.fullmatch(r"v(\d+)\.\w+\.txt", p.name))
    }
    assert versions and max(versions) == SCHEMA_VERSION
