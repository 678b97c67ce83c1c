"""The parser of ``agentgate grant``, apart from its handlers (agentgate/cli/grant.py), which need
the authority engine: ``agentgate --help`` and ``agentgate grant ... --help`` build this parser
without loading it (review R65). Each handler is imported when its verb runs."""

from __future__ import annotations

import argparse
import re
from typing import Any

from agentgate._names import MAX_PURPOSE
from agentgate.capabilities._capability import MAX_CAPABILITY_TEXT
from agentgate.cli._common import (
    MAX_FREE_TEXT,
    STORE_HELP,
    given,
    given_file_path,
    given_path,
    given_text,
    given_utf8,
    one_line_text,
    text,
)
from agentgate.cli._handlers import handled_by

_GRANT = "agentgate.cli.grant"

_DESCRIPTION = "Issue, delegate, inspect, check and revoke capability grants."


def _depth(text: str) -> int:
    """An argparse ``type`` for ``--max-depth``: a whole number of further delegation levels, 0 to
    ``MAX_DEPTH``, refused with the flag and the value named (as the serve flags are)."""
    from agentgate.authority._grant import MAX_DEPTH  # the authority engine: only for --max-depth

    if not re.fullmatch(r"[0-9]{1,3}", text) or int(text) > MAX_DEPTH:
        raise argparse.ArgumentTypeError(f"expected a whole number from 0 to {MAX_DEPTH}, got {text[:40]!r}")
    return int(text)


_EPILOG = """\
exit codes: 0 success or allow, 1 deny (the finding is printed), 2 unusable input (one line on
stderr).
DURATION: a positive number with a unit s, m, h or d (30s, 15m, 1h, 7d; sums like 1h30m).
CAP: RESOURCE[#ACTION][?FIELD OP VALUE(&FIELD OP VALUE)*], OP one of = (one of: V1|V2), <, <=,
>, >=, ^= (prefix); e.g. 'tool:payments.refund?amount<=500&currency=EUR|USD'.
AMOUNT: a whole number of minor units, optionally :UNIT (usd_micros, the default; tokens; calls),
e.g. 1000:calls.
The store is AGENTGATE_STORE (a path or a postgresql:// URL), default .agentgate/agentgate.db.
See docs/cli.md."""


_INSPECT_EPILOG = """\
exit codes: 0 every link sound (revocation unknown where no store can be read), 1 a link is marked
(a finding, untrusted_root with --trust among them, SIGNATURE INVALID, REVOKED, EXPIRED or NOT
YET VALID; the tree or JSON is printed all the same),
2 unusable input (one line on stderr). The store is AGENTGATE_STORE, read only; none is created.
See docs/cli.md."""


_HOLDER_EPILOG = """\
--holder revokes the grants recorded in this store (by grant issue/delegate, Gate.issue/delegate,
and a Gate's allow of a call on a chain) whose audience is the key, when it reads them; a grant to
the key that this store never recorded (issued or delegated to it offline with no call allowed on
it through a Gate of this store, or recorded in another store) is NOT revoked: remove the key
from the policy and restart for those (docs/operations.md, Rotating keys). Grants the key
delegated below a revoked grant die with it, recorded or not.
exit codes: 0 done (also when nothing was recorded for the key), 2 unusable input."""


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "grant",
        help="issue, delegate, inspect, check and revoke grants",
        description=_DESCRIPTION,
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="grant_command", metavar="SUBCOMMAND", parser_class=type(parser))
    sub.required = True

    raw = argparse.RawDescriptionHelpFormatter
    p = sub.add_parser(
        "issue",
        help="issue a root grant signed by a trust anchor's key",
        description="Issue a root grant: give --allow CAP ... --ttl DURATION, or --policy FILE --role ROLE\n"
        "(the role's capabilities, budget, TTL and depth; the flags may only narrow them).",
        epilog=_EPILOG,
        formatter_class=raw,
    )
    p.add_argument(
        "--issuer", required=True, type=given_path, metavar="KEYFILE", help="the issuer's private key"
    )
    _common_grant_args(p, required=False)
    p.add_argument(
        "--max-depth",
        type=_depth,
        default=None,
        metavar="N",
        help="further delegation levels (default 2, or the role's)",
    )
    p.add_argument(
        "--policy", type=given_path, metavar="FILE", help="take the grant from ROLE in this policy"
    )
    p.add_argument(
        "--role",
        type=given_text,
        metavar="ROLE",
        help="the policy role whose capabilities, budget, TTL and depth to grant",
    )
    p.set_defaults(handler=handled_by(_GRANT, "_issue"))

    p = sub.add_parser(
        "delegate",
        help="give part of a grant to another principal (exit 1 if it would widen)",
        epilog=_EPILOG,
        formatter_class=raw,
    )
    p.add_argument(
        "token", type=given_path, metavar="TOKENFILE", help="the token file of the grant to give part of"
    )
    p.add_argument(
        "--as",
        dest="holder",
        required=True,
        type=given_path,
        metavar="KEYFILE",
        help="the holder's private key",
    )
    _common_grant_args(p)
    p.add_argument(
        "--max-depth", type=_depth, default=None, metavar="N", help="default: one less than the parent"
    )
    p.set_defaults(handler=handled_by(_GRANT, "_delegate"))

    p = sub.add_parser(
        "inspect",
        help="show a chain as a tree: who gave what to whom (exit 1 if a link is marked)",
        description="Show the chain in TOKENFILE as a tree, root first, each link marked where it does "
        "not hold: a finding, a signature that does not verify, REVOKED (from the store), EXPIRED or "
        "NOT YET VALID, and with --trust a root issued by none of the trust anchors given. "
        "Inspect decides no call: grant check does.",
        epilog=_INSPECT_EPILOG,
        formatter_class=raw,
    )
    p.add_argument("token", type=given_path, metavar="TOKENFILE", help="the token file of the chain to show")
    p.add_argument(
        "--trust",
        action="append",
        type=given,
        metavar="PUBFILE|DID",
        help="a trust anchor, a public key file or a did:key (repeatable): mark a root issued by none "
        "of them untrusted_root",
    )
    p.add_argument("--json", action="store_true", help="print JSON instead of a tree")
    p.set_defaults(handler=handled_by(_GRANT, "_inspect"))

    p = sub.add_parser(
        "check",
        help="sign an invocation and decide it under its chain alone (exit 0 allow, 1 deny)",
        description="Sign an invocation of TOOL with ARGS as KEYFILE under the chain in TOKENFILE and decide it "
        "against the trust anchor PUBFILE|DID, with revocation and replay checked in the store. It reads no "
        "policy: a call the policy refuses or puts behind an approval gate can be allowed here; "
        "agentgate policy explain answers for the policy.",
        epilog=_EPILOG,
        formatter_class=raw,
    )
    p.add_argument(
        "token", type=given_path, metavar="TOKENFILE", help="the token file of the chain to decide under"
    )
    p.add_argument(
        "--as",
        dest="holder",
        required=True,
        type=given_path,
        metavar="KEYFILE",
        help="the holder's private key, which signs the invocation",
    )
    p.add_argument(
        "--trust",
        required=True,
        action="append",
        type=given,
        metavar="PUBFILE|DID",
        help="root key, a public key file or a did:key (repeatable)",
    )
    target = p.add_mutually_exclusive_group(required=True)
    target.add_argument("--tool", type=given_utf8, metavar="NAME", help="tool name, e.g. payments.refund")
    target.add_argument("--model", type=given_utf8, metavar="NAME", help="model name, e.g. llama-3.1-8b")
    p.add_argument(
        "--args", default="{}", type=text, metavar="JSON", help="the call's arguments as a JSON object"
    )
    p.add_argument("--json", action="store_true", help="print the decision and its findings as JSON")
    p.set_defaults(handler=handled_by(_GRANT, "_check"))

    p = sub.add_parser(
        "revoke",
        help="revoke a grant (or every recorded grant a key holds) and every grant below it",
        description="Revoke the grant TOKENFILE|ID, or with --holder every grant this store records for "
        "a key (a leaked agent key), and with them every grant below them. Audited; one transaction.",
        epilog=_HOLDER_EPILOG,
        formatter_class=raw,
    )
    what = p.add_mutually_exclusive_group(required=True)
    what.add_argument(
        "target",
        nargs="?",
        type=given,
        metavar="TOKENFILE|ID",
        help="a token file (its tip is revoked) or a 64-hex grant id",
    )
    what.add_argument(
        "--holder",
        type=given,
        metavar="DID|PUBFILE",
        help="revoke every grant this store records with this key as its audience",
    )
    p.add_argument("--store", type=given, metavar="URL", help=STORE_HELP)
    p.add_argument("--json", action="store_true", help="print what was revoked as JSON")
    p.add_argument(
        "--reason",
        default="",
        type=one_line_text("--reason", keeps_bytes=True),
        metavar="TEXT",
        help=f"one line of text, recorded with the revocation (at most {MAX_FREE_TEXT:,} characters)",
    )
    p.add_argument(
        "--by",
        type=one_line_text("--by", names=True, keeps_bytes=True),
        default="operator",
        metavar="NAME",
        help="who revokes, recorded as the audit entry's principal (default: operator)",
    )
    p.set_defaults(handler=handled_by(_GRANT, "_revoke"))


def _common_grant_args(p: argparse.ArgumentParser, *, required: bool = True) -> None:
    p.add_argument("--to", required=True, type=given, metavar="DID|PUBFILE", help="the audience")
    p.add_argument(
        "--allow",
        required=required,
        action="append",
        type=one_line_text("--allow", MAX_CAPABILITY_TEXT),
        metavar="CAP",
        help="capability, one line of text (repeatable)",
    )
    p.add_argument("--ttl", required=required, metavar="DURATION", help="lifetime: 30s, 15m, 1h, 7d")
    p.add_argument(
        "--budget", metavar="AMOUNT", help="AMOUNT[:UNIT] in integer minor units (default usd_micros)"
    )
    p.add_argument(
        "--purpose",
        default="",
        type=one_line_text("--purpose", MAX_PURPOSE),
        metavar="TEXT",
        help=f"one line of text, signed into the grant (at most {MAX_PURPOSE} characters)",
    )
    p.add_argument(
        "--out", type=given_file_path, metavar="FILE", help="write the token here instead of stdout"
    )
    p.add_argument(
        "--force",
        action="store_true",
        help="replace a file at --out that is not empty (refused without it); only with --out",
    )
