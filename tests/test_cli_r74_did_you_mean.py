"""A misspelt command line gets a did-you-mean: an unknown command, verb, flag or choice is
refused (exit 2, the verb's usage and one ``agentgate: error:`` line) with the closest name the
command knows, as the policy loader does for a misspelt field (``did_you_mean``).

Until review R74 ``agentgate grnat`` listed every command and ``agentgate grant issue --isuer
K`` said ``the following arguments are required: --issuer, --to``: it never named the flag that
was misspelt, nor what was meant. Each test walks every command and verb of the real parser.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterator

import pytest

from agentgate.cli.main import build_parser, main


def _verbs(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    """The sub-parsers of ``parser``, by name; none for a verb."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _every_verb() -> Iterator[tuple[list[str], argparse.ArgumentParser]]:
    """Each verb's command line (``["grant", "issue"]``, ``["serve"]``) and its parser."""
    for group, parser in _verbs(build_parser()).items():
        verbs = _verbs(parser)
        if not verbs:
            yield [group], parser
        for verb, verb_parser in verbs.items():
            yield [group, verb], verb_parser


def _misspelt(name: str) -> str:
    """``name`` with its middle character left out: ``--isuer`` for ``--issuer``."""
    middle = (len(name) + (2 if name.startswith("--") else 0)) // 2
    return name[:middle] + name[middle + 1 :]


def _refusal(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    """The last line on stderr of the command line ``argv``, refused with exit 2."""
    capsys.readouterr()
    with pytest.raises(SystemExit) as ended:
        main(argv)
    lines = capsys.readouterr().err.splitlines()
    assert ended.value.code == 2, lines
    assert lines[0].startswith("usage: agentgate"), lines
    return lines[-1]


def test_a_misspelt_command_or_verb_is_answered_with_the_one_meant(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Review R74: an unknown command or verb was refused with the list of choices alone. Rule:
    the refusal names the closest one, ``did you mean 'grant'?``, for every command and verb."""
    for argv, _parser in _every_verb():
        meant = argv[-1]
        line = _refusal([*argv[:-1], _misspelt(meant)], capsys)
        assert line.startswith("agentgate: error: "), line
        assert line.endswith(f"did you mean {meant!r}?"), (argv, line)


def test_a_misspelt_flag_is_named_with_the_one_meant(capsys: pytest.CaptureFixture[str]) -> None:
    """Review R74: an unknown flag was refused as ``unrecognized arguments: --jsn`` with no
    suggestion, or, on a verb with a required argument, not named at all (``the following
    arguments are required: --issuer, --to`` for ``--isuer``). Rule: every verb's every long flag,
    misspelt, alone or as ``--flag=value``, is named with the one meant; and the command's own
    ``--help`` (``agentgate --hepl`` said ``the following arguments are required: COMMAND``)."""
    line = _refusal(["--hepl"], capsys)
    assert line == "agentgate: error: unrecognized arguments: --hepl (did you mean '--help'?)", line
    for argv, parser in _every_verb():
        flags = [o for a in parser._actions for o in a.option_strings if o.startswith("--")]
        for flag in flags:
            wrong = _misspelt(flag)
            for given in (wrong, f"{wrong}=x"):
                line = _refusal([*argv, given], capsys)
                assert (
                    line == f"agentgate: error: unrecognized arguments: {given} (did you mean {flag!r}?)"
                ), (
                    argv,
                    line,
                )


def test_a_misspelt_choice_is_answered_with_the_one_meant(capsys: pytest.CaptureFixture[str]) -> None:
    """Review R74: a flag's value outside its choices (``audit show --kind alow``) listed the
    choices alone. Rule: the closest one is named."""
    line = _refusal(["audit", "show", "--kind", "alow"], capsys)
    assert line.endswith("did you mean 'allow'?"), line


def test_a_name_close_to_nothing_gets_no_guess(capsys: pytest.CaptureFixture[str]) -> None:
    """Review R74: the hint is only for a near miss; a flag like no other is named alone, and a
    value that is no flag (a negative number, ``-``) is not taken for one."""
    line = _refusal(["keys", "new", "x", "--zzzzzzzz"], capsys)
    assert line == "agentgate: error: unrecognized arguments: --zzzzzzzz", line
    line = _refusal(["grant", "issue", "--qqqqqqqq"], capsys)
    assert line == "agentgate: error: unrecognized arguments: --qqqqqqqq", line
