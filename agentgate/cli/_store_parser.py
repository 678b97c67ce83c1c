"""The parser of ``agentgate store``, apart from its handlers (agentgate/cli/store.py), which need
every store part and the audit store: ``agentgate --help`` and ``agentgate store ... --help``
build this parser without loading them (review R65b)."""

from __future__ import annotations

from typing import Any

from agentgate.cli._common import STORE_HELP, given
from agentgate.cli._handlers import handled_by

_STORE = "agentgate.cli.store"


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "store",
        help="set up the store (create every table agentgate uses); prune what is long over",
        description="Set up the store that AGENTGATE_STORE (or --store) names, and prune what is long over in it.",
    )
    sub = parser.add_subparsers(dest="store_command", metavar="SUBCOMMAND", parser_class=type(parser))
    sub.required = True
    init = sub.add_parser(
        "init",
        help="create every table agentgate uses (run once as the owner, and after an upgrade)",
        description=(
            "Create the tables of every part of agentgate (the audit log and its index, grants, "
            "budgets, quotas, approvals, the scheduler's and the broker's), skipping what exists. "
            "Run it as the tables' owner; then grant the application role what it needs "
            "(docs/operations.md). Exit 0, or 2 with one line naming what failed."
        ),
    )
    init.add_argument("--store", type=given, metavar="URL", help=STORE_HELP)
    init.set_defaults(handler=handled_by(_STORE, "_init"))
    prune = sub.add_parser(
        "prune",
        help="forget approval requests, settled reservations, dead letters and grants over for "
        "longer than DURATION",
        description=(
            "Delete what has been over for longer than DURATION: approval requests that expired "
            "(whatever became of them), budget reservations settled (committed or released), "
            "dead letters recorded, and grants recorded here that expired (at least an hour ago), "
            "with their budgets and revocations, before then. The audit log keeps every decision "
            "about them; a reservation still held (and its grants' budgets), a request still open "
            "(and the revocations of its grants) and the log itself are never touched. Prints how "
            "many rows of each went. Every part is deleted in one transaction: a failure in any "
            "of them prunes nothing. Expired grants need DELETE on agentgate_grants and "
            "agentgate_revocations, which PostgreSQL's application role lacks: with rows to delete, "
            "such a role prunes the rest and says on stderr that the grants were not pruned. "
            "Exit 0, or 2 with one line naming what failed."
        ),
    )
    prune.add_argument(
        "--older-than",
        required=True,
        type=given,
        metavar="DURATION",
        help="how long ago it ended, e.g. 30d (s, m, h or d)",
    )
    prune.add_argument("--json", action="store_true", help="one JSON object instead of lines")
    prune.add_argument("--store", type=given, metavar="URL", help=STORE_HELP)
    prune.set_defaults(handler=handled_by(_STORE, "_prune"))
