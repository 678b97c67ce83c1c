"""Hostile file systems and file types: what the store, key, policy and token paths
may name, and the modes of what agentgate creates.

Real SQLite files, real FIFOs and devices, real permission checks: where permissions matter the
command runs in a child process that drops to the ``nobody`` user (the sandbox runs as root, for
whom every permission check passes); run as another user, the child keeps its own.

Defects found (fixed in agentgate/store/_sqlite.py and agentgate/cli/_common.py):

- A store path naming a device (``/dev/null``, ``/dev/zero``) made SQLite create
  ``/dev/null-journal`` (mode 0666) beside it, left behind; a FIFO or a device was "disk I/O
  error", a directory "unable to open database file". Now refused before SQLite opens it:
  ``StoreError`` "it is not a regular file" / "it is a directory", nothing created.
- The store file and the directory agentgate created for it took the umask (0644 and 0755 under
  022, 0666 under 000), so every local user could read the grant tokens, approval requests and the
  audit log (and SQLite gives ``-wal``/``-shm`` the database's mode). Now a new store file is 0600
  and a directory made for it 0700, whatever the umask (as ``keys new`` makes its key and dir);
  an existing store keeps the mode its operator gave it. docs/operations.md says nothing of the
  store's mode (the log key's 0600 is documented): it should say so.
- A SQLite file of another application with a table of the same name (``audit_log``,
  ``agentgate_grants``): ``store init`` said "audit log: ready", put agentgate's append-only
  triggers on the other application's ``audit_log`` (its own UPDATE and DELETE then failed) and
  stopped half-way at the grants. Now ``ensure_schema`` refuses, in the transaction and before any
  DDL, a table that lacks a column the DDL requires (NOT NULL without default, or the key), naming
  the file and the table; nothing is created. Columns an upgrade adds (they have defaults) and
  extra columns pass.
- A read-only command (``approval list``, ``audit verify``...) given another application's SQLite
  file (no table in common) created every part's tables in it and answered "no open approval
  requests" (PostgreSQL refused that case already). Now refused (exit 2, one line), the file left
  byte for byte as it was (it is inspected through a read-only connection before ``open_store``,
  which would switch it to WAL mode).
- A store path under a regular file (``store.db/x.db``) said "File exists"; now "a part of that
  path is a file, not a directory".

What holds (checked here): a FIFO or a directory as the store is refused at once (no hang); a
text, truncated or header-only file is one ``StoreError`` line and is left unchanged; a dangling
symbolic link creates the store where it points (0600) and a link to a store is used as the
store; an unwritable store directory, a read-only directory holding a writable store, an
unwritable ``-wal`` file are one exit-2 line naming the store and the next correct run works;
six processes creating one new store at once all succeed with every table; key names with ``/``
or ``..`` are refused; under umask 000 ``keys new`` still writes a 0600 key, a 0644 .pub and a
0700 dir; ``keys new`` into a directory the user may not write is one line and leaves nothing;
a key file of another user the process cannot read is one line; /dev/zero and /dev/urandom as a
policy, key or token are refused unread. Symbolic links to key files (judged by their target),
FIFOs and huge sparse key, policy and token files were covered by earlier rounds (test_authority_revocation_races,
test_cli_files, test_cli_files_and_streams) and are not repeated.

A key file owned by another user that the process can read with mode 0600 (root reading a
user's key) was accepted here (ssh checks only a private key's mode); since R44 it is refused
(test_keys): its owner may rewrite it.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from _cli import cli
from _raw_sqlite import opened

from agentgate.cli._common import STORE_TABLES
from agentgate.cli.main import main
from agentgate.errors import StoreError
from agentgate.keys import SigningKey, save_key
from agentgate.store import SQLiteStore, open_store
from agentgate.store.audit import create_audit_tables
from agentgate.store.broker_leases import BrokerLeaseStore
from agentgate.store.grants import GrantRepository

ROOT = Path(__file__).resolve().parents[1]
NOBODY = 65534

# Run ``agentgate ARGV`` as ``nobody`` when root: the modules are imported first (the interpreter
# may live where nobody cannot read), then the ids are dropped, then the command runs.
_AS_USER = f"""
import os, sys
import agentgate.store._postgres
from agentgate.cli.main import build_parser, main
build_parser()  # imports every verb group's module
if os.geteuid() == 0:
    os.setgroups([]); os.setgid({NOBODY}); os.setuid({NOBODY})
os.umask(0o022)
sys.exit(main(sys.argv[1:]))
"""


def as_user(*argv: str, cwd: Path, store: Path | None = None) -> tuple[int, str]:
    """``agentgate ARGV`` as an unprivileged user: (exit code, stderr)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("AGENTGATE_STORE", None)
    if store is not None:
        env["AGENTGATE_STORE"] = str(store)
    done = subprocess.run(
        [sys.executable, "-c", _AS_USER, *argv], cwd=cwd, env=env, capture_output=True, text=True, timeout=60
    )
    return done.returncode, done.stderr


def one_line(code: int, err: str) -> str:
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and lines[0].startswith("agentgate: error: "), (code, err)
    return lines[0]


@pytest.fixture
def user_dir() -> Iterator[Path]:
    """A directory the unprivileged user owns, outside pytest's root-only tmp_path."""
    path = Path(tempfile.mkdtemp(prefix="agentgate-r42-"))
    path.chmod(0o755)
    if os.geteuid() == 0:
        os.chown(path, NOBODY, NOBODY)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def chown_tree(path: Path) -> None:
    if os.geteuid() == 0:
        for p in [path, *path.rglob("*")]:
            os.chown(p, NOBODY, NOBODY, follow_symlinks=False)


@pytest.fixture
def umask() -> Iterator[object]:
    old = os.umask(0o022)

    def set_to(value: int) -> None:
        os.umask(value)

    yield set_to
    os.umask(old)


def schema(path: Path) -> list[tuple[str, str]]:
    with opened(path) as db:
        return sorted(db.execute("SELECT type, name FROM sqlite_master"))


# --- the store path names something that is not a database file ----------------------------------


def test_a_device_as_the_store_is_refused_and_nothing_is_created_beside_it(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # SQLite created /dev/null-journal (mode 0666, as root) and left it there.
    journals = [Path(f"/dev/{name}-{suffix}") for name in ("null", "zero") for suffix in ("journal", "wal")]
    before = {p for p in journals if p.exists()}
    for device in ("/dev/null", "/dev/zero"):
        code, _out, err = cli(capsys, "store", "init", "--store", device)
        assert device in one_line(code, err) and "not a regular file" in err
        with pytest.raises(StoreError, match="not a regular file"):
            SQLiteStore(device)
    assert {p for p in journals if p.exists()} == before


def test_a_directory_as_the_store_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "store.db").mkdir()
    for argv in (["approval", "list"], ["store", "init"]):
        code, _out, err = cli(capsys, *argv, "--store", str(tmp_path / "store.db"))
        assert f"{tmp_path / 'store.db'}: it is a directory" in one_line(code, err)
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["store.db"]


def test_a_fifo_as_the_store_is_refused_at_once(tmp_path: Path) -> None:
    # In a child process: a FIFO opened for reading waits for a writer (forever).
    target = tmp_path / "store.db"
    os.mkfifo(target)
    for argv in (["approval", "list"], ["store", "init"]):
        done = subprocess.run(
            [sys.executable, "-m", "agentgate.cli.main", *argv, "--store", str(target)],
            capture_output=True, text=True, timeout=60, env={**os.environ, "PYTHONPATH": str(ROOT)},
        )  # fmt: skip
        assert f"{target}: it is not a regular file" in one_line(done.returncode, done.stderr)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["store.db"]


@pytest.mark.parametrize("content", ["text", "truncated", "header"])
def test_a_file_that_is_no_sqlite_database_is_one_line_and_left_as_it_was(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str
) -> None:
    good = tmp_path / "good.db"
    SQLiteStore(good).close()
    with opened(good) as db:
        db.execute("PRAGMA journal_mode=DELETE")
        db.execute("CREATE TABLE filler (x)")
        db.executemany("INSERT INTO filler VALUES (?)", [("x" * 500,)] * 40)
    data = {"text": b"hello, not a database\n", "truncated": good.read_bytes()[:5000],
            "header": good.read_bytes()[:100]}[content]  # fmt: skip
    path = tmp_path / "bad.db"
    path.write_bytes(data)
    for argv in (["store", "init"], ["approval", "list"], ["audit", "verify"]):
        code, _out, err = cli(capsys, *argv, "--store", str(path))
        assert str(path) in one_line(code, err)
    assert path.read_bytes() == data


def test_a_store_path_under_a_regular_file_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "store.db").write_bytes(b"")
    code, _out, err = cli(capsys, "store", "init", "--store", str(tmp_path / "store.db" / "x.db"))
    assert "is a file, not a directory" in one_line(code, err)


def test_symbolic_links_as_the_store(tmp_path: Path, umask: object) -> None:
    # A dangling link: the store is created where it points (0600); a link to a store is that store.
    dangling = tmp_path / "dangling.db"
    dangling.symlink_to(tmp_path / "real.db")
    with open_store(str(dangling)) as store:
        GrantRepository(store).revoke("g1", now=1, reason="r")
    assert (tmp_path / "real.db").is_file() and dangling.is_symlink()
    assert stat.S_IMODE((tmp_path / "real.db").stat().st_mode) == 0o600
    with open_store(str(tmp_path / "real.db")) as store:
        assert GrantRepository(store).revoked(["g1"]) == {"g1"}


# --- another application's SQLite database ------------------------------------------------------


def foreign_db(path: Path, tables: str) -> bytes:
    with opened(path) as db:
        db.executescript(tables)
    return path.read_bytes()


def test_a_foreign_database_with_agentgates_table_names_is_refused_whole(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # It said "audit log: ready", put agentgate's append-only triggers on the other application's
    # audit_log (its own UPDATE and DELETE then failed) and failed half-way, at the grants.
    path = tmp_path / "other.db"
    foreign_db(path, "CREATE TABLE audit_log (x); INSERT INTO audit_log VALUES (1);"
                     "CREATE TABLE agentgate_grants (a, b);")  # fmt: skip
    before = schema(path)
    code, out, err = cli(capsys, "store", "init", "--store", str(path))
    line = one_line(code, err)
    assert str(path) in line and "audit_log" in line and "not agentgate's" in line and out == ""
    with pytest.raises(StoreError, match=r"audit_log.*not agentgate's"):  # refused as it opens (R44)
        SQLiteStore(path)
    assert schema(path) == before
    with opened(path) as db:  # the other application still owns its table
        db.execute("UPDATE audit_log SET x = 2")
        db.execute("DELETE FROM audit_log")


def test_a_table_of_an_earlier_release_or_with_more_columns_is_agentgates(tmp_path: Path) -> None:
    # The check lets an upgrade through: broker_state before R40 had no generation column (added
    # with a default), and a later release may add columns.
    path = tmp_path / "old.db"
    foreign_db(path, "CREATE TABLE broker_state (broker TEXT PRIMARY KEY, taken_at REAL NOT NULL);"
                     "CREATE TABLE audit_log (idx INTEGER PRIMARY KEY, entry BLOB NOT NULL,"
                     " leaf_hash BLOB NOT NULL, added_later TEXT);")  # fmt: skip
    with SQLiteStore(path) as store:
        BrokerLeaseStore(store)
        assert create_audit_tables(store)
        columns = {row[1] for row in store.query("PRAGMA table_info(broker_state)")}
    assert "generation" in columns


def test_a_read_command_never_writes_into_another_applications_database(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # It created every part's tables there and answered "no open approval requests".
    path = tmp_path / "places.sqlite"
    data = foreign_db(path, "CREATE TABLE moz_places (id INTEGER PRIMARY KEY, url TEXT);")
    for argv in (["approval", "list"], ["audit", "verify"], ["store", "prune", "--older-than", "1d"],
                 ["tasks", "dead-letters"]):  # fmt: skip
        code, _out, err = cli(capsys, *argv, "--store", str(path))
        assert "another application's SQLite database (tables moz_places)" in one_line(code, err), argv
    assert path.read_bytes() == data and sorted(p.name for p in tmp_path.iterdir()) == ["places.sqlite"]


def test_a_store_without_tables_yet_still_reads_as_empty(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    SQLiteStore(tmp_path / "fresh.db").close()  # opened, never used: agentgate's, not foreign
    code, out, _err = cli(capsys, "approval", "list", "--store", str(tmp_path / "fresh.db"))
    assert code == 0 and "no open approval requests" in out


# --- modes of what agentgate creates ----------------------------------------------------------------


@pytest.mark.parametrize("mask", [0o022, 0o000])
def test_a_new_store_and_its_directory_are_private_whatever_the_umask(
    tmp_path: Path, umask: object, mask: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The store holds grant tokens, approval requests and the audit log; it was 0644 (0666 under
    # umask 000), its directory 0755, and SQLite gives -wal and -shm the database's mode.
    umask(mask)  # type: ignore[operator]
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("AGENTGATE_STORE", raising=False)
    monkeypatch.delenv("AGENTGATE_LOG_KEY", raising=False)
    store = open_store()  # the default .agentgate/agentgate.db
    try:
        GrantRepository(store).revoke("g", now=1, reason="r")
        create_audit_tables(store)
        files = [Path(".agentgate/agentgate.db"), Path(".agentgate/agentgate.db-wal"),
                 Path(".agentgate/agentgate.db-shm")]  # fmt: skip
        assert {str(p): oct(stat.S_IMODE(p.stat().st_mode)) for p in files} == {
            str(p): "0o600" for p in files
        }
        assert stat.S_IMODE(Path(".agentgate").stat().st_mode) == 0o700
    finally:
        store.close()
    assert main(["audit", "checkpoint"]) == 0
    assert stat.S_IMODE(Path(".agentgate/log.key").stat().st_mode) == 0o600


def test_an_existing_store_keeps_the_mode_its_operator_gave_it(tmp_path: Path) -> None:
    path = tmp_path / "shared.db"
    SQLiteStore(path).close()
    path.chmod(0o640)
    with SQLiteStore(path) as store:
        GrantRepository(store).revoke("g", now=1, reason="r")
    assert stat.S_IMODE(path.stat().st_mode) == 0o640


def test_keys_new_under_umask_000(tmp_path: Path, umask: object, capsys: pytest.CaptureFixture[str]) -> None:
    umask(0)  # type: ignore[operator]
    code, _out, err = cli(capsys, "keys", "new", "k", "--dir", str(tmp_path / "keys"))
    assert code == 0, err
    modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in (tmp_path / "keys").iterdir()}
    assert modes == {"k.key": 0o600, "k.pub": 0o644}
    assert stat.S_IMODE((tmp_path / "keys").stat().st_mode) == 0o700


@pytest.mark.parametrize("name", ["../escape", "a/b", "..", ".hidden", "sub/../x"])
def test_keys_new_refuses_a_name_with_a_path_in_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str
) -> None:
    (tmp_path / "keys").mkdir()
    code, _out, err = cli(capsys, "keys", "new", name, "--dir", str(tmp_path / "keys"))
    assert "invalid key name" in one_line(code, err)
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["keys"]


# --- permissions, as an unprivileged user ---------------------------------------------------------


def test_unwritable_places_for_the_store_are_one_line_and_the_next_run_works(user_dir: Path) -> None:
    code, err = as_user("store", "init", "--store", str(user_dir / "good.db"), cwd=user_dir)
    assert code == 0, err
    # A new store in a directory the user may not write, or under one it may not search.
    (user_dir / "locked").mkdir()
    chown_tree(user_dir / "locked")
    (user_dir / "locked").chmod(0o555)
    code, err = as_user("store", "init", "--store", str(user_dir / "locked" / "new.db"), cwd=user_dir)
    assert str(user_dir / "locked" / "new.db") in one_line(code, err)
    # A read-only directory holding a writable store: SQLite cannot make its -wal and -shm files,
    # and a verb that only reads opens it to read only, which needs neither (refused until review R56).
    shutil.copy(user_dir / "good.db", user_dir / "locked" / "s.db")
    chown_tree(user_dir / "locked")
    code, err = as_user("approval", "list", "--store", str(user_dir / "locked" / "s.db"), cwd=user_dir)
    assert code == 0, err
    assert sorted(p.name for p in (user_dir / "locked").iterdir()) == ["s.db"]
    # An unwritable -wal file beside the store.
    wal = user_dir / "good.db-wal"
    wal.write_bytes(b"")
    chown_tree(user_dir)
    wal.chmod(0o444)
    code, err = as_user("approval", "list", "--store", str(user_dir / "good.db"), cwd=user_dir)
    # SQLite may remove an empty WAL it cannot write (the directory is writable) and go on.
    assert code == 0 or str(user_dir / "good.db") in one_line(code, err), (code, err)
    wal.unlink(missing_ok=True)
    code, err = as_user("approval", "list", "--store", str(user_dir / "good.db"), cwd=user_dir)
    assert code == 0, err
    (user_dir / "locked").chmod(0o755)


def test_keys_new_into_an_unwritable_directory_leaves_nothing(user_dir: Path) -> None:
    keys = user_dir / "keys"
    keys.mkdir()
    chown_tree(user_dir)
    keys.chmod(0o555)
    code, err = as_user("keys", "new", "k", "--dir", str(keys), cwd=user_dir)
    assert str(keys) in one_line(code, err)
    assert list(keys.iterdir()) == []
    keys.chmod(0o755)


def test_a_key_file_of_another_user_that_cannot_be_read_is_one_line(user_dir: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("needs a file of another user: run as root to make one")
    # root's, 0600, in a directory root owns: save_key refuses a directory another user may change
    # (review R69), so the pair is written in a directory of root's and moved below user_dir.
    made = Path(tempfile.mkdtemp(prefix="agentgate-r69-"))
    try:
        save_key(SigningKey.generate(), made / "rootkeys", "root")
        (made / "rootkeys").rename(user_dir / "rootkeys")
    finally:
        shutil.rmtree(made, ignore_errors=True)
    private, public = user_dir / "rootkeys" / "root.key", user_dir / "rootkeys" / "root.pub"
    code, err = as_user("grant", "issue", "--issuer", str(private), "--to", str(public),
                        "--allow", "tool:x", "--ttl", "1h", cwd=user_dir, store=user_dir / "s.db")  # fmt: skip
    line = one_line(code, err)
    assert str(private) in line and ("Permission denied" in line or "cannot" in line)


# --- devices as policy, key or token files -----------------------------------------------------------


@pytest.mark.parametrize("device", ["/dev/zero", "/dev/urandom"])
def test_an_endless_device_as_a_policy_key_or_token_is_refused_unread(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], device: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    save_key(SigningKey.generate(), tmp_path, "k")
    monkeypatch.setenv("AGENTGATE_STORE", str(tmp_path / "s.db"))
    for argv in (["policy", "lint", device], ["grant", "inspect", device],
                 ["grant", "issue", "--issuer", device, "--to", str(tmp_path / "k.pub"), "--allow", "tool:x",
                  "--ttl", "1h"]):  # fmt: skip
        code, _out, err = cli(capsys, *argv)
        assert device in one_line(code, err) and "not a regular file" in err, argv


# --- two processes creating one new store -------------------------------------------------------------


def test_processes_creating_one_new_store_at_once_all_succeed(tmp_path: Path) -> None:
    path = tmp_path / "new" / "store.db"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}

    def init(_: int) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "agentgate.cli.main", "store", "init", "--store", str(path)],
            capture_output=True, text=True, timeout=120, env=env,
        )  # fmt: skip

    with ThreadPoolExecutor(4) as pool:
        runs = list(pool.map(init, range(4)))
    assert [(r.returncode, r.stderr) for r in runs] == [(0, "")] * 4
    with opened(path) as db:
        tables = {row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert set(STORE_TABLES) <= tables
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
