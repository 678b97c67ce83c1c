"""Every `agentgate GROUP VERB --flag` the README and the docs pages show names a group, a verb and
flags the command has.

tests/test_cli_files_and_streams.py holds docs/cli.md's command lines to the parser for eight of
the ten groups (not `budget`, not `store`); tests/test_docs_newcomer_commands.py parses the shell
blocks of every page and checks the required flags of inline lines with two flags or more. An
inline line elsewhere (`agentgate store prune --older-than 30d` in docs/operations.md) was held to
nothing: a flag renamed in the parser would stay in the page."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from agentgate.cli.main import build_parser

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _flags(parser: argparse.ArgumentParser) -> set[str]:
    return {flag for action in parser._actions for flag in action.option_strings}


def _command_lines(text: str) -> list[str]:
    """The `agentgate ...` lines of a page: inline spans, and shell-block lines whose command it is."""
    lines = re.findall(r"`(agentgate [^`\n]+)`", text)
    for block in re.findall(r"^ *```(?:sh|bash|shell|console)\n(.*?)^ *```", text, re.S | re.M):
        for line in block.replace("\\\n", " ").splitlines():
            line = re.sub(r"\s+#.*$", "", line).strip().removeprefix("$ ")
            line = re.sub(r"^(?:[A-Z_]+=\S*\s+)+", "", line)  # VAR=value prefixes
            if found := re.match(r"(?:\S*/)?agentgate\s+([^|;&<>]*)", line):
                lines.append("agentgate " + found.group(1))
    return lines


def _unknown(line: str, groups: dict[str, argparse.ArgumentParser]) -> list[str]:
    words = line.split()
    if len(words) < 2 or not re.fullmatch(r"[a-z]+", words[1]):
        return []  # `agentgate ...`, `agentgate --help`: no group named
    group = groups.get(words[1])
    if group is None:
        return [f"no group {words[1]!r}"]
    verbs = _subparsers(group)
    parsers = [group]
    if verbs and len(words) > 2 and re.fullmatch(r"[a-z][a-z|-]*", words[2]):
        named = words[2].split("|")  # `audit verify|show|explain|report --key log.pub`
        if unknown := [verb for verb in named if verb not in verbs]:
            return [f"no verb {verb!r} in {words[1]}" for verb in unknown]
        parsers = [verbs[verb] for verb in named]
    options = line.split(" -- ")[0]  # after `--` every word is an operand (`keys new -- -a`)
    flags = re.findall(r"(?<![\w-])(--?[a-zA-Z][\w-]*)", options)
    return [
        f"{flag} ({line})"
        for parser in parsers
        for flag in flags
        if flag not in _flags(parser) | _flags(group)
    ]


def test_every_command_line_of_every_page_names_verbs_and_flags_the_command_has() -> None:
    """Review R61: inline command lines outside docs/cli.md, and docs/cli.md's `budget` and `store`
    lines, were held to no parser; each group, verb and flag a page shows now is."""
    groups = _subparsers(build_parser())
    seen: set[str] = set()
    wrong = []
    for page in PAGES:
        for line in _command_lines(page.read_text(encoding="utf-8")):
            seen.update(line.split()[1:2])
            wrong += [f"{page.name}: {problem}" for problem in _unknown(line, groups)]
    assert not wrong, wrong
    assert seen >= set(groups), set(groups) - seen  # every group is shown somewhere, so was checked


def test_the_check_names_a_flag_the_command_lacks() -> None:
    """Review R61: the check above finds a renamed flag and an unknown verb (it is no empty net)."""
    groups = _subparsers(build_parser())
    assert _unknown("agentgate store prune --before 30d", groups) == [
        "--before (agentgate store prune --before 30d)"
    ]
    assert _unknown("agentgate budget spend --grant X", groups) == ["no verb 'spend' in budget"]
    assert _unknown("agentgate audit verify|show --key log.pub", groups) == []
