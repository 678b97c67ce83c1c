"""Review R67: the synopses of ``agentgate serve`` in the docs name every flag it takes."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest

from agentgate.cli.main import build_parser

ROOT = Path(__file__).resolve().parents[1]


def _serve_flags() -> set[str]:
    parser = build_parser(["serve"])
    groups = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    serve = groups.choices["serve"]
    return {flag for action in serve._actions for flag in action.option_strings if flag.startswith("--")} - {
        "--help"
    }


def _gateway_synopsis() -> str:
    text = (ROOT / "docs" / "gateway.md").read_text(encoding="utf-8")
    section = text.split("## Running it", 1)[1]
    return re.search(r"```\n(agentgate serve .*?)```", section, re.S).group(1)  # type: ignore[union-attr]


def _cli_synopsis() -> str:
    text = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    section = text.split("## `agentgate serve`", 1)[1]
    return re.search(r"`(agentgate serve [^`]*)`", section).group(1)  # type: ignore[union-attr]


@pytest.mark.parametrize("synopsis", [_gateway_synopsis, _cli_synopsis], ids=["gateway.md", "cli.md"])
def test_each_synopsis_of_serve_names_every_flag(synopsis: object) -> None:
    """Review R67: docs/gateway.md's "Running it" synopsis left out ``--body-timeout-s`` and
    ``--max-body-bytes`` (docs/cli.md's had them): a reader of the gateway page did not learn the
    body limits could be set. Both synopses must name every flag ``agentgate serve --help`` shows."""
    assert callable(synopsis)
    shown = set(re.findall(r"--[a-z][a-z0-9-]*", synopsis()))
    assert _serve_flags() - shown == set()
    assert shown - _serve_flags() == set()
