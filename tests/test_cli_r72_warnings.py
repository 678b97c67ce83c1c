"""Every warning of the `agentgate` command goes one way: one `agentgate: warning: ...` line on
standard error, said once, when the command ends (after its output; before its error line when it
fails, so that the error is the last line).

Until review R72 there were three ways: `grant delegate`'s unmetered budget and `grant revoke
--holder`'s rows were printed at once as `warning: ...`; `audit show`/`explain`'s unprotected log
and `grant revoke`'s as `agentgate: warning: ...`, before the output; `store prune`'s refused
grants as `agentgate: expired grants not pruned: ...` (no word of a warning); and the PostgreSQL
log key's was left in a list and said as `warning: ...` only if the command did not fail. Each test
runs the command as a user does, `python -m agentgate` in a child process, on real files and a real
SQLite store.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from test_audit_log import KEY, ORIGIN, _attack, _log

from agentgate.authority import Budget, issue
from agentgate.keys import load_signing_key

ROOT = Path(__file__).resolve().parents[1]


def _agentgate(cwd: Path, *argv: str, **env: str) -> subprocess.CompletedProcess[str]:
    environment = {**os.environ, "PYTHONPATH": str(ROOT), "AGENTGATE_LOG_ORIGIN": ORIGIN, **env}
    environment.pop("AGENTGATE_LOG_PREVIOUS_KEYS", None)
    return subprocess.run(
        [sys.executable, "-m", "agentgate", *argv],
        cwd=cwd,
        env=environment,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_grant_delegate_warns_with_the_one_prefix(tmp_path: Path) -> None:
    """Review R72: `grant delegate` under a parent that spends in a unit the Gate cannot meter said
    `warning: authority_chain_opacity ...`, where `audit show` says `agentgate: warning: ...`.
    Rule: one `agentgate: warning: ` line, exit 0, the token written."""
    store = str(tmp_path / "st.db")
    for name in ("root", "alice", "bob"):
        assert _agentgate(tmp_path, "keys", "new", name, "--dir", "k").returncode == 0
    assert _agentgate(tmp_path, "store", "init", "--store", store).returncode == 0
    root, alice = (
        load_signing_key(tmp_path / "k" / "root.key"),
        load_signing_key(tmp_path / "k" / "alice.key"),
    )
    chain = issue(root, alice.public, ["tool:x"], ttl=3600, budget=Budget(5, "gpu_seconds"), max_depth=1)
    (tmp_path / "p.tok").write_text(chain.token + "\n")
    done = _agentgate(
        tmp_path,
        *("grant", "delegate", "p.tok", "--as", "k/alice.key", "--to", "k/bob.pub"),
        *("--allow", "tool:x", "--ttl", "30m", "--out", "c.tok"),
        AGENTGATE_STORE=store,
    )
    assert done.returncode == 0 and (tmp_path / "c.tok").exists(), done.stderr
    assert done.stderr.startswith(
        "agentgate: warning: authority_chain_opacity budget_unit_not_metered [budget]:"
    )
    assert done.stderr.count("\n") == 1 and "'gpu_seconds'" in done.stderr, done.stderr


def _revoked_log(tmp_path: Path) -> str:
    """A SQLite store made by the command, its log holding one revocation, then its
    `audit_log_no_update` trigger dropped (as its owner may): the store's path."""
    store = str(tmp_path / "agentgate.db")
    assert _agentgate(tmp_path, "store", "init", "--store", store).returncode == 0
    assert _agentgate(tmp_path, "grant", "revoke", "b" * 64, "--store", store).returncode == 0
    with contextlib.closing(sqlite3.connect(store)) as db, db:
        db.execute("DROP TRIGGER audit_log_no_update")
    return store


def test_grant_revoke_says_its_warning_last_with_the_one_prefix(tmp_path: Path) -> None:
    """Review R72: `grant revoke` of a log whose trigger was dropped printed its warning at once,
    before its note; the rule is the same for every warning: said when the command ends."""
    store = _revoked_log(tmp_path)
    done = _agentgate(tmp_path, "grant", "revoke", "a" * 64, "--reason", "leaked", "--store", store)
    lines = done.stderr.splitlines()
    assert done.returncode == 0, done.stderr
    assert len(lines) == 3 and lines[0].startswith("note: "), done.stderr
    assert lines[1].startswith("agentgate: warning: the protection trigger audit_log_no_update"), done.stderr
    # The audit log's own warning (a logger's record), said the same way: until review R72 Python's
    # last-resort handler printed it as a bare `audit log: ...` line among the command's own.
    assert lines[2].startswith("agentgate: warning: audit log: the protection trigger audit_log_no_update"), (
        lines
    )
    assert "was missing and was put back" in lines[2], lines


def test_a_failed_command_says_its_warnings_then_its_one_error_line(tmp_path: Path) -> None:
    """Review R72: a warning left in the list (the PostgreSQL log key's) was dropped when the
    command failed, one printed at once was said: the rule is now one. `audit show` over a log
    whose triggers were dropped and whose entry 2 is malformed: the two entries before it on
    standard output; on standard error the warning, then the error line last; exit 2."""
    log = _log(tmp_path, 4)
    _attack(log, "UPDATE audit_log SET entry = CAST(? AS BLOB) || entry WHERE idx = 2", (b"\xff",))
    log.store.close()
    argv = ["audit", "show", "--store", str(tmp_path / "agentgate.db"), "--key", KEY.public.did]
    done = _agentgate(tmp_path, *argv)
    assert done.returncode == 2, done.stderr
    assert len(done.stdout.splitlines()) == 2
    warning, error = done.stderr.splitlines()
    assert warning.startswith("agentgate: warning: the protection trigger audit_log_next_index"), done.stderr
    assert error.startswith("agentgate: error: audit log: entry 2 is malformed"), done.stderr


@pytest.mark.parametrize("verb", [["show"], ["explain", "0"]])
def test_show_and_explain_warn_after_the_output(tmp_path: Path, verb: list[str]) -> None:
    """Review R72: the unprotected-log warning is one line with the one prefix (said when the
    command ends), the output unchanged, exit 0."""
    store = _revoked_log(tmp_path)
    done = _agentgate(tmp_path, "audit", *verb, "--store", store)
    assert done.returncode == 0 and done.stdout, done.stderr
    assert done.stderr.startswith("agentgate: warning: the protection trigger audit_log_no_update")
    assert done.stderr.count("\n") == 1, done.stderr
