"""One help convention across every verb group (review R69), checked by walking every parser of
the command line: until then ``audit``, ``broker`` and ``policy`` called their verbs
``SUBCOMMAND`` and the other groups ``ACTION`` (a word the grant language already uses for the
``#ACTION`` of a capability), and some arguments had no help line at all."""

from __future__ import annotations

import argparse
from collections.abc import Iterator

import pytest

from agentgate.cli.main import build_parser


def _parsers() -> Iterator[tuple[str, argparse.ArgumentParser]]:
    """Every parser of the command line, with its command (``agentgate grant issue``)."""
    waiting = [("agentgate", build_parser())]
    while waiting:
        command, parser = waiting.pop()
        yield command, parser
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                waiting.extend((f"{command} {name}", child) for name, child in action.choices.items())


def _help_lines() -> Iterator[tuple[str, str, str | None]]:
    """Every help line of the command line: (command, what it is about, the line)."""
    for command, parser in _parsers():
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for choice in action._choices_actions:
                    yield command, choice.dest, choice.help
            elif not isinstance(action, argparse._HelpAction):
                yield command, "/".join(action.option_strings) or action.dest, action.help


def _capitalised(line: str) -> bool:
    """Whether ``line`` starts with a word written as a sentence's first (``Write``), not with
    one in capitals (``UTC``, ``GPUs``) or in lower case."""
    return line[:1].isupper() and line[1:2].islower()


def test_every_verb_group_names_its_verbs_subcommand() -> None:
    """Review R69: ``agentgate grant --help`` showed ``ACTION ...`` and ``agentgate audit --help``
    ``SUBCOMMAND ...``. Every group now says ``SUBCOMMAND`` (the top level ``COMMAND``)."""
    metavars = {
        command: action.metavar
        for command, parser in _parsers()
        for action in parser._actions
        if isinstance(action, argparse._SubParsersAction)
    }
    assert metavars.pop("agentgate") == "COMMAND"
    assert len(metavars) >= 9
    assert {command: m for command, m in metavars.items() if m != "SUBCOMMAND"} == {}


def test_every_argument_and_verb_has_a_help_line_in_lower_case_without_a_full_stop() -> None:
    """Review R69: ``grant check --as KEYFILE``, the ``TOKENFILE`` of ``grant delegate``,
    ``inspect`` and ``check``, ``audit show --principal``, ``audit prove --out`` and others were
    listed with no help line, beside options that had one. Every line now exists, starts in
    lower case (it follows the name, as argparse's own "show this help message and exit"; a
    word in capitals, ``UTC``, ``JSON``, ``AMOUNT[:UNIT]``, stays one) and ends without a full
    stop."""
    lines = list(_help_lines())
    assert len(lines) > 100
    missing = [(command, what) for command, what, line in lines if not line]
    assert missing == []
    wrong = [
        (command, what, line)
        for command, what, line in lines
        if line and (_capitalised(line) or line.rstrip().endswith("."))
    ]
    assert wrong == []


@pytest.mark.parametrize("command", [command for command, _ in _parsers() if command != "agentgate"])
def test_every_description_is_a_sentence(command: str) -> None:
    """Every verb's and group's description (the text under its usage) starts in upper case and
    ends with a full stop, as the help line it is made from when none is given (review R67)."""
    parser = dict(_parsers())[command]
    description = parser.description or ""
    assert description[:1].isupper() and description.endswith("."), (command, description)


def test_every_option_taking_a_value_names_it() -> None:
    """Review R69: ``serve --host`` and ``audit verify-proof --origin`` showed argparse's made-up
    ``HOST`` and ``ORIGIN`` where every other option names its value itself (``URL``, ``FILE``)."""
    unnamed = [
        (command, "/".join(action.option_strings))
        for command, parser in _parsers()
        for action in parser._actions
        if action.option_strings and action.nargs != 0 and action.metavar is None
    ]
    assert unnamed == []
