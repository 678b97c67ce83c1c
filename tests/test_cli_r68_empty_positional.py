"""An empty value that names something is refused (exit 2), never read as the argument left out
(docs/cli.md, Conventions). For a flag the line says to give one or leave the flag out; until
review R68 it said the same of a required positional (`tasks settle "$KEY"`, `grant inspect
"$TOK"`), where there is no flag, and leaving the argument out is itself refused."""

from __future__ import annotations

import pytest
from _cli import cli


@pytest.mark.parametrize(
    "argv",
    [
        ["tasks", "settle", "", "--ran"],
        ["grant", "inspect", ""],
        ["approval", "sign", "", "--as", "k.key"],
        ["audit", "verify-proof", ""],
    ],
)
def test_an_empty_positional_is_not_told_to_leave_a_flag_out(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R68: `agentgate tasks settle "" --ran` said `argument KEY: an empty value names
    nothing: give one, or leave the flag out`: KEY is no flag, and may not be left out."""
    code, out, err = cli(capsys, *argv)
    assert (code, out) == (2, "")
    line = err.splitlines()[-1]
    assert line.startswith("agentgate: error: argument ") and "an empty value names nothing" in line, err
    assert "flag" not in line, line


def test_an_empty_flag_value_still_says_to_leave_the_flag_out(capsys: pytest.CaptureFixture[str]) -> None:
    """The flags keep their advice: `--store "$UNSET"` is given, or left out."""
    code, _, err = cli(capsys, "approval", "list", "--store", "")
    assert code == 2 and err.splitlines()[-1].endswith("give one, or leave the flag out"), err
