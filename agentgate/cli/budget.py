"""``agentgate budget``: budget reservations left held by a process that stopped.

``agentgate budget held [--older-than SECONDS] [--json] [--store URL]`` lists the reservations
still held that were made at least that long ago (default ``SETTLE_MIN_AGE_S``), with their
grant, amount, time and ``allow`` entry; ``agentgate budget settle ID --ran|--not-run`` settles
one by hand, audited (``agentgate.store.held``). Exit codes: 0 done, 1 refused
(``SettlementRefused``), 2 bad input.
"""

from __future__ import annotations

import argparse
import sys
from datetime import datetime

from agentgate.cli._budget_parser import (
    register as register,
)
from agentgate.cli._common import (
    error_line,
    listed,
    open_audit_log,
    printable,
    settled_by_hand,
    unix,
    utc,
)
from agentgate.store.held import HeldReservation, held_rows, holds_ledger, settle_held


def _held(args: argparse.Namespace) -> int:
    store, audit = open_audit_log(args.store, create_log=False, read_only=True, unsigned=True)
    try:
        # Without a log no call was ever allowed, so nothing was reserved by a decision.
        reservations, unreadable = (
            held_rows(store, audit, min_age_s=args.older_than) if audit.exists else ([], [])
        )
    finally:
        store.close()
    rows = [{**r.to_json(), "reserved_at": unix(_seconds(r.reserved_at))} for r in reservations]
    # "no held reservations" would be false where a row cannot be read: only its line then.
    if (rows or args.json or not unreadable) and not listed(rows, args.json, "no held reservations"):
        _table(reservations)
    # Each row that cannot be read, after the others (until review R69 it hid them all): exit 2,
    # one error line per row, as ``main`` writes the one of a command that fails.
    for exc in unreadable:
        sys.stdout.flush()
        sys.stderr.write(error_line(exc))
    return 2 if unreadable else 0


def _table(reservations: list[HeldReservation]) -> None:
    """``budget held``'s table of ``reservations`` (docs/cli.md)."""
    sys.stdout.write(
        f"{'reserved':<20} {'amount':>12} {'unit':<14} {'entry':>7} {'grant':<16} {'id':<32}  settle with\n"
    )
    for r in reservations:
        entry = "-" if r.allow_index is None else str(r.allow_index)
        how = "agentgate budget settle"
        if r.once_key is not None:
            how = f"agentgate tasks settle {printable(r.once_key)}"
        elif r.lease is not None:  # broker and request names come from callers: escaped
            how = f"its broker, when lease {printable(r.lease[1])} of {printable(r.lease[0])} ends"
        # The grant and the id are the row's as stored: a row written outside agentgate is escaped.
        grant, id_ = printable(r.grant_id[:16]), printable(r.id)
        sys.stdout.write(
            f"{utc(_seconds(r.reserved_at)):<20} {r.amount:>12} {_unit(r):<14} {entry:>7} {grant:<16} "
            f"{id_:<32}  {how}\n"
        )


def _unit(reservation: HeldReservation) -> str:
    """The unit of a reservation's amount as the policy names it (``calls``, ``usd_micros``),
    escaped (a row written outside agentgate); ``(unit unknown)`` for a row that records none
    (made before review R61), never a unit guessed. Until review R62 the text showed the amount
    alone: ``500`` could be micro-dollars or tokens."""
    return "(unit unknown)" if reservation.unit is None else printable(reservation.unit)


def _seconds(stored: str) -> float | None:
    """A reservation's time as stored (``2026-11-29T18:00:00.123456Z``) in Unix seconds; ``None``
    for one that is not a time (written outside agentgate)."""
    try:
        return datetime.fromisoformat(stored).timestamp()
    except ValueError:
        return None


def _settle(args: argparse.Namespace) -> int:
    # A store that holds no budget ledger gets no log: settle_held refuses there (review R83).
    store, audit = open_audit_log(args.store, reads=False, create_log=holds_ledger)

    def said(settled: tuple[HeldReservation, int]) -> str:
        reservation, index = settled
        amount = f"{reservation.amount} {_unit(reservation)}"
        verdict = f"charged {amount}" if args.ran else f"released {amount}"
        made = (
            "" if reservation.allow_index is None else f", allowed by audit entry {reservation.allow_index}"
        )
        return (
            f"settled reservation {reservation.id} of grant {printable(reservation.grant_id)}{made}: {verdict} "
            f"(audit entry {index})"
        )

    return settled_by_hand(
        store.close,
        lambda committed: settle_held(
            store,
            audit,
            args.id,
            ran=args.ran,
            by=args.by,
            reason=args.reason,
            min_age_s=args.older_than,
            committed=committed,  # called as it commits: a signal from there leaves it done, said
        ),
        said,
    )
