"""The line that says where a command wrote its file names the file escaped.

Review R63 (r63b-settle's finding): `approval sign` wrote its `--out` name raw (fixed by that
helper); so did `grant issue` / `grant delegate` ("wrote FILE (grant ...)") and `audit report`
("wrote FILE: N entries ..."), where their error lines escape it: a name holding an escape
sequence and a line break sent the one and split the line in two."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_cli_grant import cli, env

__all__ = ["env"]  # the fixture, imported: keys root, alice and bob under k/, a store in tmp_path

HOSTILE = "t\x1b[2J\nFORGED line.out"


def _said(text: str) -> list[str]:
    lines = text.splitlines()
    assert not any("\x1b" in line for line in lines), lines
    assert not any(line.startswith("FORGED") for line in lines), lines
    return lines


def test_grant_issue_names_its_out_file_escaped(env: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = cli(capsys, "grant", "issue", "--issuer", "k/root.key", "--to", "k/alice.pub",
                         "--allow", "tool:x", "--ttl", "1h", "--out", HOSTILE)  # fmt: skip
    assert code == 0 and (env / HOSTILE).exists(), err
    [line] = _said(out)  # on stdout since review R70
    assert line.startswith("wrote t\\x1b[2J\\nFORGED line.out (grant "), line


def test_audit_report_names_its_out_file_escaped(env: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli(capsys, "grant", "issue", "--issuer", "k/root.key", "--to", "k/alice.pub",
               "--allow", "tool:x", "--ttl", "1h", "--out", "a.tok")[0] == 0  # fmt: skip
    code, out, err = cli(capsys, "audit", "report", "--key", "k/root.pub", "--out", HOSTILE)
    assert code == 0 and (env / HOSTILE).exists(), err
    [line] = _said(out)
    assert line.startswith("wrote t\\x1b[2J\\nFORGED line.out: "), line
