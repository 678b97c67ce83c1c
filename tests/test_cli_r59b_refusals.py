"""A refusal of well-formed input is exit 1 with one ``REFUSED: ...`` line on standard output and
nothing written; exit 2 is for input the command cannot use (docs/cli.md, Exit codes). A refusal
line quoting a value of 10,000 characters loses its middle, as an error line does."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_audit_r57_repairs import (
    ENTRY,
    ORIGIN,
    _forge_after_dropping_the_trigger,
    _run,
    as_made_before_the_record_of_repairs,
    cli,
)
from test_cli_approval_hostile import request

from agentgate.keys import SigningKey, save_key
from agentgate.store import SQLiteStore
from agentgate.store.audit import AuditLog, open_log_key

__all__ = ["cli"]  # the fixture, shared with the tests of repairs

LONG = "k" * 10_000


def _repairs(db: Path) -> int:
    with SQLiteStore(db) as store:
        return int(store.query("SELECT COUNT(*) FROM audit_repairs")[0][0])


def _repaired(db: Path) -> None:
    """The forged log of the repair tests, opened once by a writer: repair 1 recorded."""
    _forge_after_dropping_the_trigger(db)
    with SQLiteStore(db) as store:
        AuditLog(store, open_log_key(store), ORIGIN)


@pytest.mark.parametrize("case", ["no-such-repair", "accepted-already"])
def test_accept_repair_of_an_id_it_cannot_accept_is_refused_exit_1(
    cli: Path, capsys: pytest.CaptureFixture[str], case: str
) -> None:
    """Review R59: accept-repair said exit 2 (unusable input) for an id of no repair or one accepted already."""
    _repaired(cli)
    assert _run(["audit", "accept-repair", "1", "--by", "Ana", "--reason", "entries checked"]) == 0
    before = _repairs(cli)
    capsys.readouterr()
    repair = {"no-such-repair": "7", "accepted-already": "1"}[case]
    assert _run(["audit", "accept-repair", repair, "--by", "Ana", "--reason", "again"]) == 1
    out, err = capsys.readouterr()
    said = {
        "no-such-repair": "audit_repairs holds no repair 7",
        "accepted-already": "repair 1 was accepted already",
    }
    assert (out, err) == (f"REFUSED: {said[case]}\n", "")
    assert _repairs(cli) == before  # nothing written


def test_accept_repair_on_a_store_that_records_no_repair_is_refused_exit_1(
    cli: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R59: a store made before the record of repairs answered accept-repair 1 with exit 2, not a refusal."""
    with SQLiteStore(cli) as store:
        AuditLog(store, open_log_key(store, create=True), ORIGIN).append(ENTRY)
    as_made_before_the_record_of_repairs(cli)
    capsys.readouterr()
    assert _run(["audit", "accept-repair", "1", "--by", "Ana", "--reason", "x"]) == 1
    out, err = capsys.readouterr()
    assert (out, err) == ("REFUSED: this store records no repair (no table audit_repairs)\n", "")


@pytest.mark.parametrize("flag", ["--by", "--reason"])
def test_accept_repair_with_a_blank_by_or_reason_is_input_exit_2(
    cli: Path, capsys: pytest.CaptureFixture[str], flag: str
) -> None:
    """Review R59: a blank --by or --reason stays unusable input (exit 2), not a refusal of the id."""
    _repaired(cli)
    capsys.readouterr()
    values = {"--by": "Ana", "--reason": "checked", flag: "  "}
    assert _run(["audit", "accept-repair", "1", "--by", values["--by"], "--reason", values["--reason"]]) == 2
    out, err = capsys.readouterr()
    assert (
        out == ""
        and err == f"agentgate: error: {flag} is blank: accepting a repair needs who accepts it and why\n"
    )
    assert _repairs(cli) == 1  # the repair alone: no acceptance


@pytest.fixture
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("AGENTGATE_STORE", str(tmp_path / "store.db"))
    assert _run(["store", "init"]) == 0
    assert _run(["audit", "checkpoint"]) == 0  # makes the log key that settling signs with
    return tmp_path / "store.db"


def test_a_refusal_quoting_a_key_of_10000_characters_loses_its_middle(
    store: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R59: a REFUSED line quoting a 10,000-character key was written whole, where error
    lines are cut. Since review R88 the store's refusal quotes the key as ``quoted`` does, cut at
    60 characters (a 1 MB key was written whole into ``SettlementRefused``), so the line is short."""
    capsys.readouterr()
    assert _run(["tasks", "settle", LONG, "--by", "ops", "--not-run"]) == 1
    out, err = capsys.readouterr()
    assert err == "" and out.count("\n") == 1 and len(out) < 200, len(out)
    assert out == f"REFUSED: no call that must run once has the key '{'k' * 56}...\n"


def test_a_refusal_line_of_usual_length_is_not_cut(store: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Review R59: only a line too long loses its middle; a key of usual length is quoted whole,
    escaped once (a key past 60 characters is cut by the store's refusal since review R88)."""
    key = "k" * 50 + "\x1b"
    capsys.readouterr()
    assert _run(["tasks", "settle", key, "--by", "ops", "--not-run"]) == 1
    assert capsys.readouterr().out == f"REFUSED: no call that must run once has the key '{'k' * 50}\\x1b'\n"


def test_an_approval_refusal_quoting_a_request_id_of_10000_characters_loses_its_middle(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R59: approval sign's refusal line quoted a request id of 10,000 characters whole."""
    private, _ = save_key(SigningKey.generate(), tmp_path / "k", "lead")
    payload = tmp_path / "refund.json"
    payload.write_text(request(id=LONG, expires_at=1_000_000_000))
    assert json.loads(payload.read_text())["request"]["id"] == LONG
    assert _run(["approval", "sign", str(payload), "--as", str(private)]) == 1
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and len(err) < 2100, len(err)
    assert err.startswith(f"agentgate: refused: {payload}: request kkk")
    assert "characters not shown) ... kkk" in err and err.endswith(": expired at 2001-09-09T01:46:40Z\n")
