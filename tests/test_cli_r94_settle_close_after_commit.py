"""Review R94's regression pass: ``budget settle`` and ``tasks settle`` whose store cannot be
closed after their settlement committed said ``agentgate: error: ...``, exit 2, and no ``settled
...`` line, though the settlement was stored (``store prune`` was fixed alone). Now the line is
said, a warning says the settlement committed and the store could not be closed, exit 0."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from test_cli_r83_committed_then_unwritable import _allowed
from test_gate_once import PAY

from agentgate.capabilities import Call
from agentgate.cli.main import main
from agentgate.errors import StoreError
from agentgate.store import SQLiteStore
from agentgate.store.once import OnceCalls

WARNING = (
    "agentgate: warning: the settlement committed, but the store could not be closed: "
    "the connection could not be closed\n"
)


def _failing_close(monkeypatch: pytest.MonkeyPatch) -> None:
    close: Callable[[Any], None] = SQLiteStore.close

    def failing(self: Any) -> None:
        close(self)
        raise StoreError("the connection could not be closed")

    monkeypatch.setattr(SQLiteStore, "close", failing)


def test_budget_settle_whose_store_cannot_be_closed_after_its_commit_says_so_and_exits_0(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    path, reservation, _ = _allowed(tmp_path, Call.tool("lookup", {"id": "o-1"}))  # not once-only
    capsys.readouterr()
    _failing_close(monkeypatch)
    argv = ["budget", "settle", reservation, "--not-run", "--by", "ops", "--older-than", "0"]
    code = main([*argv, "--store", str(path)])
    monkeypatch.undo()
    out, err = capsys.readouterr()
    assert (code, err) == (0, WARNING), err
    assert out.startswith(f"settled reservation {reservation} "), out
    with SQLiteStore(path) as store:
        assert store.query("SELECT state FROM budget_reservations WHERE id = ?", (reservation,)) == [
            ("released",)
        ]


def test_tasks_settle_whose_store_cannot_be_closed_after_its_commit_says_so_and_exits_0(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    path, _, _ = _allowed(tmp_path, PAY)
    with SQLiteStore(path) as store:
        ((key,),) = store.query("SELECT key FROM agentgate_once")
    capsys.readouterr()
    _failing_close(monkeypatch)
    code = main(["tasks", "settle", key, "--ran", "--by", "ops", "--older-than", "0", "--store", str(path)])
    monkeypatch.undo()
    out, err = capsys.readouterr()
    assert (code, err) == (0, WARNING), err
    assert out.startswith(f"settled {key} "), out
    with SQLiteStore(path) as store:
        assert OnceCalls(store).unsettled() == []
