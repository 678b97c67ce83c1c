"""Free agent names granted on a store, by how they read (review R69).

``agentgate_agent_names(reading, name, first_at)``: one row per reading (``_confusables.readings``,
at most two per name) of a free agent name (one no principal holds) that ``Gate.issue`` or
``Gate.delegate`` granted, by any process on the store: the first name granted under that
reading, and when (Unix seconds). A Gate refuses a new name that shares a reading with another
name (``heIper`` after ``helper``, ``name_reads_alike``). The claim is one ``INSERT ... ON
CONFLICT DO NOTHING`` per reading in the grant's own transaction, then one read of who holds
them: two processes granting ``helper`` and ``heIper`` at once cannot both win (PostgreSQL's
second insert waits for the first's transaction; SQLite's write transactions run one at a
time), and a grant refused or rolled back claims nothing.

Rows are only added: a name, once granted, holds its readings for as long as the store lives
(nothing prunes them, by design: the audit log keeps the name for as long, and freeing the
readings of a revoked or expired agent's name would let a look-alike of it be granted and read as
that agent in the log's history; about 150 bytes a 20-character name on SQLite, review R70). Version 2's code, which knows nothing of the
table, grants without claiming (docs/operations.md, Upgrading).

The table is filled, in the transaction that makes it (``Store.ensure_schema``'s ``made``), with
the names granted before it (``granted_before``): a store of schema version 2 or earlier holds
them in its audit log, one ``allow`` entry on ``agent:NAME`` per grant ``Gate.issue`` or
``Gate.delegate`` made, and no other process sees the table without them. Until review R70 it was
made empty, and ``heIper`` was granted after an upgrade on a store whose ``helper`` was granted
before it.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Iterator
from datetime import datetime
from typing import NamedTuple

from agentgate import _confusables
from agentgate._names import agent_name_refused
from agentgate.store._base import Dialect, Store, Transaction, tables_held

AGENT_NAMES_DDL: dict[Dialect, str] = {
    "sqlite": """
CREATE TABLE IF NOT EXISTS agentgate_agent_names (
    reading TEXT PRIMARY KEY,
    name TEXT NOT NULL,
    first_at INTEGER NOT NULL
);
""",
    "postgresql": """
CREATE TABLE IF NOT EXISTS agentgate_agent_names (
    reading TEXT PRIMARY KEY,
    name TEXT NOT NULL,
    first_at BIGINT NOT NULL
);
""",
}

_CLAIM = (
    "INSERT INTO agentgate_agent_names (reading, name, first_at) VALUES (?, ?, ?) "
    "ON CONFLICT (reading) DO NOTHING"
)


_GRANTED = ("issued grant ", "delegated grant ")
"""How the first reason of a grant's ``allow`` entry opens (``gate._delegation``)."""

_AGENT_ENTRIES: dict[Dialect, str] = {
    "sqlite": (
        "SELECT idx, entry FROM audit_log WHERE idx > ? "
        """AND instr(CAST(entry AS TEXT), '"resource":"agent:') > 0 ORDER BY idx LIMIT ?"""
    ),
    "postgresql": (
        "SELECT idx, entry FROM audit_log WHERE idx > ? "
        """AND position(convert_to('"resource":"agent:', 'UTF8') in entry) > 0 ORDER BY idx LIMIT ?"""
    ),
}
"""The audit entries on a resource ``agent:...`` after an index, in index order (an entry's
canonical bytes hold ``"resource":"agent:`` just so; one that holds it in an argument is read
and passed over)."""

_BATCH = 1000


def granted_before(tx: Transaction, dialect: Dialect) -> Iterator[tuple[str, int]]:
    """``(name, when)`` for each grant ``Gate.issue`` and ``Gate.delegate`` recorded in the
    store's audit log (its ``allow`` entry on ``agent:NAME``, in index order; ``when`` in Unix
    seconds), read in batches of ``_BATCH`` in ``tx``; none where the store has no log. An entry
    that is not one (unreadable bytes: ``audit verify`` reports those) is passed over, as is a
    name the Gate would no longer grant and no decision takes (``agent_name_refused``: a Cyrillic
    ``е`` in ``rеsearcher``, granted before review R67): such a grant is dead, and its readings
    would only refuse the name it imitates."""
    if not tables_held(tx.execute, dialect, ["audit_log"]):
        return
    after = -1
    while rows := tx.execute(_AGENT_ENTRIES[dialect], (after, _BATCH)):
        for idx, data in rows:
            after = int(idx)
            granted = _grant_named(data)
            if granted is not None and agent_name_refused(granted[0], "an agent's") is None:
                yield granted


def _grant_named(data: object) -> tuple[str, int] | None:
    """The agent's name and the time, in Unix seconds, of a grant's ``allow`` entry (its stored
    bytes, or text where SQLite keeps it so); else ``None``."""
    try:
        entry = json.loads(data if isinstance(data, str) else bytes(data))  # type: ignore[call-overload]
        resource, reasons, kind = entry["resource"], entry["reasons"], entry["kind"]
        when = datetime.fromisoformat(entry["time"].replace("Z", "+00:00")).timestamp()
    except (ValueError, TypeError, KeyError, AttributeError, RecursionError):
        return None
    if kind != "allow" or not isinstance(resource, str) or not resource.startswith("agent:"):
        return None
    # Checked as a list before it is read: an entry edited in the database is passed over, never
    # a KeyError or TypeError that stops the upgrade (until review R70's second reading).
    if not isinstance(reasons, list) or not reasons or not isinstance(reasons[0], str):
        return None
    if not reasons[0].startswith(_GRANTED):
        return None
    name = resource.removeprefix("agent:")
    return (name, int(when)) if name else None


class Claimed(NamedTuple):
    """What ``AgentNames.claim`` found."""

    earlier: str | None
    """Another name that holds one of the readings claimed, the first granted (by ``first_at``,
    then name in code point order, as every process and store orders them, ``_holders``); else
    ``None``, the claim made."""
    first_at: int
    """When the name claimed was first granted on the store (Unix seconds): the time of this
    claim, or of an earlier one by any process, before any restart. A Gate orders the names it
    keeps by it (``_Delegation._read_alike``), as ``earlier`` is chosen."""


class AgentNames:
    """The free agent names granted on a store, shared by every process that uses it."""

    def __init__(self, store: Store) -> None:
        self.store = store
        store.ensure_schema("agent_names", AGENT_NAMES_DDL, made=self._fill_in)

    def _fill_in(self, tx: Transaction) -> None:
        """Claim, in ``tx`` (the one that makes the table), the readings of every name granted
        before it (``granted_before``), in the order they were granted: where two read alike,
        the first granted holds the reading, as ``claim`` would have decided then. A principal's
        name is claimed too (which names are the policy's is not known here): a free name that
        reads as it is refused as the principal rule refuses it. A name granted again is claimed
        once, at its first grant: its later grants would only insert nothing again."""
        filled: set[str] = set()
        for name, when in granted_before(tx, self.store.dialect):
            if name in filled:
                continue
            filled.add(name)
            for reading in sorted(_confusables.readings(name)):
                tx.execute(_CLAIM, (reading, name, when))

    def claim(self, tx: Transaction, name: str, readings: Collection[str], now: int) -> Claimed:
        """Record ``readings`` as ``name``'s in ``tx`` where no other name holds them; returns
        another name that holds one of them (``Claimed.earlier``: the first granted, by
        ``first_at`` then name in code point order, ``_holders``; the claim then to be rolled
        back with ``tx``), else when ``name`` was first granted (``Claimed.first_at``: ``now``,
        or an earlier grant's time).
        Readings are claimed in sorted order, so that two claims sharing two readings wait for
        one another instead of deadlocking."""
        ordered = sorted(readings)
        for reading in ordered:
            tx.execute(_CLAIM, (reading, name, now))
        held = _holders(tx, ordered)
        return Claimed(_other(held, name), min((at for at, holder in held if holder == name), default=now))

    def earlier(self, tx: Transaction, name: str, readings: Collection[str]) -> str | None:
        """Another name that holds one of ``readings``, read in ``tx`` and claiming nothing: the
        one ``claim`` would tell (``Claimed.earlier``), else ``None``. What a Gate that refuses
        ``name`` from its own memory names (``_Delegation._read_alike``): its memory does not
        hold the names other processes granted."""
        return _other(_holders(tx, sorted(readings)), name)


def _other(held: list[tuple[int, str]], name: str) -> str | None:
    """The first of ``held`` (``_holders``) that is not ``name``: the name ``claim`` and
    ``earlier`` tell; ``None`` where there is none."""
    return next((holder for _, holder in held if holder != name), None)


def _holders(tx: Transaction, readings: Collection[str]) -> list[tuple[int, str]]:
    """``(first_at, name)`` of the names that hold ``readings`` on the store, the first granted
    first, then in code point order: sorted here, not by ``ORDER BY``, whose order of text is
    the database's collation (a PostgreSQL database of ICU ``en-US`` puts ``bobi`` before
    ``Bobl``; until review R91's fourth reading a tie within a second was told so there, and
    in code point order by a Gate that granted both and by SQLite)."""
    marks = ", ".join("?" * len(readings))
    rows = tx.execute(
        f"SELECT name, first_at FROM agentgate_agent_names WHERE reading IN ({marks})", tuple(readings)
    )
    return sorted((int(at), str(holder)) for holder, at in rows)
