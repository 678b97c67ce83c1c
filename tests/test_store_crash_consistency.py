"""Crash consistency and durability: a real process killed or its store pulled away."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentgate.capabilities import Call
from agentgate.errors import StoreError
from agentgate.keys import SigningKey, load_public_key, load_signing_key, save_key
from agentgate.store import SQLiteStore
from agentgate.store.audit import AuditLog, open_log_key
from agentgate.store.grants import GrantRepository

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}
ENV.pop("AGENTGATE_LOG_KEY", None)
ENV.pop("AGENTGATE_LOG_PREVIOUS_KEYS", None)

# `agentgate audit checkpoint` (which makes the log key) with os.link paused after its first link.
PAUSED = """
import os, sys, time
real = os.link
def link(*args, **kwargs):
    real(*args, **kwargs)
    print("linked", os.path.basename(args[1]), flush=True)
    time.sleep(600)
os.link = link
from agentgate.cli.main import main
sys.exit(main(["audit", "checkpoint", "--store", sys.argv[1]]))
"""


# --- the log key: a process killed while it created it ------------------------------------------


@pytest.fixture
def half_made_log_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[SQLiteStore]:
    """A store whose log key a real ``audit checkpoint`` was creating when it was SIGKILLed."""
    monkeypatch.delenv("AGENTGATE_LOG_KEY", raising=False)
    monkeypatch.delenv("AGENTGATE_LOG_PREVIOUS_KEYS", raising=False)
    db = tmp_path / "store" / "agentgate.db"
    with SQLiteStore(db) as store:
        AuditLog(store, SigningKey.generate().public)  # the tables, no key yet
    process = subprocess.Popen(
        [sys.executable, "-c", PAUSED, str(db)], env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    assert process.stdout is not None and process.stderr is not None
    line = process.stdout.readline()
    process.send_signal(signal.SIGKILL)
    process.wait(30)
    process.stdout.close()
    process.stderr.close()
    assert line == b"linked log.key\n"
    assert not (db.parent / "log.pub").exists()
    with SQLiteStore(db) as store:
        yield store


def test_a_log_key_left_half_made_by_a_kill_is_never_used_to_sign(half_made_log_key: SQLiteStore) -> None:
    """Before: the next process signed checkpoints with the half-made key (no log.pub ever), and
    the next ``keys new`` in that directory removed it as a leftover: the log key was gone, the
    log could not be checkpointed any more (KeyFileError) nor verified without a key."""
    store = half_made_log_key
    key = open_log_key(store)
    directory = store.path.parent
    assert load_public_key(directory / "log.pub").did == key.did
    log = AuditLog(store, key)
    log.append({"kind": "deny", "principal": "did:key:zCaller"})
    log.checkpoint()
    save_key(SigningKey.generate(), directory, "other")  # `agentgate keys new other --dir` there
    assert load_signing_key(directory / "log.key").did == key.did
    assert open_log_key(store).did == key.did
    assert sorted(p.name for p in directory.glob("*.*") if p.suffix in (".key", ".pub", ".tmp")) == [
        "log.key",
        "log.pub",
        "other.key",
        "other.pub",
    ]
    assert log.verify().ok


def test_a_log_key_installed_without_its_pub_is_still_the_log_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Only a key ``save_key`` left half-made is replaced; one put there by hand (linked once) is used."""
    monkeypatch.delenv("AGENTGATE_LOG_KEY", raising=False)
    save_key(mine := SigningKey.generate(), tmp_path / "keys", "log")
    (tmp_path / "keys" / "log.pub").unlink()
    shutil.move(tmp_path / "keys" / "log.key", tmp_path / "log.key")
    with SQLiteStore(tmp_path / "agentgate.db") as store:
        assert open_log_key(store).did == mine.did
    assert not (tmp_path / "log.pub").exists()


# --- the store file removed, moved or replaced under a running process --------------------------


def _remove_directory(db: Path) -> None:
    shutil.rmtree(db.parent)


def _remove_file(db: Path) -> None:
    for name in (db.name, db.name + "-wal", db.name + "-shm"):
        (db.parent / name).unlink()


def _replace_file(db: Path) -> None:
    """What ``mv restored.db agentgate.db`` does: another file at the path."""
    with SQLiteStore(db.parent / "restored.db"):
        pass
    os.replace(db.parent / "restored.db", db)


@pytest.mark.parametrize("pull", [_remove_directory, _remove_file, _replace_file])
def test_a_gate_whose_store_file_is_gone_allows_nothing(tmp_path: Path, pull: object) -> None:
    """Before: every decision was allowed and committed into the removed file, so its entry, its
    budget and its nonce vanished with the process (and revocations made at the path meanwhile
    were never read)."""
    from test_gate import Setup

    setup = Setup(tmp_path / "store")
    try:
        assert setup.gate.authorize(setup.agent, Call.model("small"), tokens=(10, 10)).allowed
        setup.gate.flush()
        assert callable(pull)
        pull(tmp_path / "store" / "agentgate.db")
        with pytest.raises(StoreError, match="removed, moved or replaced while in use"):
            setup.gate.authorize(setup.agent, Call.model("small"), tokens=(10, 10))
    finally:
        setup.gate.close()


def test_an_unbound_nonce_is_not_recorded_in_a_removed_store(tmp_path: Path) -> None:
    db = tmp_path / "store" / "agentgate.db"
    with SQLiteStore(db) as store:
        grants = GrantRepository(store)
        assert grants.consume_nonce("did:key:zA", "n1", 2**40, ["g"]) == "fresh"
        _remove_directory(db)
        with pytest.raises(StoreError, match="removed, moved or replaced while in use"):
            grants.consume_nonce("did:key:zA", "n2", 2**40, ["g"])
        grants.close()


@pytest.mark.parametrize("pull", [_remove_directory, _replace_file])
def test_revocations_are_never_read_from_a_store_file_removed_or_replaced(
    tmp_path: Path, pull: object
) -> None:
    """Review R56: revocations read outside a transaction (``Authority.decide_held`` without a
    Gate, the gateway's checks) came from the file the process had opened, after ``mv restored.db
    agentgate.db`` put another at the path: a revocation made there since was not seen."""
    db = tmp_path / "store" / "agentgate.db"
    with SQLiteStore(db) as store:
        grants = GrantRepository(store)
        assert grants.revoked(["g"]) == set()
        assert callable(pull)
        pull(db)
        if db.exists():
            with SQLiteStore(db) as restored:  # another process revokes the grant at the path
                GrantRepository(restored).revoke("g", now=1)
        with pytest.raises(StoreError, match="removed, moved or replaced while in use"):
            grants.revoked(["g"])
        grants.close()


def test_a_store_opened_by_a_relative_path_stays_that_file_after_a_chdir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A tool that changes the working directory moves no store: new connections open the same file."""
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path)
    with SQLiteStore("agentgate.db") as store:
        log = AuditLog(store, SigningKey.generate())
        monkeypatch.chdir(tmp_path / "elsewhere")
        with store.transaction() as outer:  # the pooled connection is busy: the next one is new
            log.append({"kind": "deny", "principal": "did:key:zA"}, tx=outer)
            with store.transaction(immediate=False) as inner:
                assert inner.execute("SELECT COUNT(*) FROM audit_log") == [(0,)]
        assert log.size() == 1
    assert not (tmp_path / "elsewhere" / "agentgate.db").exists()
