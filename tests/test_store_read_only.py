"""A store opened to read only (``open_store(create=False, read_only=True)``, and every CLI verb
that only reads: ``audit verify``, ``show``, ``explain``, ``report``, ``approval list``, ``tasks
dead-letters`` and ``breakers``, ``broker``'s views, ``grant inspect``'s look at revocations).

Until review R56 these opened the store as a writer does: every SQLite connection ran ``PRAGMA
journal_mode=WAL`` (the header of a copy in rollback-journal mode rewritten), closing the last
one checkpointed a ``-wal`` beside the file into it, and a part whose tables were missing had them
created. An auditor who runs ``agentgate audit verify --store copy.db`` must not change the copy,
and must be able to read a copy it may only read. Rules checked here: the file's bytes (and its
``-wal``'s) identical before and after each read verb, for a file in rollback-journal mode, one in
WAL mode closed cleanly (no ``-wal`` or ``-shm`` left beside it) and one with a ``-wal`` that holds
commits (read, not checkpointed); a file and directory the user may not write read all the same;
a write through a store open to read only is ``StoreError``, on SQLite and PostgreSQL.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from _raw_sqlite import query

from agentgate.cli.main import main
from agentgate.errors import InputError, StoreError
from agentgate.store import SQLiteStore, open_store
from agentgate.store.audit import AuditLog, open_log_key
from agentgate.store.broker_leases import BrokerLeaseStore
from agentgate.store.dead_letters import DeadLetterStore
from agentgate.store.leases import SharedBreakers

ORIGIN = "readonly.example/store"
ENTRIES = 40
ROOT = Path(__file__).resolve().parents[1]
NOBODY = 65534


def _fill(store: SQLiteStore) -> None:
    log = AuditLog(store, open_log_key(store, create=True), ORIGIN)
    log.append_many(
        [
            {"kind": "allow", "principal": "did:key:zA", "resource": "tool:search", "budget_delta": i}
            for i in range(ENTRIES)
        ]
    )
    log.checkpoint()
    DeadLetterStore(store)  # the part's tables, empty


def _digests(folder: Path) -> dict[str, str]:
    """Each file in ``folder`` whose name starts ``s.db`` (the store, its -wal, -shm, -journal)."""
    return {
        p.name: hashlib.sha256(p.read_bytes()).hexdigest()
        for p in folder.iterdir()
        if p.name.startswith("s.db")
    }


def _read_verbs(folder: Path, key: Path) -> list[list[str]]:
    store = ["--store", str(folder / "s.db")]
    return [
        ["audit", "verify", "--key", str(key), *store],
        ["audit", "show", "--last", "3", "--key", str(key), *store],
        ["audit", "explain", "5", "--key", str(key), *store],
        ["audit", "report", "--out", str(key.parent / "report.html"), "--key", str(key), *store],
        ["approval", "list", *store],
        ["tasks", "dead-letters", *store],
        ["tasks", "breakers", *store],
    ]


def _run(argv: list[str]) -> int:
    try:
        return main(argv)
    except SystemExit as exit_:
        return int(exit_.code or 0)


@pytest.fixture
def cli(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(
        "agentgate.cli.main.GROUPS", ("agentgate.cli.audit", "agentgate.cli.approval", "agentgate.cli.tasks")
    )
    monkeypatch.setenv("AGENTGATE_LOG_ORIGIN", ORIGIN)
    monkeypatch.delenv("AGENTGATE_LOG_PREVIOUS_KEYS", raising=False)
    monkeypatch.delenv("AGENTGATE_STORE", raising=False)


def _evidence(tmp_path: Path, journal: str) -> Path:
    """A store filled by agentgate in ``tmp_path/live``, copied as an auditor would keep it to
    ``tmp_path/copy``: ``delete`` (switched to rollback-journal mode, as ``sqlite3 .backup``
    into a new file or a tool that does not use WAL leaves it), ``wal`` (closed cleanly: the file
    alone), ``pending`` (copied with its ``-wal`` while the store was open: commits only there)."""
    live, copy = tmp_path / "live", tmp_path / "copy"
    live.mkdir()
    copy.mkdir()
    store = SQLiteStore(live / "s.db")
    _fill(store)
    if journal == "pending":
        shutil.copy(live / "s.db", copy / "s.db")
        shutil.copy(live / "s.db-wal", copy / "s.db-wal")
        assert (copy / "s.db-wal").stat().st_size > 0
    store.close()
    if journal != "pending":
        copied_as(journal, live / "s.db", copy / "s.db")
    return copy


def copied_as(journal: str, db: Path, to: Path) -> None:
    """Copy the closed store file ``db`` to ``to`` as an auditor keeps it: ``delete`` switched to
    rollback-journal mode first, ``wal`` as agentgate left it."""
    if journal == "delete":
        raw = sqlite3.connect(db)
        assert raw.execute("PRAGMA journal_mode=DELETE").fetchone() == ("delete",)
        raw.close()
    shutil.copy(db, to)


@pytest.mark.parametrize("journal", ["delete", "wal", "pending"])
def test_read_verbs_leave_a_copy_of_the_store_byte_for_byte(
    tmp_path: Path, cli: None, capsys: pytest.CaptureFixture[str], journal: str
) -> None:
    """Review R56: a read verb switched a copy to WAL mode (its header rewritten) and checkpointed its -wal into it."""
    copy = _evidence(tmp_path, journal)
    before = _digests(copy)
    for argv in _read_verbs(copy, tmp_path / "live" / "log.pub"):
        assert _run(argv) == 0, (argv, capsys.readouterr())
        after = _digests(copy)
        if journal == "pending":  # SQLite's index of the -wal, rebuilt to read it: no data of the store's
            after.pop("s.db-shm", None)
        assert after == before, argv
    capsys.readouterr()
    assert _run(_read_verbs(copy, tmp_path / "live" / "log.pub")[0]) == 0
    assert f"{ENTRIES} entries" in capsys.readouterr().out  # what the -wal held was read


def test_a_store_opened_to_read_only_refuses_every_write(tmp_path: Path) -> None:
    """Review R56: no way to open a SQLite store that writes nothing; a write through one is StoreError."""
    copy = _evidence(tmp_path, "delete")
    with open_store(str(copy / "s.db"), create=False, read_only=True) as store:
        with pytest.raises(StoreError, match="open to read only"), store.transaction() as tx:
            tx.execute("DELETE FROM audit_log")
        with pytest.raises(StoreError, match="open to read only"), store.transaction() as tx:
            tx.execute("CREATE TABLE x (a)")
        # A part whose tables the file lacks reads as empty, and is not written either.
        assert store.query("SELECT count(*) FROM audit_log") == [(ENTRIES,)]
        assert SharedBreakers(store).all() == []
        stand_in = "INSERT INTO agentgate_breakers (breaker_key, state, opened_at, version) VALUES ('k', 'open', 1, 1)"
        with pytest.raises(StoreError, match="open to read only"), store.transaction() as tx:
            tx.execute(stand_in)
    assert query(copy / "s.db", "PRAGMA journal_mode") == [("delete",)]
    assert sorted(p.name for p in copy.iterdir()) == ["s.db"]


def test_read_only_needs_create_false() -> None:
    with pytest.raises(InputError, match="never created"):
        open_store("whatever.db", read_only=True)


def test_a_closed_file_written_while_it_is_read_is_refused(tmp_path: Path) -> None:
    """Review R56: a file read without locks (immutable) must not be read on once a writer opened it."""
    copy = _evidence(tmp_path, "wal")
    with open_store(str(copy / "s.db"), create=False, read_only=True) as store:
        assert store.query("SELECT count(*) FROM audit_log") == [(ENTRIES,)]
        with SQLiteStore(copy / "s.db") as writer:  # a gateway started on the file meanwhile
            writer.query("SELECT 1")
            with pytest.raises(StoreError, match="run the command again"):
                store.query("SELECT count(*) FROM audit_log")


# --- a file and a directory the user may only read ---------------------------------------------------


_AS_USER = f"""
import os, sys
from agentgate.cli.main import build_parser, main
build_parser()
if os.geteuid() == 0:
    os.setgroups([]); os.setgid({NOBODY}); os.setuid({NOBODY})
sys.exit(main(sys.argv[1:]))
"""


@pytest.fixture
def user_dir() -> Iterator[Path]:
    """A directory outside pytest's root-only tmp_path, that ``nobody`` may read."""
    path = Path(tempfile.mkdtemp(prefix="agentgate-r56-"))
    path.chmod(0o755)
    yield path
    for p in [path, *path.rglob("*")]:
        p.chmod(0o755 if p.is_dir() else 0o644)
    shutil.rmtree(path, ignore_errors=True)


@pytest.mark.parametrize("journal", ["delete", "wal", "pending"])
def test_read_verbs_read_a_file_in_a_directory_the_user_may_only_read(
    tmp_path: Path, user_dir: Path, journal: str
) -> None:
    """Review R56: audit verify of a copy the auditor may only read (0444, in a 0555 directory) failed to open it."""
    copy = _evidence(tmp_path, journal)
    evidence = user_dir / "evidence"
    shutil.copytree(copy, evidence)
    shutil.copy(tmp_path / "live" / "log.pub", user_dir / "log.pub")
    if journal == "pending":
        # SQLite reads the -wal of a directory it may not write only through its -shm: here, the
        # copy's own (made by a reader, where it could be written)
        with open_store(str(evidence / "s.db"), create=False, read_only=True) as store:
            store.query("SELECT 1")
    for p in evidence.iterdir():
        p.chmod(0o444)
    evidence.chmod(0o555)
    before = _digests(evidence)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "AGENTGATE_LOG_ORIGIN": ORIGIN}
    env.pop("AGENTGATE_STORE", None)
    done = subprocess.run(
        [sys.executable, "-c", _AS_USER, "audit", "verify", "--key", str(user_dir / "log.pub"),
         "--store", str(evidence / "s.db")],
        cwd=user_dir, env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert f"{ENTRIES} entries" in done.stdout
    assert _digests(evidence) == before


# --- PostgreSQL -----------------------------------------------------------------------------------


@pytest.mark.postgres
def test_a_postgresql_store_opened_to_read_only_refuses_every_write(postgres_url: str) -> None:
    """Review R56: a PostgreSQL store opened for a read verb took writes; its session is now read only."""
    with open_store(postgres_url) as writer:
        DeadLetterStore(writer)
    with open_store(postgres_url, create=False, read_only=True) as store:
        assert store.query("SHOW default_transaction_read_only") == [("on",)]
        assert DeadLetterStore(store).recent(limit=5) == []
        with pytest.raises(StoreError, match="open to read only"), store.transaction() as tx:
            tx.execute("DELETE FROM agentgate_dead_letters")
        with pytest.raises(StoreError, match="open to read only"), store.transaction() as tx:
            tx.execute("CREATE TABLE agentgate_x (a int)")
        with pytest.raises(StoreError, match=r"holds no table .*open to read only"):
            BrokerLeaseStore(store, "b")
    with psycopg.connect(postgres_url) as conn:
        assert conn.execute("SELECT to_regclass('agentgate_x')").fetchone() == (None,)
