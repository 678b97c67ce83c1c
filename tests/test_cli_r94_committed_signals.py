"""Review R94: a Ctrl-C or SIGTERM after a verb's work is committed, before its line is said.

``store prune`` committed its transaction, then closed the store and only then printed its
counts: a SIGTERM while the store closed said ``agentgate: terminated``, exit 143, no counts,
though the rows were gone (``budget settle`` and ``tasks settle`` had the same window). The
signal is sent from the grants' repository's ``close`` (after the commit): deterministic.

``budget settle`` and ``tasks settle`` then held a signal only once the call that commits had
returned: one during the COMMIT (SQLite runs it to its end, then Python runs the handler) still
said ``agentgate: terminated``, exit 143, no line, though the settlement was stored (review R94's
regression pass). The signal is sent as the COMMIT after the verb's UPDATE returns."""

from __future__ import annotations

import os
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from test_cli_r64_store_prune_atomic import _counts, _pruneable
from test_cli_r83_committed_then_unwritable import _allowed
from test_gate_once import PAY

from agentgate.capabilities import Call
from agentgate.cli.main import main
from agentgate.store import SQLiteStore, _sqlite, open_store
from agentgate.store.grants import GrantRepository
from agentgate.store.once import OnceCalls


def _sigterm() -> None:
    """A SIGTERM to this process, then bytecode where the interpreter runs its Python handler."""
    os.kill(os.getpid(), signal.SIGTERM)
    for _ in range(1000):
        pass


def _signalling_close(monkeypatch: pytest.MonkeyPatch, times: int) -> None:
    close: Callable[[Any], None] = GrantRepository.close

    def signalled(self: Any) -> None:
        close(self)
        for _ in range(times):
            _sigterm()

    monkeypatch.setattr(GrantRepository, "close", signalled)


def test_a_sigterm_after_the_prune_committed_leaves_it_said_and_exit_0(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Rule: from the commit until the counts are said, the first signal is dropped: the counts
    are printed, exit 0; SIGTERM's handler is put back as it was once the command ends."""
    path = _pruneable(tmp_path)
    capsys.readouterr()
    before = signal.getsignal(signal.SIGTERM)
    _signalling_close(monkeypatch, times=1)
    code = main(["store", "prune", "--older-than", "30d", "--store", path])
    out, err = capsys.readouterr()
    assert (code, err) == (0, ""), err
    assert "dead letters: 1 pruned" in out, out
    assert signal.getsignal(signal.SIGTERM) == before
    with open_store(path) as store:
        assert _counts(store) == (0, 0, 0)


def test_a_second_sigterm_after_the_commit_acts_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Rule: the operator insisting (a second signal) ends the command at once, as ever: its
    line, exit 143."""
    path = _pruneable(tmp_path)
    capsys.readouterr()
    _signalling_close(monkeypatch, times=2)
    code = main(["store", "prune", "--older-than", "30d", "--store", path])
    out, err = capsys.readouterr()
    assert (code, out, err) == (143, "", "agentgate: terminated\n")


def _signalling_commit(monkeypatch: pytest.MonkeyPatch) -> None:
    """A SIGTERM as the first COMMIT after an UPDATE (the settlement's) returns: where a signal
    delivered during SQLite's COMMIT has Python run its handler."""
    armed: list[str] = []

    class Signalling(_sqlite._Connection):
        def execute(self, sql: str, *args: Any) -> Any:
            result = super().execute(sql, *args)
            if sql.lstrip().upper().startswith("UPDATE"):
                armed.append(sql)
            elif sql == "COMMIT" and armed:
                armed.clear()
                _sigterm()
            return result

    monkeypatch.setattr(_sqlite, "_Connection", Signalling)


def budget_settled(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    disturb: Callable[[pytest.MonkeyPatch], None],
) -> str:
    """``budget settle`` of a held reservation (of a call not once-only), ``disturb`` applied to
    ``monkeypatch`` first and undone once the command ends; checks exit 0, its settled line and
    the reservation released, and returns what it said on stderr."""
    path, reservation, _ = _allowed(tmp_path, Call.tool("lookup", {"id": "o-1"}))
    capsys.readouterr()
    disturb(monkeypatch)
    argv = ["budget", "settle", reservation, "--not-run", "--by", "ops", "--older-than", "0"]
    code = main([*argv, "--store", str(path)])
    monkeypatch.undo()
    out, err = capsys.readouterr()
    assert code == 0, err
    assert out.startswith(f"settled reservation {reservation} "), out
    with SQLiteStore(path) as store:
        assert store.query("SELECT state FROM budget_reservations WHERE id = ?", (reservation,)) == [
            ("released",)
        ]
    return err


def tasks_settled(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    disturb: Callable[[pytest.MonkeyPatch], None],
) -> str:
    """``tasks settle`` of an unsettled call that must run once, as ``budget_settled``: checks
    exit 0, its settled line and no call left unsettled, and returns its stderr."""
    path, _, _ = _allowed(tmp_path, PAY)
    with SQLiteStore(path) as store:
        ((key,),) = store.query("SELECT key FROM agentgate_once")
    capsys.readouterr()
    disturb(monkeypatch)
    code = main(["tasks", "settle", key, "--ran", "--by", "ops", "--older-than", "0", "--store", str(path)])
    monkeypatch.undo()
    out, err = capsys.readouterr()
    assert code == 0, err
    assert out.startswith(f"settled {key} "), out
    with SQLiteStore(path) as store:
        assert OnceCalls(store).unsettled() == []
    return err


def test_a_sigterm_during_budget_settles_commit_leaves_it_said_and_exit_0(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Rule: a signal from the settlement's COMMIT on is dropped: its line is said, exit 0."""
    before = signal.getsignal(signal.SIGTERM)
    assert budget_settled(tmp_path, monkeypatch, capsys, _signalling_commit) == ""
    assert signal.getsignal(signal.SIGTERM) == before


def test_a_sigterm_during_tasks_settles_commit_leaves_it_said_and_exit_0(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Rule: as ``budget settle``: the call settled, its line said, exit 0."""
    assert tasks_settled(tmp_path, monkeypatch, capsys, _signalling_commit) == ""
