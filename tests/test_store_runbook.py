"""docs/operations.md followed literally, step by step, on real stores.

An operator's restore of a SQLite store ("Backups and restoring") with the doc's own shell block
(run through ``bash``, the ``sqlite3`` binary taking the backup), the four steps "Before any
gateway decides on the restored copy" through the command line, and the PostgreSQL backup of
"Backup and restore" with the least-privilege roles of "PostgreSQL set-up" (``pg_dump`` and
``pg_restore`` run as the schema's owner, not a superuser), the newer database kept for step 2.
Beyond tests/test_store_rollback.py: a grant issued *and* revoked in the lost period (its row
is gone from the restored store: is ``agentgate grant revoke ID`` enough?), the new checkpoint file
of step 1, the stop-and-copy backup with its ``-wal``, a restore across a log-key rotation.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

from agentgate.capabilities import Call
from agentgate.cli.main import main
from agentgate.errors import StoreError
from agentgate.gate import Gate
from agentgate.keys import SigningKey
from agentgate.policy import parse_policy
from agentgate.store import SQLiteStore, Store
from agentgate.store._pgserver import pg_binary
from agentgate.store.audit import AuditLog

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs" / "operations.md"
KEYS = {name: SigningKey(bytes([n + 0x61]) * 32) for n, name in enumerate(["root", "agent", "log"])}

POLICY = """
version: 1
trust_anchors:
  root: {{did: "{root}"}}
principals:
  agent: {{kind: agent, did: "{agent}", roles: [worker]}}
tools:
  look:
    idempotent: true
roles:
  worker:
    kind: agent
    capabilities: [{{resource: tool:look}}]
    budget: {{limit: 100, unit: calls}}
    ttl_s: 3600
"""
LOOK = Call.tool("look", {})


def _gate(store: Store, log_key: SigningKey | None = None) -> Gate:
    policy = parse_policy(POLICY.format(**{n: k.did for n, k in KEYS.items()}), source="r46.yaml")
    return Gate(policy, store, log_key=log_key)


def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    capsys.readouterr()
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out + out.err


def _doc_block(after: str) -> str:
    """The first fenced block of docs/operations.md after the text ``after``."""
    text = DOCS.read_text()
    start = text.index("```", text.index(after))
    start = text.index("\n", start) + 1
    return text[start : text.index("```", start)]


def _first_bad(out: str) -> int:
    found = re.search(r"first bad index: (\d+)", out)
    assert found, out
    return int(found.group(1))


@pytest.fixture
def ops(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An operator's working directory: the default store ``.agentgate/agentgate.db``, the log
    key created beside it by the first checkpoint."""
    monkeypatch.chdir(tmp_path)
    for name in (
        "AGENTGATE_STORE",
        "AGENTGATE_LOG_KEY",
        "AGENTGATE_LOG_PREVIOUS_KEYS",
        "AGENTGATE_LOG_ORIGIN",
    ):
        monkeypatch.delenv(name, raising=False)
    return tmp_path


# --- SQLite: the restore block and the four steps, literally ---------------------------------------


def test_the_sqlite_restore_runbook_as_written_brings_back_every_revocation_of_the_lost_period(
    ops: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = ops / ".agentgate" / "agentgate.db"
    store = SQLiteStore(db)
    assert _cli(capsys, "audit", "checkpoint")[0] == 0  # creates .agentgate/log.key and log.pub
    gate = _gate(store)
    before = gate.issue(KEYS["root"], name="agent", key=KEYS["agent"], role="worker")
    assert gate.authorize(before, LOOK).allowed
    gate.flush()
    # the backup, as "Backup and restore" says, while the process runs
    subprocess.run(["sqlite3", str(db), f".backup {ops / 'backup.db'}"], check=True, timeout=60)
    # the lost period: a grant issued, then both revoked from another process, a checkpoint saved
    lost = gate.issue(KEYS["root"], name="agent", key=KEYS["agent"], role="worker")
    allowed = gate.authorize(lost, LOOK)
    assert gate.run(allowed, lambda: "seen") == "seen"
    gate.flush()
    for identity in (before, lost):
        assert _cli(capsys, "grant", "revoke", identity.grant_id, "--reason", "r46", "--by", "ops")[0] == 0
    assert not gate.authorize(before, LOOK).allowed and not gate.authorize(lost, LOOK).allowed
    gate.flush()
    assert _cli(capsys, "audit", "checkpoint", "--out", "last.checkpoint")[0] == 0
    gate.close()
    store.close()  # "systemctl stop ...": every process on the store

    block = _doc_block("**Restoring a SQLite file.**").replace("systemctl stop", ": systemctl stop")
    (ops / "aside").mkdir()
    block = block.replace("/somewhere/aside/", str(ops / "aside") + "/")
    done = subprocess.run(["bash", "-c", block], cwd=ops, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert (ops / "newer.db").exists() and oct(db.stat().st_mode & 0o777) == "0o600"

    # Step 1: verify against the saved checkpoint says what the doc says; a new file is started.
    code, out = _cli(capsys, "audit", "verify", "--checkpoint", "last.checkpoint")
    n = _first_bad(out)
    # the doc quoted only the message of a restored log grown past the saved size ("does not
    # extend the saved checkpoint"); a shorter one, the usual case, is told in other words
    assert code == 1 and f"but the log has {n}: " in out and "restored from an older copy" in out, out
    with SQLiteStore(ops / "backup.db") as copy:
        assert n == AuditLog(copy, KEYS["log"]).size()  # N is the backup's log size
    kept = (ops / "last.checkpoint").read_bytes()
    code, out = _cli(capsys, "audit", "checkpoint", "--out", "last.checkpoint")
    assert code == 1 and (ops / "last.checkpoint").read_bytes() == kept, out
    code, out = _cli(capsys, "audit", "checkpoint", "--out", "new.checkpoint")
    assert code == 0, out
    assert _cli(capsys, "audit", "verify", "--checkpoint", "new.checkpoint")[0] == 0

    # The lost period is open again: both grants decide allow (the lost one from its token alone).
    store = SQLiteStore(db)
    gate = _gate(store)
    try:
        assert gate.authorize(before, LOOK).allowed
        assert gate.authorize(lost, LOOK).allowed, "a grant whose row was lost still decides by its token"
        gate.flush()
        # Step 2, literally: the revocations from the store being replaced, each revoked again.
        code, out = _cli(capsys, "audit", "show", "--store", "newer.db", "--key", ".agentgate/log.pub",
                         "--kind", "revoke", "--from", str(n), "--json")  # fmt: skip
        assert code == 0, out
        ids = [json.loads(line)["chain_hash"] for line in out.splitlines()]
        assert ids == [before.grant_id, lost.grant_id]
        for grant_id in ids:
            code, out = _cli(capsys, "grant", "revoke", grant_id)
            assert code == 0, out
        # Step 3: what each grant spent in the lost period (budget_delta), from the newer store
        code, out = _cli(capsys, "audit", "show", "--store", "newer.db", "--key", ".agentgate/log.pub",
                         "--from", str(n), "--json")  # fmt: skip
        spent = [e for e in map(json.loads, out.splitlines()) if e.get("budget_delta")]
        assert code == 0 and spent and {e["chain_hash"] for e in spent} == {lost.grant_id}, out
        # a revocation of a grant the restored store never recorded reaches it too
        assert not gate.authorize(before, LOOK).allowed
        assert not gate.authorize(lost, LOOK).allowed
        gate.flush()
    finally:
        gate.close()
        store.close()
    # the saved checkpoint still exposes the restore, the new one is extended
    assert _cli(capsys, "audit", "verify", "--checkpoint", "last.checkpoint")[0] == 1
    assert _cli(capsys, "audit", "verify", "--checkpoint", "new.checkpoint")[0] == 0
    assert _cli(capsys, "audit", "checkpoint", "--out", "new.checkpoint")[0] == 0


# --- SQLite: the stop-and-copy backup with its -wal -----------------------------------------------

_KILLED = r"""
import os, signal, sys
from agentgate.keys import SigningKey
from agentgate.store import SQLiteStore
from agentgate.store.audit import AuditLog
store = SQLiteStore(sys.argv[1])
log = AuditLog(store, SigningKey(bytes([0x63]) * 32))
log.append_many([{"kind": "allow", "principal": "did:key:zA"}] * 5)
log.checkpoint()
os.kill(os.getpid(), signal.SIGKILL)  # a writer that did not stop cleanly: its -wal stays
"""


def test_a_stop_and_copy_backup_is_restored_with_its_wal(ops: Path) -> None:
    """ "stop writers and copy the file together with its ``-wal`` file": a writer that was killed
    left committed entries in the ``-wal`` only. The restore block copies ``backup.db`` alone (and
    moves any ``-wal`` aside), so the restored copy lacked what the backup's ``-wal`` held: the
    doc now says to copy that ``-wal`` in too, never a ``-shm``."""
    data = ops / ".agentgate"
    data.mkdir(mode=0o700)
    db = data / "agentgate.db"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", _KILLED, str(db)], capture_output=True, env=env, timeout=120)
    assert done.returncode == -signal.SIGKILL, done.stderr
    assert Path(f"{db}-wal").stat().st_size > 0
    # the backup: writers stopped, the file together with its -wal
    shutil.copyfile(db, ops / "backup.db")
    shutil.copyfile(f"{db}-wal", ops / "backup.db-wal")
    # the restore as the doc's block does it, the backup's database file alone
    literal = ops / "literal.db"
    shutil.copyfile(ops / "backup.db", literal)
    with SQLiteStore(literal) as store:
        assert AuditLog(store, KEYS["log"]).size() < 5  # the -wal's entries are not in the file
    # or folded into one file first, as the doc offers
    fold = ops / "fold"
    fold.mkdir()
    for suffix in ("", "-wal"):
        shutil.copyfile(ops / f"backup.db{suffix}", fold / f"backup.db{suffix}")
    subprocess.run(["sqlite3", "backup.db", ".backup restored.db"], cwd=fold, check=True, timeout=60)
    assert not (fold / "backup.db-wal").exists()  # folded into backup.db itself too, as the doc says
    for name in ("restored.db", "backup.db"):
        with SQLiteStore(fold / name) as store:
            assert AuditLog(store, KEYS["log"]).size() == 5
    # the doc's corrected step: the backup's -wal copied in beside it
    text = DOCS.read_text()
    assert "its `-wal` too" in text[text.index("**Restoring a SQLite file.**") :]
    for name in ("agentgate.db-wal", "agentgate.db-shm"):
        Path(data / name).unlink(missing_ok=True)
    shutil.copyfile(ops / "backup.db", db)
    shutil.copyfile(ops / "backup.db-wal", f"{db}-wal")  # cp backup.db-wal .agentgate/agentgate.db-wal
    with SQLiteStore(db) as store:
        log = AuditLog(store, SigningKey(bytes([0x63]) * 32))
        assert log.size() == 5 and log.verify().ok


# --- SQLite: a restore across a log-key rotation --------------------------------------------------


def test_a_backup_taken_before_a_log_key_rotation_restores_under_the_new_key(
    ops: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Backup, then "Rotating the log key", then the restore: the restored checkpoints are all the
    old key's. With the new key and ``AGENTGATE_LOG_PREVIOUS_KEYS`` kept, the saved checkpoint (the
    new key's) exposes the restore, and a new checkpoint file under the new key extends the
    restored log; the old private key is not needed ("Restoring the log key file" is the new one)."""
    db = ops / ".agentgate" / "agentgate.db"
    with SQLiteStore(db) as store:
        gate = _gate(store)
        agent = gate.issue(KEYS["root"], name="agent", key=KEYS["agent"], role="worker")
        gate.close()
    assert _cli(capsys, "audit", "checkpoint", "--out", "old.checkpoint")[0] == 0
    subprocess.run(["sqlite3", str(db), f".backup {ops / 'backup.db'}"], check=True, timeout=60)
    # rotation, steps 1 to 4
    assert _cli(capsys, "audit", "checkpoint", "--out", "final-old-key.checkpoint")[0] == 0
    for suffix in ("key", "pub"):
        (ops / ".agentgate" / f"log.{suffix}").rename(ops / f"log-2026-11.{suffix}")
    monkeypatch.setenv("AGENTGATE_LOG_PREVIOUS_KEYS", str(ops / "log-2026-11.pub"))
    with SQLiteStore(db) as store:
        gate = _gate(store)
        assert gate.authorize(agent, LOOK).allowed  # the lost period
        gate.close()
    code, out = _cli(capsys, "audit", "checkpoint", "--out", "last.checkpoint")
    assert code == 0, out
    assert (ops / ".agentgate" / "log.key").exists()
    (ops / "log-2026-11.key").unlink()  # destroyed (compromised)
    # the restore
    for suffix in ("-wal", "-shm"):
        Path(f"{db}{suffix}").unlink(missing_ok=True)
    shutil.copyfile(ops / "backup.db", db)
    code, out = _cli(capsys, "audit", "verify")
    assert code == 0, out
    code, out = _cli(capsys, "audit", "verify", "--checkpoint", "last.checkpoint")
    assert code == 1 and "restored from an older copy" in out, out
    assert _cli(capsys, "audit", "checkpoint", "--out", "last.checkpoint")[0] == 1
    code, out = _cli(capsys, "audit", "checkpoint", "--out", "new.checkpoint")
    assert code == 0, out
    code, out = _cli(capsys, "audit", "verify", "--checkpoint", "new.checkpoint")
    assert code == 0, out
    assert _cli(capsys, "audit", "verify", "--checkpoint", "old.checkpoint")[0] == 0


# --- PostgreSQL: pg_dump / pg_restore with the least-privilege roles -------------------------------


def _psql_args(server: Any, role: str) -> list[str]:
    return ["-h", str(server.socket_dir), "-p", str(server.port), "-U", role]


def _pg(server: Any, tool: str, role: str, *args: str) -> None:
    binary = pg_binary(tool)
    assert binary is not None
    done = server.run(binary, *_psql_args(server, role), *args, check=False)
    assert done.returncode == 0, done.stderr


def _url(server: Any, role: str, db: str) -> str:
    return f"postgresql://{role}@/{db}?host={server.socket_dir}&port={server.port}"


def _grants(role: str) -> list[str]:
    text = DOCS.read_text()
    start = text.index("```sql", text.index("grant the application role"))
    block = text[start + len("```sql") : text.index("```", start + 6)]
    return [s.strip().replace("agentgate_app", role) for s in block.split(";") if s.strip()]


@pytest.mark.postgres
def test_the_postgres_backup_restores_as_the_owner_and_the_application_role_works_on_it(
    postgres_server: Any, ops: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """ "PostgreSQL set-up" (owner, ``store init``, ``audit checkpoint``, the application role and
    its grants), the gateways as the application role, ``pg_dump -Fc`` as the owner; the database
    being replaced renamed (kept for step 2), ``createdb --owner`` as the superuser (the owner
    may not create databases) and ``pg_restore -d`` as the owner. The restored database keeps its triggers and the application role's rights; the
    revocations of the lost period are redone from the renamed database, as the application role."""
    for tool in ("pg_dump", "pg_restore", "createdb", "psql"):
        if pg_binary(tool) is None:
            pytest.skip(f"{tool} not installed")
    tag = uuid.uuid4().hex[:8]
    owner, app, name = f"own_{tag}", f"app_{tag}", f"ag_{tag}"
    superuser = postgres_server.user
    _pg(postgres_server, "psql", superuser, "-d", "postgres", "-v", "ON_ERROR_STOP=1",
        "-c", f"CREATE ROLE {owner} LOGIN", "-c", f"CREATE ROLE {app} LOGIN")  # fmt: skip
    _pg(postgres_server, "createdb", superuser, "--owner", owner, name)
    owner_url, app_url = _url(postgres_server, owner, name), _url(postgres_server, app, name)
    assert _cli(capsys, "store", "init", "--store", owner_url)[0] == 0
    assert _cli(capsys, "audit", "checkpoint", "--store", owner_url)[0] == 0
    _pg(postgres_server, "psql", owner, "-d", name, "-v", "ON_ERROR_STOP=1",
        *[a for s in _grants(app) for a in ("-c", s)])  # fmt: skip

    from agentgate.store._postgres import PostgresStore

    store = PostgresStore(app_url)
    gate = _gate(store)
    before = gate.issue(KEYS["root"], name="agent", key=KEYS["agent"], role="worker")
    assert gate.authorize(before, LOOK).allowed
    gate.flush()
    dump = postgres_server.root / f"{name}.dump"
    # as the application role the dump fails: it has no right on the tables' sequences (and needs
    # none to append); the doc says to run it as the owner
    refused = postgres_server.run(pg_binary("pg_dump"), *_psql_args(postgres_server, app), "-Fc", "-f",
                                  str(postgres_server.root / f"{name}.app.dump"), name, check=False)  # fmt: skip
    assert refused.returncode != 0 and "permission denied for sequence" in refused.stderr
    _pg(postgres_server, "pg_dump", owner, "-Fc", "-f", str(dump), name)
    lost = gate.issue(KEYS["root"], name="agent", key=KEYS["agent"], role="worker")
    assert gate.authorize(lost, LOOK).allowed
    gate.flush()
    for identity in (before, lost):
        code, out = _cli(capsys, "grant", "revoke", identity.grant_id, "--store", app_url)
        assert code == 0, out
    code, out = _cli(capsys, "audit", "checkpoint", "--store", app_url, "--out", "last.checkpoint")
    assert code == 0, out
    gate.close()
    store.close()

    # the restore: the database being replaced kept under another name, an empty one, pg_restore
    _pg(postgres_server, "psql", superuser, "-d", "postgres", "-v", "ON_ERROR_STOP=1",
        "-c", f"ALTER DATABASE {name} RENAME TO {name}_newer")  # fmt: skip
    _pg(postgres_server, "createdb", superuser, "--owner", owner, name)
    _pg(postgres_server, "pg_restore", owner, "-d", name, str(dump))
    newer_url = _url(postgres_server, app, f"{name}_newer")

    code, out = _cli(capsys, "audit", "verify", "--store", app_url, "--checkpoint", "last.checkpoint")
    assert code == 1 and "restored from an older copy" in out, out
    n = _first_bad(out)
    code, out = _cli(capsys, "audit", "show", "--store", newer_url, "--key", ".agentgate/log.pub",
                     "--kind", "revoke", "--from", str(n), "--json")  # fmt: skip
    assert code == 0, out
    ids = [json.loads(line)["chain_hash"] for line in out.splitlines()]
    assert ids == [before.grant_id, lost.grant_id]
    store = PostgresStore(app_url)
    gate = _gate(store)
    try:
        assert gate.authorize(before, LOOK).allowed and gate.authorize(lost, LOOK).allowed  # the rollback
        for grant_id in ids:
            code, out = _cli(capsys, "grant", "revoke", grant_id, "--store", app_url)
            assert code == 0, out
        assert not gate.authorize(before, LOOK).allowed and not gate.authorize(lost, LOOK).allowed
        fresh = gate.issue(KEYS["root"], name="agent", key=KEYS["agent"], role="worker")
        assert gate.authorize(fresh, LOOK).allowed  # the application role appends on the restored copy
        assert gate.verify().ok
    finally:
        gate.close()
        store.close()
    code, out = _cli(capsys, "audit", "checkpoint", "--store", app_url, "--out", "new.checkpoint")
    assert code == 0, out
    # the restored copy kept the triggers and the application role's limits
    with PostgresStore(app_url) as attacker:
        for statement in ("DELETE FROM agentgate_revocations", "UPDATE audit_log SET idx = idx",
                          "ALTER TABLE audit_log DISABLE TRIGGER ALL"):  # fmt: skip
            with (
                pytest.raises(StoreError, match=r"permission denied|must be owner"),
                attacker.transaction() as tx,
            ):
                tx.execute(statement)
    with PostgresStore(owner_url) as own, pytest.raises(StoreError), own.transaction() as tx:
        tx.execute("DELETE FROM audit_log")  # the append-only trigger, restored with the dump


# --- "Who may read the SQLite file": the auditor's copy, between two accounts neither of them root --

OWNER, AUDITOR = 101, 65534  # the store's owner and the auditor: two accounts, neither root

_AS = """
import os, subprocess, sys
import agentgate.store._postgres
from agentgate.cli.main import build_parser, main
build_parser()  # everything imported before the account changes: the venv is root's
uid = int(sys.argv[1])
os.setgroups([]); os.setgid(uid); os.setuid(uid)
os.umask(0o022)
if sys.argv[2] == "agentgate":
    sys.exit(main(sys.argv[3:]))
sys.exit(subprocess.run(sys.argv[2:], capture_output=True).returncode)
"""


def _as(uid: int, *argv: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("AGENTGATE_STORE", None)
    return subprocess.run([sys.executable, "-c", _AS, str(uid), *argv], cwd="/", env=env,
                          capture_output=True, text=True, timeout=60)  # fmt: skip


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("sqlite3") is None, reason="root and sqlite3")
def test_the_auditors_copy_goes_through_a_handover_directory(capsys: pytest.CaptureFixture[str]) -> None:
    """The doc had the owner write the copy "into a directory the auditor owns": as any account
    but root that fails (``cannot open``); review r43 checked it with the copy made by root. As
    corrected: the owner writes into a directory of its own that the auditor can read, and the
    auditor copies the file into a directory of its own, where it verifies."""
    import tempfile

    base = Path(tempfile.mkdtemp(prefix="agentgate-r46-"))
    try:
        base.chmod(0o755)
        store = base / "app" / ".agentgate" / "agentgate.db"
        assert _cli(capsys, "store", "init", "--store", str(store))[0] == 0
        assert _cli(capsys, "audit", "checkpoint", "--store", str(store))[0] == 0
        for path in (base / "app", store.parent, *store.parent.iterdir()):
            os.chown(path, OWNER, OWNER)
        audit, handover = base / "audit", base / "handover"
        audit.mkdir(mode=0o700)
        os.chown(audit, AUDITOR, AUDITOR)
        handover.mkdir(mode=0o755)
        os.chown(handover, OWNER, OWNER)
        # as the doc said: straight into the auditor's directory
        assert _as(OWNER, "sqlite3", str(store), f".backup {audit / 'agentgate.db'}").returncode != 0
        # as it says now
        assert _as(OWNER, "sqlite3", str(store), f".backup {handover / 'agentgate.db'}").returncode == 0
        assert _as(OWNER, "cp", str(store.parent / "log.pub"), str(handover)).returncode == 0
        in_place = _as(AUDITOR, "agentgate", "audit", "verify", "--store", str(handover / "agentgate.db"),
                       "--key", str(handover / "log.pub"))  # fmt: skip
        # Read in place since review R56 (a verb that only reads opens the store to read only); it
        # was exit 2, "attempt to write a readonly database", and the copy stays as it was.
        assert in_place.returncode == 0 and in_place.stdout.startswith("intact: "), in_place
        assert sorted(p.name for p in handover.iterdir()) == ["agentgate.db", "log.pub"]
        copied = _as(AUDITOR, "cp", str(handover / "agentgate.db"), str(handover / "log.pub"), str(audit))
        assert copied.returncode == 0
        done = _as(AUDITOR, "agentgate", "audit", "verify", "--store", str(audit / "agentgate.db"),
                   "--key", str(audit / "log.pub"))  # fmt: skip
        assert done.returncode == 0 and done.stdout.startswith("intact: "), done
        text = DOCS.read_text()
        assert "/srv/handover/agentgate.db" in text and "into a directory the auditor owns" not in text
    finally:
        shutil.rmtree(base, ignore_errors=True)
