"""The parser of ``agentgate audit``, apart from its handlers (agentgate/cli/audit.py), which need
the audit store, the entry's pydantic model and the signing library: ``agentgate --help`` and
``agentgate audit ... --help`` build this parser without loading them (review R65b)."""

from __future__ import annotations

import argparse
import re
from datetime import datetime
from typing import Any

from agentgate._names import ENTRY_KINDS
from agentgate.cli._common import STORE_HELP, given, given_file, given_utf8, one_line_text
from agentgate.cli._handlers import handled_by

_AUDIT = "agentgate.cli.audit"


def register(subparsers: Any) -> None:
    """Add the ``audit`` verb group."""
    parser = subparsers.add_parser("audit", help="verify, read, prove and report on the signed audit log")
    sub = parser.add_subparsers(dest="audit_command", metavar="SUBCOMMAND", parser_class=type(parser))
    sub.required = True

    def add(name: str, help_text: str, handler: str, *, reads: bool = True) -> argparse.ArgumentParser:
        p: argparse.ArgumentParser = sub.add_parser(name, help=help_text)
        p.add_argument(
            "--store",
            type=given,
            metavar="URL",
            help=STORE_HELP,
        )
        if reads:
            p.add_argument(
                "--key",
                type=given,
                metavar="PUBFILE",
                help="the log's public key (log.pub or its did:key): read without the private log key",
            )
        p.set_defaults(handler=handled_by(_AUDIT, handler))
        return p

    verify = add("verify", "recompute the tree and check every checkpoint", "_verify")
    verify.add_argument(
        "--checkpoint", type=given, metavar="FILE", help="a checkpoint saved earlier, outside the database"
    )
    verify.add_argument(
        "--json", action="store_true", help="one JSON object: the verdict, sizes, problems and notes"
    )

    show = add("show", "list entries", "_show")
    show.add_argument(
        "--principal", type=given_utf8, metavar="DID", help="only entries of this principal (its did:key)"
    )
    show.add_argument(
        "--tool", type=given_utf8, metavar="NAME", help="resource, e.g. tool:payments.refund (or its name)"
    )
    show.add_argument("--kind", metavar="KIND", choices=ENTRY_KINDS, help=", ".join(ENTRY_KINDS))
    show.add_argument(
        "--since", metavar="TIME", type=_since, help="UTC time prefix, e.g. 2026-11-29 or 2026-11-29T10:00"
    )
    show.add_argument(
        "--from",
        dest="start",
        type=_index,
        default=0,
        metavar="INDEX",
        help="start at this entry index (read from there, not from the first entry)",
    )
    show.add_argument(
        "--last", type=_count, metavar="N", help="only the newest N entries that match, oldest first"
    )
    show.add_argument(
        "--json", action="store_true", help="one entry per line, its exact bytes (docs/audit-format.md)"
    )

    explain = add("explain", "the authority behind one entry", "_explain")
    explain.add_argument(
        "index", type=_index, metavar="INDEX", help="the entry's index (as audit show lists it)"
    )
    explain.add_argument(
        "--trust",
        action="append",
        type=given,
        metavar="PUBFILE|DID",
        help="a trust anchor's public key: say whether the chain's root issuer is one (repeatable)",
    )

    checkpoint = add("checkpoint", "sign and store a checkpoint of the log", "_checkpoint", reads=False)
    checkpoint.add_argument(
        "--out",
        type=given_file,
        metavar="FILE",
        help="also write the signed note here; a checkpoint already there must be one the log extends",
    )

    prove = add(
        "prove", "write a proof bundle for one entry (signs a fresh checkpoint)", "_prove", reads=False
    )
    prove.add_argument(
        "index", type=_index, metavar="INDEX", help="the entry's index (as audit show lists it)"
    )
    prove.add_argument(
        "--out", type=given_file, metavar="FILE", required=True, help="write the proof bundle here"
    )

    verify_proof = sub.add_parser("verify-proof", help="verify a proof bundle offline")
    verify_proof.add_argument(
        "file", type=given, metavar="FILE", help="the proof bundle (as audit prove writes it)"
    )
    verify_proof.add_argument(
        "--key", type=given, metavar="PUBFILE", required=True, help="the log's public key (log.pub)"
    )
    verify_proof.add_argument(
        "--origin", type=given_utf8, metavar="ORIGIN", help="the log's origin, if it must match"
    )
    verify_proof.set_defaults(handler=handled_by(_AUDIT, "_verify_proof"))

    report = add("report", "write a self-contained HTML report", "_report")
    report.add_argument(
        "--out", type=given_file, metavar="FILE.html", required=True, help="write the HTML report here"
    )

    accept = add(
        "accept-repair",
        "record that a repair of a protection trigger was checked against an outside copy",
        "_accept_repair",
        reads=False,
    )
    accept.add_argument(
        "repair", type=_repair_id, metavar="ID", help="the repair's id, as audit verify names it"
    )
    accept.add_argument(
        "--by",
        type=one_line_text("--by", names=True),
        required=True,
        metavar="NAME",
        help="who checked the repair, recorded with the acceptance in audit_repairs (no audit entry is written)",
    )
    accept.add_argument(
        "--reason",
        type=one_line_text("--reason"),
        required=True,
        metavar="TEXT",
        help="how it was checked, one line of text recorded with the acceptance (audit verify prints both)",
    )


def _repair_id(text: str) -> int:
    """A repair's id as ``audit verify`` names it: ASCII digits, 1 .. 2**63-1."""
    if not re.fullmatch(r"[0-9]{1,19}", text, re.ASCII) or not 0 < int(text) < 2**63:
        raise argparse.ArgumentTypeError(
            f"expected a repair id (digits 0-9, as audit verify names it), got {text!r}"
        )
    return int(text)


def _index(text: str) -> int:
    """An entry index as given on the command line: ASCII digits (``int`` would also read other
    scripts' digits, ``_`` and a sign), a whole number 0 .. 2**63-1 (what a store's integer holds;
    a larger one overflowed SQLite with a traceback). A minus sign is read only to say that an
    index is 0 or more (``-1``); ``-0`` is refused as a sign, as ``+1`` is (until review R82
    ``int`` read it as entry 0)."""
    if not re.fullmatch(r"-?[0-9]{1,40}", text, re.ASCII) or re.fullmatch(r"-0+", text):
        raise argparse.ArgumentTypeError(f"expected an entry index (digits 0-9), got {text!r}")
    value = int(text)
    if not 0 <= value < 2**63:
        raise argparse.ArgumentTypeError(f"an entry index is 0 or more, below 2**63; got {text!r}")
    return value


def _count(text: str) -> int:
    """``--last``: a number of entries, ASCII digits, 0 .. 2**63-1 (as many as a log can hold).
    Until review R71 read as an entry index, and refused in its words ("an entry index is ...")."""
    if not re.fullmatch(r"[0-9]{1,19}", text, re.ASCII) or int(text) >= 2**63:
        raise argparse.ArgumentTypeError(
            f"expected a number of entries (digits 0-9, 0 .. 2**63-1), got {text!r}"
        )
    return int(text)


_TIME_FORMAT = "0000-00-00T00:00:00.000000Z"
"""The entry time format, ``0`` standing for an ASCII digit."""


_EARLIEST = "0001-01-01T00:00:00"
"""The earliest time to the second, in the entry time format: what completes a prefix of it."""


def _since(text: str) -> str:
    """A prefix of the entry time format (``2026``, ``2026-11``, ``2026-11-29T10:00`` ...) that
    some time begins with: entries are compared with it as text, so anything else (a ``Z`` after
    fewer than six digits of a second's fraction included; month 13, February 31 or hour 99,
    until review R88) would select nothing, everything or the wrong entries."""
    form = _TIME_FORMAT[: len(text)]
    fits = len(text) == len(form) and all(
        char in "0123456789" if want == "0" else char == want for char, want in zip(text, form, strict=True)
    )
    if not text or not fits:
        raise argparse.ArgumentTypeError(
            f"expected a UTC time prefix like 2026-11-29 or 2026-11-29T10:00, got {text!r}"
        )
    if not _begins_a_time(text):
        raise argparse.ArgumentTypeError(
            f"no time begins with {text!r}: months are 01-12, days those of the month, hours 00-23, "
            "minutes and seconds 00-59"
        )
    return text


def _begins_a_time(prefix: str) -> bool:
    """Whether a time begins with ``prefix`` (of the entry time format's shape): its field cut
    short completed with each digit it may take, the fields after it with their earliest values
    (a fraction of a second is any digits)."""
    head = prefix[: len(_EARLIEST)]
    end = next(found.end() for found in re.finditer(r"[0-9]+", _EARLIEST) if found.end() >= len(head))
    missing = end - len(head)
    for fill in range(10**missing):
        candidate = head + f"{fill:0{missing}d}"[:missing] + _EARLIEST[end:]
        try:
            year, month, day, hour, minute, second = (int(part) for part in re.findall(r"[0-9]+", candidate))
            datetime(year, month, day, hour, minute, second)
        except ValueError:
            continue
        return True
    return False
