"""Backing up a store, acting, and restoring the older copy.

Real SQLite files (``sqlite3`` online backup, file copies, processes killed with SIGKILL) and a
real PostgreSQL server (``pg_dump -Fc`` / ``pg_restore``), a real ``Gate`` and the real CLI.

What holds:

- ``agentgate audit verify --checkpoint SAVED`` (and ``AuditLog.verify(saved)``) reports a store
  restored from a backup older than the checkpoint saved outside it: exit 1, "restored from an
  older copy", with the log's size as the first bad index, on SQLite and PostgreSQL. The store's
  own checkpoints are of the restored copy: ``audit verify`` without ``--checkpoint`` says
  ``intact`` (nothing inside the store can tell), as the docs say.
- It still does after the restored store decided again and its log grew past the saved
  checkpoint's size (the root at that size differs), also after a checkpoint signed on the
  restored copy. Fixed in ``agentgate/cli/audit.py`` (review r44): the command then printed only
  "root does not match the entries; an entry in [4, 7) was changed together with its leaf hash";
  it now adds that the log is intact by its own checkpoints but does not extend the saved
  checkpoint (restored from an older copy), and says nothing of the kind for a log edited in place.
- ``agentgate audit checkpoint --out SAVED`` refuses to sign over a restored copy (exit 1, the
  file left as it was).
- What restoring reopens, as docs/operations.md ("Backup and restore", "Backups and restoring")
  now says: a grant revoked after the backup decides ``allow`` again; budget spent after it is
  back; an approval used after it is usable again for the same call, and a call of a tool that
  must run once that ran after it runs again (its once record is gone). Revoking again after the
  restore (``Gate.revoke``) closes the grant again.
- A SQLite backup copied over the database file while a ``-wal`` file of the newer store is left
  beside it (a process killed, not stopped) is not what the next process opens: SQLite replays
  the newer WAL onto the restored file, and the "restored" store holds the newer state, with no
  error. Moving ``-wal`` and ``-shm`` aside first restores the backup exactly. The docs' restore
  steps now say so.
- A backup copied over the file of a store that a process still has open (``cp``, same inode) is
  not detected by that process (its commits go on "succeeding"); once enough was written for
  SQLite to checkpoint its WAL, what it committed after the copy is gone when the store is opened
  again. Not something a process can see (the inode check catches a file replaced or moved, not one
  overwritten in place; another process sharing the file writes it legitimately): documented as
  "stop every process first", and ``audit verify --checkpoint`` reports the loss.

Fixed by the lead (was a strict xfail): ``AuditLog.verify`` reported a restored log that had
grown past the saved checkpoint as "root does not match the entries; an entry in [lo, hi) was
changed together with its leaf hash", naming no restore and blaming an edit. The problem of a
size only the saved checkpoint gives now says that the log does not extend the saved checkpoint
(restored from an older copy, or forked, and grown again) and up to which stored checkpoint it
agrees; the command line prints it (it had a second pass over the log of its own for it).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from agentgate.capabilities import Call
from agentgate.cli.main import main
from agentgate.gate import AgentIdentity, Approval, Gate
from agentgate.keys import SigningKey, save_key
from agentgate.policy import parse_policy
from agentgate.store import SQLiteStore, Store
from agentgate.store._pgserver import pg_binary
from agentgate.store.audit import AuditLog

ROOT = Path(__file__).resolve().parents[1]
KEYS = {name: SigningKey(bytes([n + 0x41]) * 32) for n, name in enumerate(["root", "agent", "boss", "log"])}
ORIGIN = "r44.rollback/audit"

POLICY = """
version: 1
trust_anchors:
  root: {{did: "{root}"}}
tenants:
  t: {{}}
principals:
  agent: {{kind: agent, did: "{agent}", tenant: t, roles: [worker]}}
  boss: {{kind: human, did: "{boss}", tenant: t, roles: [owner]}}
tools:
  pay:
    args: {{amount: {{type: integer, required: true}}}}
    loggable: [amount]
  look:
    idempotent: true
roles:
  worker:
    kind: agent
    capabilities: [{{resource: tool:pay}}, {{resource: tool:look}}]
    budget: {{limit: 5, unit: calls}}
    ttl_s: 3600
  owner:
    kind: human
    capabilities: [{{resource: tool:pay}}]
    ttl_s: 3600
approvals:
  pay: {{resource: tool:pay, approvers: [boss], expiry_s: 600}}
"""
"""``pay`` must run once (not idempotent) and needs the boss's approval; ``look`` is free of both."""


def _gate(store: Store) -> Gate:
    policy = parse_policy(POLICY.format(**{n: k.did for n, k in KEYS.items()}), source="r44.yaml")
    return Gate(policy, store, log_key=KEYS["log"])


def _log(store: Store) -> AuditLog:
    return AuditLog(store, KEYS["log"], origin=ORIGIN)


def _sqlite_backup(db: Path, to: Path) -> None:
    """``sqlite3 DB ".backup TO"``: SQLite's online backup, consistent while agentgate runs."""
    source, target = sqlite3.connect(db), sqlite3.connect(to)
    try:
        source.backup(target)
    finally:
        target.close()
        source.close()


def _restore_sqlite(backup: Path, db: Path) -> None:
    """The restore of docs/operations.md: every process stopped, ``-wal``/``-shm`` moved aside,
    the backup copied in."""
    for suffix in ("-wal", "-shm"):
        Path(f"{db}{suffix}").unlink(missing_ok=True)
    shutil.copyfile(backup, db)


PAY = Call.tool("pay", {"amount": 5})
LOOK = Call.tool("look", {})


def _day(gate: Gate, store: Store, backup: Any) -> tuple[AgentIdentity, AgentIdentity, Approval, str]:
    """Before the backup: two grants, an approval asked for and signed, a checkpoint. ``backup()``
    is taken. After it: the approval used and the once-only call run, a ``look`` spent, the second
    grant revoked, a checkpoint saved (returned: it is what an operator keeps outside)."""
    agent = gate.issue(KEYS["root"], name="agent", key=KEYS["agent"], role="worker")
    other = gate.issue(KEYS["root"], name="agent", key=KEYS["agent"], role="worker")
    asked = gate.authorize(agent, PAY, call_id="c1", run_id="r1")
    assert asked.needs_approval
    approval = Approval.sign(asked.approval_payload(), KEYS["boss"])
    gate.flush()
    _log(store).checkpoint()
    backup()
    allowed = gate.authorize(agent, PAY, approval=approval, call_id="c1", run_id="r1")
    assert allowed.verdict == "allow"
    assert gate.run(allowed, lambda: "paid", call_id="c1", run_id="r1") == "paid"
    look = gate.authorize(agent, LOOK)
    assert gate.run(look, lambda: "seen") == "seen"
    gate.revoke(other, reason="after the backup")
    # Before the restore, all of it holds: the approval is spent, the call ran, the grant is revoked.
    assert gate.authorize(agent, PAY, approval=approval, call_id="c1", run_id="r1").verdict == "deny"
    assert gate.authorize(other, LOOK).verdict == "deny"
    assert next(iter(gate.budget_usage(agent).values())) == (2, 5)
    gate.flush()
    saved = _log(store).checkpoint()
    return agent, other, approval, saved


def _after_restore(gate: Gate, store: Store, agent: AgentIdentity, other: AgentIdentity, approval: Approval,
                   saved: str, backup_size: int, redo: Any = None) -> None:  # fmt: skip
    """What the restored store decides, and what the saved checkpoint says about it."""
    log = _log(store)
    assert log.verify().ok  # the store alone cannot tell: its checkpoints are the backup's
    report = log.verify(saved)
    assert not report.ok and report.first_bad_index == backup_size
    assert any("restored from an older copy" in p for p in report.problems), report.problems
    # Budget spent after the backup is back.
    assert next(iter(gate.budget_usage(agent).values())) == (0, 5)
    # The revoked grant decides allow again until it is revoked once more.
    again = gate.authorize(other, LOOK)
    assert again.verdict == "allow"
    gate.run(again, lambda: "seen")
    # The approval used after the backup is usable again, and the once-only call runs again.
    replay = gate.authorize(agent, PAY, approval=approval, call_id="c1", run_id="r1")
    assert replay.verdict == "allow", replay.reasons
    assert gate.run(replay, lambda: "paid again", call_id="c1", run_id="r1") == "paid again"
    # What the docs say to do: revoke again (idempotent, kept outside the store).
    if redo is None:
        gate.revoke(other, reason="again, after the restore")
    else:
        redo()
    assert gate.authorize(other, LOOK).verdict == "deny"
    gate.flush()
    # The restored log grows: the saved checkpoint still exposes it, with or without new checkpoints.
    assert not log.verify(saved).ok


def test_a_sqlite_store_restored_from_an_older_backup_reopens_what_came_after_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Also the docs' way to redo the revocations when the newer store can still be read: its
    ``revoke`` entries from the backup's size on (``audit show --kind revoke --from N --json``),
    each revoked again with ``agentgate grant revoke ID``."""
    db, backup, newer = tmp_path / "agentgate.db", tmp_path / "backup.db", tmp_path / "newer.db"
    store = SQLiteStore(db)
    gate = _gate(store)
    agent, other, approval, saved = _day(gate, store, lambda: _sqlite_backup(db, backup))
    with SQLiteStore(backup) as copy:
        backup_size = _log(copy).size()
    gate.close()
    store.close()
    shutil.copyfile(db, newer)  # the store being replaced, kept aside (stopped: no -wal left)
    _restore_sqlite(backup, db)
    monkeypatch.setenv("AGENTGATE_LOG_ORIGIN", ORIGIN)
    key_file, pub = save_key(KEYS["log"], tmp_path / "keys", "log")
    monkeypatch.setenv("AGENTGATE_LOG_KEY", str(key_file))

    def redo() -> None:
        gate.flush()
        code, out = _cli(
            capsys, "audit", "show", "--store", str(newer), "--key", str(pub), "--kind", "revoke",
            "--from", str(backup_size), "--json",
        )  # fmt: skip
        assert code == 0, out
        lost = [json.loads(line)["chain_hash"] for line in out.splitlines()]
        assert lost == [other.chain.tip.id]
        for grant_id in lost:
            monkeypatch.setenv("AGENTGATE_STORE", str(db))
            code, out = _cli(capsys, "grant", "revoke", grant_id, "--reason", "redone")
            assert code == 0, out

    store = SQLiteStore(db)
    gate = _gate(store)
    try:
        _after_restore(gate, store, agent, other, approval, saved, backup_size, redo)
    finally:
        gate.close()
        store.close()


@pytest.mark.postgres
def test_a_postgres_store_restored_with_pg_restore_reopens_what_came_after_it(postgres_server: Any) -> None:
    if pg_binary("pg_dump") is None or pg_binary("pg_restore") is None:
        pytest.skip("pg_dump/pg_restore not installed")
    from agentgate.store._postgres import PostgresStore

    def pg(tool: str, *args: str) -> None:
        binary = pg_binary(tool)
        assert binary is not None
        done = postgres_server.run(
            binary, "-h", str(postgres_server.socket_dir), "-p", str(postgres_server.port),
            "-U", postgres_server.user, *args, check=False,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr

    def dbname(url: str) -> str:
        return url.split("@/", 1)[1].split("?", 1)[0]

    url = postgres_server.create_database()
    dump = postgres_server.root / f"{dbname(url)}.r44.dump"
    store = PostgresStore(url)
    gate = _gate(store)
    agent, other, approval, saved = _day(
        gate, store, lambda: pg("pg_dump", "-Fc", "-f", str(dump), dbname(url))
    )
    gate.close()
    store.close()
    restored = postgres_server.create_database()
    pg("pg_restore", "-d", dbname(restored), str(dump))
    with PostgresStore(restored) as probe:
        backup_size = _log(probe).size()
    store = PostgresStore(restored)
    gate = _gate(store)
    try:
        _after_restore(gate, store, agent, other, approval, saved, backup_size)
    finally:
        gate.close()
        store.close()


# --- the command line an operator runs after a restore -------------------------------------------


def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out + out.err


def _two_generations(tmp_path: Path, before: int, after: int) -> tuple[Path, Path, Path]:
    """A SQLite store of ``before`` entries backed up, then ``after`` more and a checkpoint saved
    to a file outside it (``agentgate audit checkpoint --out``): (db, backup, saved file)."""
    db, backup, saved = tmp_path / "agentgate.db", tmp_path / "backup.db", tmp_path / "last.checkpoint"
    with SQLiteStore(db) as store:
        log = _log(store)
        log.append_many([{"kind": "allow", "principal": "did:key:zA"}] * before)
        log.checkpoint()
        _sqlite_backup(db, backup)
        log.append_many([{"kind": "allow", "principal": "did:key:zB"}] * after)
        saved.write_text(log.checkpoint())
    return db, backup, saved


def test_audit_verify_and_checkpoint_on_the_command_line_refuse_a_restored_copy(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    db, backup, saved = _two_generations(tmp_path, 4, 3)
    _restore_sqlite(backup, db)
    monkeypatch.setenv("AGENTGATE_LOG_ORIGIN", ORIGIN)
    pub = tmp_path / "log.pub"
    pub.write_text(KEYS["log"].public.did + "\n")
    code, out = _cli(capsys, "audit", "verify", "--store", str(db), "--key", str(pub))
    assert code == 0 and "intact: 4 entries" in out  # the store alone cannot tell
    code, out = _cli(
        capsys, "audit", "verify", "--store", str(db), "--key", str(pub), "--checkpoint", str(saved)
    )
    assert code == 1 and "first bad index: 4" in out and "restored from an older copy" in out, out
    # Not said of a log edited in place: there the entries are what is wrong, not the copy.
    shutil.copyfile(db, tmp_path / "edited.db")
    conn = sqlite3.connect(tmp_path / "edited.db")
    conn.execute("DROP TRIGGER audit_log_no_update")
    conn.execute(
        "UPDATE audit_log SET entry = CAST(replace(CAST(entry AS TEXT), 'zA', 'zE') AS BLOB) WHERE idx = 1"
    )
    conn.commit()
    conn.close()
    code, out = _cli(
        capsys,
        "audit",
        "verify",
        "--store",
        str(tmp_path / "edited.db"),
        "--key",
        str(pub),
        "--checkpoint",
        str(saved),
    )
    assert code == 1 and "entry 1" in out and "does not extend" not in out, out
    # Signing over the restored copy is refused while the saved checkpoint is named, the file kept.
    before = saved.read_bytes()
    key_file, _ = save_key(KEYS["log"], tmp_path / "keys", "log")
    monkeypatch.setenv("AGENTGATE_LOG_KEY", str(key_file))
    code, out = _cli(capsys, "audit", "checkpoint", "--store", str(db), "--out", str(saved))
    assert code == 1 and "REFUSED" in out and "older copy" in out, out
    assert saved.read_bytes() == before


def test_a_restored_log_that_grew_past_the_saved_checkpoint_is_still_reported(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Gateways started on the restored copy before anyone ran verify: the log is longer than the
    saved checkpoint again, and the saved checkpoint still exposes it; the command line says what
    it means (the log itself is intact and does not extend the saved checkpoint)."""
    db, backup, saved = _two_generations(tmp_path, 4, 3)
    _restore_sqlite(backup, db)
    with SQLiteStore(db) as store:
        log = _log(store)
        log.append_many([{"kind": "allow", "principal": "did:key:zC"}] * 5)
        log.checkpoint()  # a checkpoint signed on the restored copy, at size 9
        assert log.verify().ok
        report = log.verify(saved.read_text())
    assert not report.ok and report.first_bad_index == 4
    monkeypatch.setenv("AGENTGATE_LOG_ORIGIN", ORIGIN)
    pub = tmp_path / "log.pub"
    pub.write_text(KEYS["log"].public.did + "\n")
    code, out = _cli(
        capsys, "audit", "verify", "--store", str(db), "--key", str(pub), "--checkpoint", str(saved)
    )
    assert code == 1 and "TAMPERED" in out
    assert "does not extend the saved checkpoint" in out and "restored from an older copy" in out, out


def test_the_api_names_a_restore_when_the_restored_log_grew_past_the_saved_checkpoint(tmp_path: Path) -> None:
    db, backup, saved = _two_generations(tmp_path, 4, 3)
    _restore_sqlite(backup, db)
    with SQLiteStore(db) as store:
        log = _log(store)
        log.append_many([{"kind": "allow", "principal": "did:key:zC"}] * 5)
        report = log.verify(saved.read_text())
    assert not report.ok
    assert any("saved checkpoint" in p and "older copy" in p for p in report.problems), report.problems


# --- SQLite files: a stale -wal, and a copy over the file of a running process --------------------

_KILLED_WRITER = r"""
import os, signal, sqlite3, sys
from agentgate.keys import SigningKey
from agentgate.store import SQLiteStore
from agentgate.store.audit import AuditLog
db, backup, before, after, origin = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
store = SQLiteStore(db)
log = AuditLog(store, SigningKey(bytes([0x44]) * 32), origin=origin)
log.append_many([{"kind": "allow", "principal": "did:key:zA"}] * before)
source, target = sqlite3.connect(db), sqlite3.connect(backup)
source.backup(target)
target.close(); source.close()
log.append_many([{"kind": "allow", "principal": "did:key:zB"}] * after)
sys.stdout.write(log.checkpoint()); sys.stdout.flush()
os.kill(os.getpid(), signal.SIGKILL)  # killed, not stopped: its -wal stays
"""


def test_a_backup_copied_in_beside_a_stale_wal_is_not_what_opens(tmp_path: Path) -> None:
    """A process killed (not stopped) leaves its ``-wal``; an operator who copies the backup over
    the database file and leaves the ``-wal`` there gets the newer store back, silently: SQLite
    replays the WAL onto the restored file. Moving ``-wal`` and ``-shm`` aside restores the backup."""
    db, backup = tmp_path / "agentgate.db", tmp_path / "backup.db"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", _KILLED_WRITER, str(db), str(backup), "3", "2", ORIGIN],
        capture_output=True, text=True, env=env, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == -signal.SIGKILL, done.stderr
    saved = done.stdout
    assert Path(f"{db}-wal").stat().st_size > 0
    kept = tmp_path / "kept"
    kept.mkdir()
    for suffix in ("-wal", "-shm"):
        shutil.copyfile(f"{db}{suffix}", kept / f"agentgate.db{suffix}")
    shutil.copyfile(backup, db)  # the copy without moving the -wal aside
    with SQLiteStore(db) as store:
        log = _log(store)
        assert log.size() == 5  # not the backup's 3: the newer WAL was replayed onto it
        assert log.verify(saved).ok  # and nothing says a restore was attempted
        assert store.query("PRAGMA integrity_check") == [("ok",)]
    _restore_sqlite(backup, db)  # the docs' steps: -wal and -shm moved aside first
    with SQLiteStore(db) as store:
        log = _log(store)
        assert log.size() == 3
        report = log.verify(saved)
        assert not report.ok and report.first_bad_index == 3


def test_a_backup_copied_over_the_file_of_a_running_process_is_not_detected(tmp_path: Path) -> None:
    """``cp backup.db agentgate.db`` while a process has the store open (the same inode: not the
    "replaced or moved" that the store's inode check catches): the process goes on committing,
    and once SQLite has checkpointed its WAL into the file, what it committed is gone when the
    store is opened again. Only the saved checkpoint shows it; the docs say to stop every process."""
    db, backup = tmp_path / "agentgate.db", tmp_path / "backup.db"
    n = 1500  # enough for SQLite to checkpoint the WAL into the file (DURABLE_WAL_PAGES)
    store = SQLiteStore(db)
    try:
        log = _log(store)
        log.append_many([{"kind": "allow", "principal": "did:key:zA"}] * n)
        _sqlite_backup(db, backup)
        log.append_many([{"kind": "allow", "principal": "did:key:zB"}] * n)
        saved = log.checkpoint()
        shutil.copyfile(backup, db)  # in place
        assert os.stat(db).st_size == os.stat(backup).st_size
        log.append_many([{"kind": "allow", "principal": "did:key:zC"}] * 3)  # not refused
        assert log.size() == 2 * n + 3  # as the process sees it
    finally:
        store.close()
    with SQLiteStore(db) as store:
        log = _log(store)
        assert log.size() < 2 * n + 3  # committed, and gone
        report = log.verify(saved)
        assert not report.ok and any("older copy" in p for p in report.problems)
