"""Rows of docs/cli.md's exit code table that no test ran the command into (review R59, second
pass over the table): each test here runs a verb into the case its row names."""

from __future__ import annotations

import argparse

import pytest

from agentgate.cli.main import main


def test_ctrl_c_inside_a_verb_is_one_line_and_exit_130(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R59: the table's exit 130 (Ctrl-C: one line `agentgate: interrupted`) had no test of the agentgate command."""

    def interrupted(args: argparse.Namespace) -> int:
        raise KeyboardInterrupt

    monkeypatch.setattr("agentgate.cli.keys._new", interrupted)  # registered as the handler when parsed
    assert main(["keys", "new", "lead"]) == 130
    assert capsys.readouterr() == ("", "agentgate: interrupted\n")
