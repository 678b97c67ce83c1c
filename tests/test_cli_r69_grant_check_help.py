"""``agentgate grant --help`` and ``grant check --help`` promise no exit code the verbs never give
(review R69): they said "3 approval required", but ``grant check`` reads no policy, so it never
puts a call behind an approval gate (docs/cli.md: "It therefore never exits 3 today"); a new
operator who saw ``allow`` from ``grant check`` where ``policy explain`` says APPROVAL REQUIRED
had nothing in the help telling why."""

from __future__ import annotations

import pytest
from _cli import cli


@pytest.mark.parametrize("argv", [("grant", "--help"), ("grant", "check", "--help")])
def test_grant_help_promises_no_exit_3(capsys: pytest.CaptureFixture[str], argv: tuple[str, ...]) -> None:
    """Review R69: the grant group's help (its verb list and epilog) and ``check``'s said exit 3
    approval required, which no grant verb returns."""
    code, out, _ = cli(capsys, *argv)
    assert code == 0
    assert "approval required" not in " ".join(out.split())


def test_grant_check_help_says_it_reads_no_policy(capsys: pytest.CaptureFixture[str]) -> None:
    """Review R69: ``grant check --help`` did not say that the policy (its rules, its approval
    gates) is not applied, nor where to ask it: ``policy explain``."""
    code, out, _ = cli(capsys, "grant", "check", "--help")
    text = " ".join(out.split())
    assert code == 0 and "reads no policy" in text and "agentgate policy explain" in text
