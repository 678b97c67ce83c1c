"""``agentgate tasks``: look at what the tool-call scheduler gave up on.

``agentgate tasks dead-letters [--json] [--limit N] [--tool NAME] [--store URL]`` lists dead
letters, newest first, from the store (``--store``, else ``AGENTGATE_STORE``, else the default
SQLite file). ``agentgate tasks breakers [--json] [--store URL]`` lists the circuit breaker
states that schedulers using that store have shared (each process also exports its own as the
``agentgate_tasks_breaker_state`` metric). ``agentgate tasks unsettled`` lists the calls of tools
that must run once whose outcome was never recorded (or that ran and failed), and ``agentgate
tasks settle KEY --ran|--not-run`` settles one by hand, audited (``agentgate.store.once``).
Exit codes: 0 done, 1 a settlement refused, 2 bad input.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from agentgate.cli._common import (
    error_line,
    listed,
    open_audit_log,
    open_existing_store,
    printable,
    settled_by_hand,
    unix,
    utc,
)
from agentgate.cli._tasks_parser import register as register
from agentgate.errors import InputError, MalformedRow
from agentgate.store.dead_letters import DeadLetter, DeadLetterStore
from agentgate.store.leases import SharedBreakers
from agentgate.store.once import (
    OnceCalls,
    beyond_log_end,
    checked_allow,
    holds_once_calls,
    settle,
)


def _dead_letters(args: argparse.Namespace) -> int:
    store = open_existing_store(args.store, read_only=True)
    try:
        # --tool's name, its resource's prefix removed by the parser (_tool_name)
        letters = DeadLetterStore(store).recent(limit=args.limit, tool=args.tool)
    finally:
        store.close()
    if listed([_letter_json(letter) for letter in letters], args.json, "no dead letters"):
        return 0
    sys.stdout.write(
        f"{'recorded':<20} {'tool':<24} {'tenant':<12} {'reason':<26} {'tries':>5}  last error\n"
    )
    for letter in letters:
        # Tool, tenant and error text come from callers and from tools' exceptions (a remote
        # service's error message): escaped, so they cannot add lines or send terminal escapes.
        when = utc(letter.recorded_at)
        last = letter.errors[-1] if letter.errors else None
        error = f"{last.error_type} ({last.error_class}): {last.message}" if last else "-"
        tool, tenant, reason = (
            printable(letter.tool)[:24],
            printable(letter.tenant)[:12],
            printable(letter.reason),
        )
        sys.stdout.write(
            f"{when:<20} {tool:<24} {tenant:<12} {reason:<26} "
            f"{len(letter.errors):>5}  {printable(' '.join(error.split()))[:80]}\n"
        )
    return 0


def _letter_json(letter: DeadLetter) -> dict[str, Any]:
    """A dead letter as ``--json`` prints it: ``DeadLetter.to_json``, its times as every command
    writes times (``unix``)."""
    data = letter.to_json()
    data["recorded_at"] = unix(letter.recorded_at)
    for error in data["errors"]:
        error["at"] = unix(error["at"])
    return data


def _breakers(args: argparse.Namespace) -> int:
    store = open_existing_store(args.store, read_only=True)
    try:
        states = SharedBreakers(store).all()
    finally:
        store.close()
    rows = [
        {"key": b.key, "state": b.state, "opened_at": unix(b.opened_at), "version": b.version} for b in states
    ]
    if listed(rows, args.json, "no shared breaker states"):
        return 0
    sys.stdout.write(f"{'key':<40} {'state':<8} {'opened':<20} {'version':>7}\n")
    for b in states:
        opened = utc(b.opened_at) if b.state == "open" else "-"
        key, state = printable(b.key)[:40], printable(b.state)
        sys.stdout.write(f"{key:<40} {state:<8} {opened:<20} {b.version:>7}\n")
    return 0


def _unsettled(args: argparse.Namespace) -> int:
    # Read only (until review R56 it opened the store as a writer: a copy's journal mode switched,
    # the log's and the once-only calls' tables made). Without a log no call was ever allowed,
    # so none is unsettled: the once-only calls' tables are not looked for (a PostgreSQL store
    # open to read only refuses a part whose tables it lacks).
    store, audit = open_audit_log(args.store, create_log=False, read_only=True, unsigned=True)
    try:
        listed_rows, unreadable = OnceCalls(store).unsettled_rows() if audit.exists else ([], [])
        # The allow entries of all of them in a few statements, not one read per call: a year of
        # failed payments is thousands of rows, and on PostgreSQL each read was a round trip.
        size = audit.size() if listed_rows else 0
        # Checked against their leaf hashes, as settle reads them (an edited resource was listed
        # until review R83).
        entries = audit.entries_at(r.allow_index for r in listed_rows if r.allow_index < size)
        # Each checked as tasks settle checks it: a row's allow_index edited to name another kind
        # of entry (0, a grant's issue) was listed with that entry's resource (review R63). One
        # that fails is named after the others, which are listed (until review R69: none was).
        allowed = {}
        for r in listed_rows:
            try:
                if r.allow_index not in entries:
                    raise beyond_log_end(r)
                allowed[r.key] = checked_allow(r, entries[r.allow_index])
            except MalformedRow as exc:
                unreadable.append(exc)
    finally:
        store.close()
    records = [r for r in listed_rows if r.key in allowed]
    rows = [
        {
            "key": r.key,
            "state": r.state,
            "allow_index": r.allow_index,
            "resource": allowed[r.key].resource,
            "principal": allowed[r.key].principal,
            "allowed_at": allowed[r.key].time,
        }
        for r in records
    ]
    # "no unsettled calls" would be false where a row cannot be read: only its line then.
    if (rows or args.json or not unreadable) and not listed(rows, args.json, "no unsettled calls"):
        _unsettled_table(rows)
    for row_error in unreadable:  # exit 2, one error line per row, as ``main`` writes a command's one
        sys.stdout.flush()
        sys.stderr.write(error_line(row_error))
    return 2 if unreadable else 0


def _unsettled_table(rows: list[dict[str, Any]]) -> None:
    """``tasks unsettled``'s table of ``rows`` (docs/cli.md)."""
    sys.stdout.write(f"{'allowed':<28} {'entry':>7} {'state':<8} {'resource':<28} key\n")
    for row in rows:
        resource = printable(str(row["resource"]))[:28]  # the tool name the agent asked for
        # The key is the row's as stored: one written outside agentgate is escaped, as budget
        # held prints the same key (until review R63 an escape sequence in it was sent).
        sys.stdout.write(
            f"{row['allowed_at']:<28} {row['allow_index']:>7} {row['state']:<8} {resource:<28} "
            f"{printable(str(row['key']))}\n"
        )


def _settle(args: argparse.Namespace) -> int:
    """Exit 0 settled; 1 refused, as ``budget settle`` refuses (``REFUSED: ...`` on standard
    output, nothing written): no call has the key, it is not unsettled, or it was allowed too
    recently. Until review R59 these were exit 2, which the CLI keeps for input it cannot use."""
    if not args.by.strip():
        raise InputError("say who settles the call (--by)")  # input, not a refusal: exit 2
    # A store that holds no call that must run once gets no log: settle refuses there.
    store, audit = open_audit_log(args.store, reads=False, create_log=holds_once_calls)
    verdict = "ran: it is never run again" if args.ran else "did not run: it may run again"
    return settled_by_hand(
        store.close,
        lambda committed: settle(
            store,
            audit,
            args.key,
            ran=args.ran,
            by=args.by,
            reason=args.reason,
            min_age_s=args.older_than,
            committed=committed,  # called as it commits: a signal from there leaves it done, said
        ),
        lambda record: (
            f"settled {printable(record.key)} (allowed by audit entry {record.allow_index}): {verdict}"
        ),
    )
