"""The command line's contract for ``policy lint``, ``policy explain`` and ``grant issue``
(exit codes, JSON shapes, one-line errors): each test names, in its docstring, the hand-made
mutant it kills and the rule it pins. The policies are those of test_policy_load."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_policy_load import HEAD, WORKER

from agentgate.cli.main import main


def _write(tmp_path: Path, text: str) -> str:
    path = tmp_path / "p.yaml"
    path.write_text(text)
    return str(path)


def test_lint_exits_1_for_a_single_error_finding(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Kills: ``policy lint`` exiting 1 only for more than one error (or skipping the first).

    One error finding is enough for exit 1 (docs/cli.md)."""
    path = _write(tmp_path, HEAD.replace("args:", "audit: false\n    args:") + WORKER)
    assert main(["policy", "lint", path, "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert [f["code"] for f in report["findings"] if f["severity"] == "error"] == ["tool_not_audited"]


def test_lint_json_of_an_unloadable_file_has_every_documented_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Kills: the ``findings`` key dropped from ``lint --json`` for a file that does not load.

    The shape is ``{"file", "valid", "error", "findings"}`` with ``findings`` empty, on stdout,
    nothing on stderr, exit 2."""
    path = _write(tmp_path, "version: 1\nroles: {a: {ttl_s: 1}, a: {ttl_s: 2}}\n")
    assert main(["policy", "lint", path, "--json"]) == 2
    captured = capsys.readouterr()
    report = json.loads(captured.out)
    assert report["findings"] == [] and report["valid"] is False and report["file"] == path
    assert set(report["error"]) == {"message", "file", "line", "column", "expected", "hint"}
    assert captured.err == ""


def test_explain_json_of_a_call_without_a_gate(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """Kills: ``quorum`` printed as 0 (not null) when no gate applies, and the text saying
    "approval: none needed" for a deny.

    No approval: ``approval``, ``quorum`` and ``approval_expiry_s`` are null, ``approvers`` empty;
    a denied call's text never says no approval is needed."""
    path = _write(tmp_path, HEAD + WORKER)
    base = ["policy", "explain", path, "--as", "bot", "--tool", "payments.refund", "--args"]
    assert main([*base, '{"amount": 5}', "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["approval"] is None and out["quorum"] is None and out["approval_expiry_s"] is None
    assert out["approvers"] == []
    assert main([*base, '{"amount": 500}']) == 1
    assert "approval: none needed" not in capsys.readouterr().out


def test_explain_of_a_non_canonical_tool_is_a_deny_exit_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Kills: a tool name that is not canonical exiting 2 (bad input) instead of 1 (deny).

    docs/cli.md: a tool name that is not canonical is a deny, exit 1."""
    path = _write(tmp_path, HEAD + WORKER)
    assert main(["policy", "explain", path, "--as", "bot", "--tool", "Payments.Refund"]) == 1
    assert capsys.readouterr().out.startswith("DENY: ")


def test_an_error_is_one_line_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Kills: ``_one_line`` keeping the message's own line breaks, and an ``AgentGateError``
    exiting 1 instead of 2.

    A policy whose error quotes a multi-line key still gives exactly one ``agentgate: error:``
    line on stderr, exit 2."""
    path = _write(tmp_path, 'version: 1\n"x\\ny": 1\n')
    assert main(["policy", "explain", path, "--as", "bot", "--tool", "t"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("agentgate: error: ") and err.count("\n") == 1


def test_a_grant_issue_with_a_repeated_bound_exits_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Kills: a repeated operator in ``--allow`` keeping only the last bound, and an AMOUNT of
    ``500:`` read as 500 usd_micros.

    ``amount<=5&amount<=500`` would issue a grant ten times wider than its first clause: the
    command refuses it, exit 2, one error line, no token written; so is a budget with ``:`` and no
    unit."""
    monkeypatch.setenv("AGENTGATE_STORE", str(tmp_path / "store.db"))
    monkeypatch.chdir(tmp_path)
    for name in ("root", "alice"):
        assert main(["keys", "new", name, "--dir", "k"]) == 0
    capsys.readouterr()
    base = [
        "grant",
        "issue",
        "--issuer",
        "k/root.key",
        "--to",
        "k/alice.pub",
        "--ttl",
        "1h",
        "--out",
        "a.tok",
    ]
    assert main([*base, "--allow", "tool:payments.refund?amount<=5&amount<=500"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("agentgate: error: ") and err.count("\n") == 1 and "given twice" in err
    assert main([*base, "--allow", "tool:payments.refund", "--budget", "500:"]) == 2
    assert "name the unit" in capsys.readouterr().err
    assert not (tmp_path / "a.tok").exists()
