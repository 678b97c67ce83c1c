"""The parser of ``agentgate budget``, apart from its handlers (agentgate/cli/budget.py), which
need the budget ledger and the audit store: ``agentgate --help`` and ``agentgate budget ...
--help`` build this parser without loading them (review R65b)."""

from __future__ import annotations

from typing import Any

from agentgate._names import SETTLE_MIN_AGE_S
from agentgate.cli._common import STORE_HELP, given, seconds_or_duration, settle_flags, text
from agentgate.cli._handlers import handled_by

_BUDGET = "agentgate.cli.budget"


_OLDER_THAN_HELP = (
    "only reservations made at least this long ago: a younger one's call may still be running "
    f"(default {SETTLE_MIN_AGE_S:.0f}; seconds, or a DURATION such as 15m)"
)


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "budget",
        help="list and settle budget reservations left held by a process that stopped",
        description="Budget reservations left held by a worker killed between a decision and its outcome.",
    )
    sub = parser.add_subparsers(dest="budget_command", metavar="SUBCOMMAND", parser_class=type(parser))
    sub.required = True
    listing = sub.add_parser(
        "held",
        help="list reservations still held, oldest first",
        description="List the budget reservations still held that were made at least --older-than ago: "
        "grant, amount, when reserved, the allow entry that made it, the once-only call that holds it.",
    )
    listing.add_argument(
        "--older-than",
        type=seconds_or_duration,
        default=SETTLE_MIN_AGE_S,
        metavar="SECONDS",
        help=_OLDER_THAN_HELP,
    )
    listing.add_argument("--json", action="store_true", help="one JSON array instead of a table")
    listing.add_argument("--store", type=given, metavar="URL", help=STORE_HELP)
    listing.set_defaults(handler=handled_by(_BUDGET, "_held"))
    settling = sub.add_parser(
        "settle",
        help="settle a held reservation by hand: its call ran, or it did not (audited)",
        description="Settle a held reservation: --ran (charged as reserved) or --not-run (released). "
        "An outcome entry records it. A once-only call's reservation is settled with the call "
        "(agentgate tasks settle).",
    )
    settling.add_argument("id", type=text, metavar="ID", help="the reservation's id (agentgate budget held)")
    said = settling.add_mutually_exclusive_group(required=True)
    said.add_argument("--ran", action="store_true", help="the call had its effect: charge the reservation")
    said.add_argument(
        "--not-run", action="store_true", help="the call had no effect: release the reservation"
    )
    settle_flags(settling, min_age_s=SETTLE_MIN_AGE_S, older_than_help=_OLDER_THAN_HELP)
    settling.add_argument("--store", type=given, metavar="URL", help=STORE_HELP)
    settling.set_defaults(handler=handled_by(_BUDGET, "_settle"))
