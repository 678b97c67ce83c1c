"""The parser of ``agentgate approval``, apart from its handlers (agentgate/cli/approval.py), which
need the Gate's approval layer and the authority engine below it: ``agentgate --help`` and
``agentgate approval ... --help`` build this parser without loading them (review R65)."""

from __future__ import annotations

from typing import Any

from agentgate.cli._common import STORE_HELP, given, given_file
from agentgate.cli._handlers import handled_by

_APPROVAL = "agentgate.cli.approval"


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "approval",
        help="list open approval requests and sign one",
        description="A human's side of an approval gate: see what is asked, sign a yes.",
    )
    sub = parser.add_subparsers(dest="approval_command", metavar="SUBCOMMAND", parser_class=type(parser))
    sub.required = True
    listing = sub.add_parser(
        "list",
        help="requests still waiting for votes, oldest first",
        description=(
            "List approval requests that are pending and not expired, and whose call's grants are not "
            "revoked, with the votes they have."
        ),
    )
    listing.add_argument("--json", action="store_true", help="one JSON array instead of a table")
    listing.add_argument("--store", type=given, metavar="URL", help=STORE_HELP)
    listing.set_defaults(handler=handled_by(_APPROVAL, "_list"))
    sign = sub.add_parser(
        "sign",
        help="show what a request asks and sign a yes to it",
        description=(
            "Show the request in PAYLOAD (the interrupt payload, or the request inside it) and write "
            "the signed approval, the value to resume the run with."
        ),
    )
    sign.add_argument(
        "payload", type=given, metavar="PAYLOAD", help="JSON file with the interrupt payload, or - for stdin"
    )
    sign.add_argument(
        "--as", dest="key", required=True, type=given, metavar="KEYFILE", help="the approver's private key"
    )
    sign.add_argument(
        "--out", type=given_file, metavar="FILE", help="write the approval here (default: standard output)"
    )
    sign.add_argument(
        "--store",
        type=given,
        metavar="URL",
        help="check what PAYLOAD shows against the Gate's store (default: AGENTGATE_STORE, else "
        ".agentgate/agentgate.db where it exists; none: not checked, and said so)",
    )
    sign.set_defaults(handler=handled_by(_APPROVAL, "_sign"))
