"""Which arguments of a refused command line are unknown flags, as argparse itself reads them
(review R74, r74-rev-cli, of r74-cli's did-you-mean): an argument that argparse took as a flag's
value or as a positional is no unknown flag, and a missing verb is the refusal of a group's line
that names a verb's flag. Each test runs ``main`` on the real parser.
"""

from __future__ import annotations

import argparse

import pytest
from test_cli_r74_did_you_mean import _refusal

from agentgate.cli.main import build_parser


def test_a_flags_value_with_a_space_is_no_unknown_flag(capsys: pytest.CaptureFixture[str]) -> None:
    """Review R74: argparse reads an argument with a space as a value, even one that begins with
    ``-`` (``--purpose '-a purpose with spaces'``), but the refusal of a line that misses a
    required argument named it as an unrecognized flag: ``unrecognized arguments: -a purpose
    with spaces``, never saying that ``--issuer`` and ``--to`` were missing. Rule: only what
    argparse reads as a flag is named as one; the missing arguments are said."""
    line = _refusal(["grant", "issue", "--purpose", "-a purpose with spaces"], capsys)
    assert line == "agentgate: error: the following arguments are required: --issuer, --to", line


def test_a_group_without_its_verb_says_the_verb_is_missing(capsys: pytest.CaptureFixture[str]) -> None:
    """Review R74: ``agentgate audit --json`` (``show`` left out) was refused as ``unrecognized
    arguments: --json``, as if ``--json`` were misspelt, where the line before said the verb
    was missing. Rule: a command or verb group's line that misses its verb says so, unless a flag
    in it is close to one of the group's own (``--hepl`` is still named, with ``--help``)."""
    line = _refusal(["audit", "--json"], capsys)
    assert line == "agentgate: error: the following arguments are required: SUBCOMMAND", line
    line = _refusal(["--json"], capsys)
    assert line == "agentgate: error: the following arguments are required: COMMAND", line
    line = _refusal(["audit", "--hepl"], capsys)
    assert line == "agentgate: error: unrecognized arguments: --hepl (did you mean '--help'?)", line


def test_double_dash_and_what_follows_it_get_no_flag_hint(capsys: pytest.CaptureFixture[str]) -> None:
    """Review R74: ``--`` among the unrecognized arguments was taken for a misspelt flag
    (``unrecognized arguments: -- --purpos (did you mean '--to'?; ...)``), and an argument after
    it, which argparse reads as a positional, got a flag's hint. Rule: neither is a flag."""
    argv = ["grant", "issue", "--issuer", "k", "--to", "x", "--", "--purpos"]
    line = _refusal(argv, capsys)
    assert line.startswith("agentgate: error: unrecognized arguments: "), line
    assert line.endswith("--purpos"), line


def test_argparse_adds_no_second_suggestion(capsys: pytest.CaptureFixture[str]) -> None:
    """Review R74: Python 3.14 added argparse's own ``suggest_on_error`` (``invalid choice: 'grnat',
    maybe you meant 'grant'? (choose from ...)``) and 3.15 turned it on by default, so a
    refusal there would carry two hints, argparse's and ``; did you mean 'grant'?``. Rule: every
    parser of the command line has argparse's off (the attribute its ``_check_value`` reads on
    3.14 and later, set on older ones too), and a refusal says ``did you mean`` once."""
    parsers = [build_parser()]
    for parser in parsers:
        assert getattr(parser, "suggest_on_error", None) is False, parser.prog
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                parsers.extend(action.choices.values())
    assert len(parsers) > 10, parsers
    line = _refusal(["grnat"], capsys)
    assert "maybe you meant" not in line and line.count("did you mean") == 1, line
