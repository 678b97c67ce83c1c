"""Review R86: after a log-key rotation done as docs/operations.md says (``AGENTGATE_LOG_PREVIOUS_KEYS``
kept set, as it must be for as long as the log is verified), a process that found no log key (a
missing mount, another working directory) made a throwaway key and reported the log as possibly
tampered with (exit 1). A key is now made only while the log's latest checkpoint is signed by a
key the variable lists (the rotation under way); once the new key has signed one, a key not found
is the refusal a log with checkpoints always gets: exit 2, naming ``AGENTGATE_LOG_KEY``, no key
made."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentgate.cli.main import main
from agentgate.errors import KeyFileError
from agentgate.store import SQLiteStore
from agentgate.store.audit import open_log_key


@pytest.fixture
def store_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A store whose log has one checkpoint, signed by the key ``log.key`` beside it."""
    for name in ("AGENTGATE_LOG_KEY", "AGENTGATE_LOG_PREVIOUS_KEYS", "AGENTGATE_LOG_ORIGIN"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AGENTGATE_STORE", str(tmp_path / "ag.db"))
    assert main(["store", "init"]) == 0
    assert main(["audit", "checkpoint"]) == 0
    return tmp_path


def _rotate(store_dir: Path, monkeypatch: pytest.MonkeyPatch, old: str, listed: list[str]) -> None:
    """The documented steps 2 to 4: the key moved aside as ``old``, the previous keys listed, the
    next checkpoint made under a new key."""
    (store_dir / "log.key").rename(store_dir / f"{old}.key")
    (store_dir / "log.pub").rename(store_dir / f"{old}.pub")
    monkeypatch.setenv("AGENTGATE_LOG_PREVIOUS_KEYS", ",".join(str(store_dir / f"{n}.pub") for n in listed))
    assert main(["audit", "checkpoint"]) == 0
    assert (store_dir / "log.key").exists()


def test_after_a_rotation_a_missing_log_key_is_refused_not_reported_as_tampering(
    store_dir: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _rotate(store_dir, monkeypatch, "log-1", ["log-1"])
    missing = store_dir / "mnt" / "log.key"
    monkeypatch.setenv("AGENTGATE_LOG_KEY", str(missing))
    capsys.readouterr()
    assert main(["audit", "checkpoint"]) == 2
    out, err = capsys.readouterr()
    assert "no log key there" in err and "AGENTGATE_LOG_KEY" in err and "TAMPER" not in out + err, (out, err)
    assert not missing.exists() and not missing.parent.exists()
    with SQLiteStore(store_dir / "ag.db") as store, pytest.raises(KeyFileError, match="no log key there"):
        open_log_key(store)
    assert not missing.exists()


def test_a_second_rotation_still_makes_a_key_while_the_latest_checkpoint_is_a_listed_keys(
    store_dir: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _rotate(store_dir, monkeypatch, "log-1", ["log-1"])
    _rotate(store_dir, monkeypatch, "log-2", ["log-1", "log-2"])
    capsys.readouterr()
    assert main(["audit", "verify"]) == 0, capsys.readouterr()
