"""Review R94's regression pass: ``store prune`` whose grants' repository or store cannot be
closed after its commit said ``agentgate: error: nothing was pruned: ...``, exit 2 (or the store's
error, no counts), though the rows were gone. Now the counts are said, a warning says the prune
committed and the close failed, and the exit code is the prune's: 0."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from test_cli_r64_store_prune_atomic import _counts, _pruneable

from agentgate.cli.main import main
from agentgate.errors import StoreError
from agentgate.store import SQLiteStore, open_store
from agentgate.store.grants import GrantRepository


@pytest.mark.parametrize("owner", [GrantRepository, SQLiteStore], ids=["repository", "store"])
def test_a_close_failing_after_the_prune_committed_says_so_and_exits_0(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], owner: type[Any]
) -> None:
    path = _pruneable(tmp_path)
    capsys.readouterr()
    close: Callable[[Any], None] = owner.close

    def failing(self: Any) -> None:
        close(self)
        raise StoreError("the connection could not be closed")

    monkeypatch.setattr(owner, "close", failing)
    code = main(["store", "prune", "--older-than", "30d", "--store", path])
    monkeypatch.undo()
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "dead letters: 1 pruned" in out, out
    assert err == (
        "agentgate: warning: the prune committed, but the store could not be closed: "
        "the connection could not be closed\n"
    )
    with open_store(path) as store:
        assert _counts(store) == (0, 0, 0)
