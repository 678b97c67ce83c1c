"""Review R94's regression pass: ``budget settle`` and ``tasks settle`` whose store cannot be
closed after their settlement committed said ``agentgate: error: ...``, exit 2, and no ``settled
...`` line, though the settlement was stored (``store prune`` was fixed alone). Now the line is
said, a warning says the settlement committed and the store could not be closed, exit 0."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from test_cli_r94_committed_signals import budget_settled, tasks_settled

from agentgate.errors import StoreError
from agentgate.store import SQLiteStore

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
    assert budget_settled(tmp_path, monkeypatch, capsys, _failing_close) == WARNING


def test_tasks_settle_whose_store_cannot_be_closed_after_its_commit_says_so_and_exits_0(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert tasks_settled(tmp_path, monkeypatch, capsys, _failing_close) == WARNING
