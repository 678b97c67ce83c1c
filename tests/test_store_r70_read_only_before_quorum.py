"""A store of an earlier version read before `agentgate store init` has upgraded it: the verbs that
only read open it read only (docs/cli.md, Store) and bring no table up to this version, so a read
of a column it lacks fails; the error names the file and the command that upgrades that file."""

from __future__ import annotations

import shlex
import sqlite3
import time
from pathlib import Path

import pytest
from _cli import cli

EARLIER = Path(__file__).parent / "schema" / "earlier" / "896aa7a8.sqlite.sql"
"""The oldest store there is: its approvals table has no ``quorum`` (added 2026-11-29 17:27)."""


def _before_quorum(path: Path) -> Path:
    conn = sqlite3.connect(path)
    conn.executescript(
        EARLIER.read_text() + "INSERT INTO approvals (id, call_hash, requester, state, created, expires_at) "
        f"VALUES ('earlier', 'sha256:c', 'did:key:zAgent', 'pending', 1.0, {time.time() + 600});"
    )
    conn.close()
    return path


def test_approval_list_of_a_store_before_quorum_names_the_upgrade_of_that_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R70: `approval list --store old.db` said `agentgate store init` upgrades it, which
    without `--store` upgrades the default store (or AGENTGATE_STORE's), not old.db; it now
    gives the command for the file read. That command then lets the list be read."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("AGENTGATE_STORE", raising=False)
    old = _before_quorum(tmp_path / "old store.db")
    code, out, err = cli(capsys, "approval", "list", "--store", str(old))
    assert (code, out) == (2, ""), err
    [line] = err.splitlines()
    upgrade = f"agentgate store init --store {shlex.quote(str(old))}"
    assert line.startswith(f"agentgate: error: SQLite error on {old}: no such column: quorum"), line
    assert upgrade in line, line
    assert not (tmp_path / ".agentgate").exists()  # nothing written anywhere by the reader
    assert cli(capsys, *shlex.split(upgrade)[1:])[0] == 0
    code, out, err = cli(capsys, "approval", "list", "--store", str(old))
    assert code == 0 and "earlier" in out, err
