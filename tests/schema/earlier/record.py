"""Record the schema an earlier agentgate made, as ``tests/test_store_r69_schema_upgrade.py`` replays it.

Usage, from the project root (needs git, and PostgreSQL's initdb, pg_ctl and pg_dump)::

    PYTHONPATH=$PWD .venv/bin/python tests/schema/earlier/record.py COMMIT

It extracts ``agentgate/`` of ``COMMIT`` into a temporary directory and, in a process that imports
that code only, runs every part's DDL it has (each module-level dict of ``agentgate.store`` with a
script per dialect) through its own ``open_store(...).ensure_schema``, on a new SQLite file and on
a new database of a throwaway PostgreSQL server; then writes what they hold:
``COMMIT.sqlite.sql`` (``sqlite_master``'s statements in the order they were made) and
``COMMIT.postgresql.sql`` (``pg_dump --schema-only``).
"""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import tempfile
from pathlib import Path

from agentgate.store._pgserver import PostgresServer

HERE = Path(__file__).parent

_MAKE = """
import importlib, pkgutil, sys
import agentgate.store as s
assert s.__file__.startswith(sys.argv[2]), s.__file__
from agentgate.store import open_store
found = {}
for info in pkgutil.walk_packages(s.__path__, "agentgate.store."):
    module = importlib.import_module(info.name)
    for name, v in vars(module).items():
        if isinstance(v, dict) and set(v) == {"sqlite", "postgresql"} and all(
            isinstance(x, str) and "CREATE" in x.upper() for x in v.values()
        ):
            found.setdefault(id(v), (name, v))
store = open_store(sys.argv[1])
todo = sorted(found.values(), key=lambda item: item[0])
for _ in range(len(todo) + 1):  # a part whose DDL needs another's tables goes after it
    left = []
    for name, ddl in todo:
        try:
            store.ensure_schema(name, ddl)
        except Exception:
            left.append((name, ddl))
    todo = left
assert not todo, [name for name, _ in todo]
store.close()
"""


def _make(tree: Path, url: str) -> None:
    subprocess.run(
        [sys.executable, "-c", _MAKE, url, str(tree)], check=True, env={"PYTHONPATH": str(tree)}, cwd=tree
    )


def main(commit: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        tree = Path(tmp) / "tree"
        tree.mkdir()
        archive = subprocess.run(["git", "archive", commit, "agentgate"], check=True, capture_output=True)
        subprocess.run(["tar", "-x", "-C", str(tree)], input=archive.stdout, check=True)
        path = Path(tmp) / "earlier.db"
        _make(tree, str(path))
        conn = sqlite3.connect(path)
        rows = conn.execute(
            "SELECT sql FROM sqlite_master WHERE sql IS NOT NULL AND name NOT LIKE 'sqlite_%' ORDER BY rowid"
        ).fetchall()
        conn.close()
        (HERE / f"{commit}.sqlite.sql").write_text("".join(f"{sql};\n" for (sql,) in rows))
        server = PostgresServer(fsync=False)
        server.init()
        server.start()
        try:
            url = server.create_database()
            _make(tree, url)
            dump = subprocess.run(
                [*server.as_user, "pg_dump", "--schema-only", "--no-owner", "--no-privileges", url],
                check=True,
                capture_output=True,
                text=True,
            ).stdout
            dump = "".join(line for line in dump.splitlines(True) if not line.startswith("\\"))
        finally:
            server.destroy()
        (HERE / f"{commit}.postgresql.sql").write_text(dump)


if __name__ == "__main__":
    main(sys.argv[1])
