"""The operator verbs print text a store row holds escaped, one line per row, as ``budget held``
does since review R60: a row written outside agentgate (a request's requester, a once-only
call's key) with a terminal escape or a line break must not clear the screen or forge a row of
``approval list`` or ``tasks unsettled``, nor a second line of what ``tasks settle`` says."""

from __future__ import annotations

import contextlib
import sqlite3
import time
from pathlib import Path

import pytest
from test_gate_once import PAY, RUN, _gate, _new

from agentgate.cli.main import main
from agentgate.keys import SigningKey, save_key
from agentgate.store import SQLiteStore
from agentgate.store.approvals import ApprovalStore

HOSTILE = "k\x1b[2J\nFORGED row"
"""Text with a terminal escape (clear the screen) and a line break, as a row edited outside
agentgate may hold."""

SHOWN = "k\\x1b[2J\\nFORGED row"
"""``HOSTILE`` as the verbs print it (``_common.printable``)."""


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    capsys.readouterr()
    code = main(list(argv))
    out, err = capsys.readouterr()
    assert err == "", err
    return code, out


def _unsettled_call_keyed_hostile(tmp_path: Path) -> Path:
    """A store with one once-only call allowed and never finished, its key edited to ``HOSTILE``."""
    keys, path, agent = _new(tmp_path)
    with _gate(path, keys) as gate:
        assert gate.authorize(agent, PAY, call_id="c1", run_id=RUN).allowed
        gate.flush()
    with contextlib.closing(sqlite3.connect(path)) as db:
        db.execute("UPDATE agentgate_once SET key = ?", (HOSTILE,))
        db.commit()
    return path


def test_approval_list_prints_a_stored_requester_escaped(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R63: approval list printed a request's requester as stored: a row whose requester
    held an escape sequence and a line break cleared the screen and forged a row of the table."""
    path = tmp_path / "agentgate.db"
    with SQLiteStore(path) as store:
        ApprovalStore(store).request("h1", HOSTILE, time.time() + 300)
    code, out = _run(capsys, "approval", "list", "--store", str(path))
    assert code == 0
    lines = out.splitlines()
    assert len(lines) == 2 and "\x1b" not in out and lines[1].endswith(SHOWN), out


def test_tasks_unsettled_prints_a_stored_key_escaped(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R63: tasks unsettled printed a call's key as stored (budget held, which names the
    same key, escaped it since review R60): a key edited to hold a line break forged a row."""
    path = _unsettled_call_keyed_hostile(tmp_path)
    code, out = _run(capsys, "tasks", "unsettled", "--store", str(path))
    assert code == 0
    lines = out.splitlines()
    assert len(lines) == 2 and "\x1b" not in out and lines[1].endswith(SHOWN), out


def test_tasks_settle_says_a_stored_key_escaped_on_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R63: tasks settle's 'settled KEY' line wrote the key raw (its refusals escape it):
    the key given, as stored, sent its escape sequence and added a line."""
    path = _unsettled_call_keyed_hostile(tmp_path)
    code, out = _run(
        capsys, "tasks", "settle", HOSTILE, "--not-run", "--older-than", "0", "--store", str(path)
    )
    assert code == 0
    assert out.count("\n") == 1 and "\x1b" not in out and out.startswith(f"settled {SHOWN} "), out


@pytest.mark.usefixtures("no_default_store")
def test_approval_sign_names_its_out_file_escaped(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Review R63: approval sign's 'approval written to FILE' line wrote the --out name raw, where
    its error lines name a file escaped (_shown.shown_path): a name holding an escape sequence
    and a line break sent the one and split the line."""
    from test_cli_approval_hostile import request

    key, _ = save_key(SigningKey.generate(), tmp_path / "k", "approver")
    payload = tmp_path / "payload.json"
    payload.write_text(request())
    out_file = tmp_path / HOSTILE
    capsys.readouterr()
    assert main(["approval", "sign", str(payload), "--as", str(key), "--out", str(out_file)]) == 0
    said = capsys.readouterr().out.splitlines()[-1]  # on stdout since review R70
    assert "\x1b" not in said and said.startswith("approval written to ") and SHOWN in said, said
    assert out_file.is_file()


def test_tasks_settle_refuses_an_empty_key_as_input(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R63: an empty KEY (``tasks settle "$KEY"`` with KEY unset) names nothing: exit 2, as
    every value that names something (docs/cli.md, Conventions) and budget settle's empty ID; until
    now it was looked up, and refused as an unknown key, exit 1."""
    path = _unsettled_call_keyed_hostile(tmp_path)
    capsys.readouterr()
    with pytest.raises(SystemExit) as exited:
        main(["tasks", "settle", "", "--ran", "--older-than", "0", "--store", str(path)])
    out, err = capsys.readouterr()
    assert exited.value.code == 2 and out == "" and "an empty value names nothing" in err, (out, err)
