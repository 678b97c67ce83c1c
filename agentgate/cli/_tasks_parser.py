"""The parser of ``agentgate tasks``, apart from its handlers (agentgate/cli/tasks.py), which need
the scheduler's store parts and the audit store: ``agentgate --help`` and ``agentgate tasks ...
--help`` build this parser without loading them (review R65b)."""

from __future__ import annotations

import argparse
from typing import Any

from agentgate._names import SETTLE_MIN_AGE_S
from agentgate.cli._common import (
    LEAVE_THE_FLAG_OUT,
    STORE_HELP,
    ascii_whole,
    given,
    given_text,
    given_utf8,
    settle_flags,
)
from agentgate.cli._handlers import handled_by

_TASKS = "agentgate.cli.tasks"


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "tasks",
        help="inspect the tool-call scheduler; settle calls whose outcome was lost",
        description="Inspect the tool-call scheduler.",
    )
    sub = parser.add_subparsers(dest="tasks_command", metavar="SUBCOMMAND", parser_class=type(parser))
    sub.required = True
    dead = sub.add_parser(
        "dead-letters",
        help="list calls the scheduler gave up on, newest first",
        description="List dead letters: calls given up after failing, with their authority chain and errors.",
    )
    dead.add_argument("--json", action="store_true", help="one JSON array instead of a table")
    dead.add_argument(
        "--limit", type=_positive, default=100, metavar="N", help="at most N letters (default 100)"
    )
    dead.add_argument(
        "--tool", type=_tool_name, metavar="NAME", help="only letters of this tool: its name or tool:NAME"
    )
    dead.add_argument("--store", type=given, metavar="URL", help=STORE_HELP)
    dead.set_defaults(handler=handled_by(_TASKS, "_dead_letters"))
    _listing(
        sub,
        "breakers",
        help="list circuit breaker states shared through the store",
        description="List the circuit breaker states that schedulers sharing the store have published.",
    ).set_defaults(handler=handled_by(_TASKS, "_breakers"))
    _listing(
        sub,
        "unsettled",
        help="list calls that must run once and may have run (outcome never recorded, or failed)",
        description="List the calls of tools that are not idempotent whose process stopped while they "
        "ran (no outcome recorded) or that ran and failed: nothing runs them again until settled.",
    ).set_defaults(handler=handled_by(_TASKS, "_unsettled"))
    settling = sub.add_parser(
        "settle",
        help="settle an unsettled call by hand: it ran, or it did not (audited)",
        description="Settle an unsettled call: --ran (never run again; a held reservation is charged) or "
        "--not-run (it may run again; a held reservation is released). An outcome entry records it.",
    )
    settling.add_argument(  # an empty KEY names nothing: exit 2, as budget settle's ID (review R63)
        "key", type=given_text, metavar="KEY", help="the call's key (agentgate tasks unsettled)"
    )
    said = settling.add_mutually_exclusive_group(required=True)
    said.add_argument("--ran", action="store_true", help="the call had its effect")
    said.add_argument("--not-run", action="store_true", help="the call had no effect")
    settle_flags(
        settling,
        min_age_s=SETTLE_MIN_AGE_S,
        older_than_help="a call whose outcome was never recorded is settled only if it was allowed at "
        f"least this long ago: a younger one may still be running (default {SETTLE_MIN_AGE_S:.0f}; a "
        "DURATION such as 15m, as store prune --older-than takes, also does)",
    )
    settling.add_argument("--store", type=given, metavar="URL", help=STORE_HELP)
    settling.set_defaults(handler=handled_by(_TASKS, "_settle"))


def _listing(sub: Any, name: str, *, help: str, description: str) -> Any:
    """A listing action's parser with its ``--json`` and ``--store`` options."""
    parser = sub.add_parser(name, help=help, description=description)
    parser.add_argument("--json", action="store_true", help="one JSON array instead of a table")
    parser.add_argument("--store", type=given, metavar="URL", help=STORE_HELP)
    return parser


MAX_LIMIT = 1_000_000
"""The most letters one listing may ask for (a larger number overflowed the store's integer)."""


def _tool_name(value: str) -> str:
    """``dead-letters --tool``: the tool's name, given as such or as its resource (``tool:NAME``, as
    ``agentgate audit show --tool`` takes it). ``tool:`` alone names no tool and is refused (exit 2)
    as an empty value is: until review R83 it was read as no filter, and every tool's letters were
    listed (``--tool "tool:$NAME"`` with ``NAME`` unset). A name that is not UTF-8 is refused
    naming the flag (``given_utf8``; until review R88 in the store's words, naming neither)."""
    name = given_utf8(value).removeprefix("tool:")
    if not name:
        raise argparse.ArgumentTypeError(f"'tool:' alone names no tool: give tool:NAME{LEAVE_THE_FLAG_OUT}")
    return name


def _positive(text: str) -> int:
    """``--limit``: ASCII digits only (not ``int``'s `` 5``, ``+5``, ``5_000`` or other scripts'
    digits), 1 to ``MAX_LIMIT``; a number of any length above it is said to be out of range (one
    of more than 4,300 digits was 'expected a positive integer' until review R55). Leading zeros
    are read off first: ``int`` refuses a text of more than 4,300 digits, zeros included (until
    review R88 4,300 zeros then 5 was argparse's bare 'invalid _positive value')."""
    try:
        value = ascii_whole(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {_shown(text)}") from None
    if not 1 <= value <= MAX_LIMIT:
        raise argparse.ArgumentTypeError(f"expected an integer from 1 to {MAX_LIMIT}, got {_shown(text)}")
    return value


def _shown(text: str) -> str:
    """An argument quoted in an error: its first 40 characters (it may be of any length)."""
    return repr(text[:40]) + ("..." if len(text) > 40 else "")
