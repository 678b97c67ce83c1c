"""Review R94: a Ctrl-C or SIGTERM after a verb's work is committed, before its line is said.

``store prune`` committed its transaction, then closed the store and only then printed its
counts: a SIGTERM while the store closed said ``agentgate: terminated``, exit 143, no counts,
though the rows were gone (``budget settle`` and ``tasks settle`` had the same window). The
signal is sent from the grants' repository's ``close`` (after the commit): deterministic."""

from __future__ import annotations

import os
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from test_cli_r64_store_prune_atomic import _counts, _over

from agentgate.cli.main import main
from agentgate.store import open_store
from agentgate.store.grants import GrantRepository


def _signalling_close(monkeypatch: pytest.MonkeyPatch, times: int) -> None:
    close: Callable[[Any], None] = GrantRepository.close

    def signalled(self: Any) -> None:
        close(self)
        for _ in range(times):
            os.kill(os.getpid(), signal.SIGTERM)
            for _ in range(1000):
                pass  # where the interpreter runs the signal's Python handler

    monkeypatch.setattr(GrantRepository, "close", signalled)


def test_a_sigterm_after_the_prune_committed_leaves_it_said_and_exit_0(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Rule: from the commit until the counts are said, the first signal is dropped: the counts
    are printed, exit 0; SIGTERM's handler is put back as it was once the command ends."""
    path = str(tmp_path / "agentgate.db")
    with open_store(path) as store:
        _over(store)
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
    path = str(tmp_path / "agentgate.db")
    with open_store(path) as store:
        _over(store)
    capsys.readouterr()
    _signalling_close(monkeypatch, times=2)
    code = main(["store", "prune", "--older-than", "30d", "--store", path])
    out, err = capsys.readouterr()
    assert (code, out, err) == (143, "", "agentgate: terminated\n")
