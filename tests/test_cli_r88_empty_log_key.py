"""``AGENTGATE_LOG_KEY`` set but empty (``AGENTGATE_LOG_KEY=$UNSET`` in an env file) is refused,
as an empty ``AGENTGATE_STORE`` is (review R88): read as unset, ``audit checkpoint`` made a new
key beside the store and signed the log's first checkpoint with it, and the operator's real key
then read the log as tampered with."""

from __future__ import annotations

from pathlib import Path

import pytest
from _cli import cli

from agentgate.errors import KeyFileError
from agentgate.store import SQLiteStore
from agentgate.store.audit import log_key_path


def test_an_empty_log_key_variable_is_refused_by_the_library(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGENTGATE_LOG_KEY", "")
    with SQLiteStore(tmp_path / "s.db") as store, pytest.raises(KeyFileError, match="set but empty"):
        log_key_path(store)


def test_checkpoint_with_an_empty_log_key_variable_makes_no_key_and_signs_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    store = tmp_path / "s.db"
    monkeypatch.setenv("AGENTGATE_STORE", str(store))
    code, _, err = cli(capsys, "store", "init")
    assert code == 0, err
    monkeypatch.setenv("AGENTGATE_LOG_KEY", "")
    code, out, err = cli(capsys, "audit", "checkpoint")
    assert code == 2
    assert out == ""
    assert err == (
        "agentgate: error: AGENTGATE_LOG_KEY is set but empty: point it at the log key's file, "
        "or unset it for the default\n"
    )
    assert sorted(p.name for p in tmp_path.iterdir() if p.suffix in (".key", ".pub")) == []
