"""``verify`` (``_Verification``): the tree recomputed from the entries' bytes in one pass, read
in batches, and every check that can be made against the stored checkpoints, a saved one, and the
reference index; the result is a ``VerifyReport`` that names the first bad index and what is
wrong, never an exception for a tampered log."""

from __future__ import annotations

import bisect
import hashlib
import itertools
import operator
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, cast

from agentgate.audit.entry import AuditEntry, one_line
from agentgate.audit.merkle import EMPTY_ROOT, RootAccumulator
from agentgate.audit.note import Checkpoint, given_text, signer_key_ids
from agentgate.errors import TamperDetected
from agentgate.store._base import Row, Store, sqlite_name
from agentgate.store.audit._schema import (
    APPEND_FUNCTION_LINE,
    FOREIGN_TRIGGER,
    RECORD_OF_REPAIRS_DROPPED,
    RULE_LINE,
    SPLIT_LINE,
    accept_repair,
    accepted_repairs,
    missing_protection,
    upgrade_additions,
)
from agentgate.store.audit._stored import (
    _MAX_INDEX,
    _bytes,
    _described,
    _index_of,
    _note,
    _stored_index,
    _whole,
)

_sha256 = hashlib.sha256
_IDX, _ENTRY, _LEAF = operator.itemgetter(0), operator.itemgetter(1), operator.itemgetter(2)
_LEAF_PREFIX = _sha256(b"\x00")
"""SHA-256 fed the leaf prefix (RFC 6962): each leaf hash continues a copy of it, never this one."""
_REF_KEY = b',"ref":'
"""The top-level ``ref`` key of an entry's bytes: its last occurrence (``args`` and ``reasons`` come
before it, and the keys after it hold no objects; a string holds no unescaped quote)."""
_NUMBER_START = b"-0123456789"
"""The bytes a number ``%d`` writes can start with: an entry whose last ``,"ref":`` is followed by
one of them has a reference for the comparison with ``audit_refs`` (null starts with ``n``)."""
_REF_NEEDLE = b',"ref":%d,"resource":'
"""What an entry holds at its last ``,"ref":`` when its reference is the number formatted in."""
_MAX_REF = 10**18
"""References the index holds: 1 to 18 digits (what PostgreSQL's trigger reads; no real log nears it)."""


def _below(end: int) -> tuple[str, int]:
    """The bound ``idx < end`` as a store takes it: ``end`` itself wherever a store's integer holds
    it, so that a fraction just below it (``end - 0.5``, in a SQLite table made again without its
    key) is read with the indexes below it; ``idx <= 2**63 - 1`` (the largest index a store holds)
    only for an ``end`` past it, the log's end past a row there (review R90, which bound every read
    by ``end - 1`` and so read no fraction between the last index of a run and the next run)."""
    return ("idx < ?", end) if end <= _MAX_INDEX else ("idx <= ?", _MAX_INDEX)


@dataclass(frozen=True)
class VerifyReport:
    """What ``AuditLog.verify`` found. ``ok`` is true only if nothing at all is wrong."""

    size: int
    """Entries in the log: the rows it holds at distinct indexes from 0 (``AuditLog.size``). With
    ``missing`` indexes below its end that no row holds, the log ends at ``size + missing``."""
    root: bytes
    """Merkle root recomputed from the entries' bytes; with entries missing, of those before the
    first missing one (no tree past it can be rebuilt)."""
    checkpoints_checked: int
    """Stored checkpoints whose signature and root were checked."""
    first_bad_index: int | None = None
    """The smallest index implicated by a problem, when one can be named."""
    problems: tuple[str, ...] = field(default_factory=tuple)
    """Each thing that is wrong, in the order found."""
    unopened_signers: tuple[tuple[str, ...], ...] = field(default_factory=tuple)
    """For each stored checkpoint whose note did not open under the log's keys, the key ids (hex)
    of its well-formed signature lines under the log's origin (``note.signer_key_ids``): all of
    them one other key, with none that opened, is what a wrong public key given looks like."""

    unprotected: tuple[str, ...] = field(default_factory=tuple)
    """Each trigger of the log's machinery that is not in force (``missing_protection``: a
    protection trigger dropped, disabled or not the one agentgate made, the reference index's
    trigger dropped), one line each: the entries may still verify (``problems`` empty), but whoever changed the machinery could
    edit them, and a later edit would be refused by nothing."""

    accepted_repairs: tuple[str, ...] = field(default_factory=tuple)
    """Each repair of a protection trigger (``audit_repairs``) that was accepted, with who accepted
    it, when and why, one line each: information, not a problem (an unaccepted repair is in
    ``unprotected``)."""

    added_on_upgrade: tuple[str, ...] = field(default_factory=tuple)
    """Each protection trigger that a writer's opening added to a log made before a release made
    it (``audit_checkpoints_no_replace`` on a SQLite log of 2026-11-29), one line each: information,
    not a problem, and no repair to accept."""

    signed_size: int = 0
    """The largest size a checkpoint that opened signs (a stored one, or the saved one given):
    the entries from it up to ``size`` are covered by no signature yet, only by the database's
    triggers (not tampering: ``AuditLog.checkpoint`` covers them)."""

    missing: int = 0
    """Indexes below the log's end that no row holds (rows deleted in the middle), each gap named
    in ``problems``: ``size`` does not count them."""

    @property
    def repairs(self) -> tuple[str, ...]:
        """The lines of ``unprotected`` that name a repair not accepted (``audit_repairs``)."""
        return tuple(line for line in self.unprotected if line.startswith("repair "))

    @property
    def records_lost(self) -> tuple[str, ...]:
        """The line of ``unprotected`` that names a dropped record of repairs (``audit_repairs``
        gone while the store records it as made): the protection triggers may all be in force."""
        return tuple(line for line in self.unprotected if line.startswith(RECORD_OF_REPAIRS_DROPPED))

    @property
    def foreign_triggers(self) -> tuple[str, ...]:
        """The lines of ``unprotected`` that name a trigger on the log's tables that agentgate did
        not make."""
        return tuple(
            line for line in self.unprotected if FOREIGN_TRIGGER in line and not line.startswith(RULE_LINE)
        )

    @property
    def rules(self) -> tuple[str, ...]:
        """The lines of ``unprotected`` that name a PostgreSQL rule on the log's tables (agentgate
        makes none)."""
        return tuple(line for line in self.unprotected if line.startswith(RULE_LINE))

    @property
    def append_function(self) -> tuple[str, ...]:
        """The line of ``unprotected`` that names the PostgreSQL append function
        (``agentgate_audit_lock_next``) missing or not the one agentgate made."""
        return tuple(line for line in self.unprotected if line.startswith(APPEND_FUNCTION_LINE))

    @property
    def split(self) -> tuple[str, ...]:
        """The line of ``unprotected`` that names the log's tables split across schemas (PostgreSQL:
        one moved by hand with ``ALTER TABLE ... SET SCHEMA``)."""
        return tuple(line for line in self.unprotected if line.startswith(SPLIT_LINE))

    @property
    def ok(self) -> bool:
        """Nothing at all is wrong: no problem with the entries, and the machinery is whole."""
        return not self.problems and not self.unprotected

    @property
    def entries_verify(self) -> bool:
        """The entries and checkpoints pass every check (``problems`` empty), whatever ``unprotected`` says."""
        return not self.problems


def _pick(values: Sequence[Any], positions: Sequence[int]) -> Sequence[Any]:
    """``values`` at ``positions``, in that order (one C-level call for many)."""
    if len(positions) < 2:
        return [values[k] for k in positions]
    return cast(tuple[Any, ...], operator.itemgetter(*positions)(values))


_CHANGED_WITH_LEAF_HASH = "was changed together with its leaf hash"


def _shown_index(value: object) -> str:
    """An ``idx`` read from ``audit_log`` as ``verify`` names it: a whole number as it is, anything
    else (in a SQLite table made again without its ``INTEGER PRIMARY KEY``) with what it is, so
    that the text ``'9'`` does not read as the index 9 (until review R68 it did)."""
    if type(value) is int:
        return str(value)
    return f"{_described(value)}, not a whole number: a row written outside agentgate"


_Run = tuple[tuple[int, int, object] | None, int, list[tuple[int, bytes, bytes]]]
"""A run of rows at consecutive indexes (``_runs``): the gap before it (``None``: none), its
first index, its rows (index, entry bytes, leaf hash)."""


def _runs(rows: list[tuple[int, bytes, bytes]], end: int, odd: object) -> tuple[list[_Run], int, object]:
    """A batch of rows read in index order, the pass expecting index ``end`` next, as runs of rows
    at consecutive whole indexes, each ``(gap, first index, rows)``: ``gap`` is ``None`` where the
    run follows what was read before it, else ``(first index missing, next index held, the next
    row's index as stored)``; with the index the pass expects after the batch, and ``odd``, the
    index of the first row read since the last whole one that is not a whole number (``None``:
    none), which the gap after it names. A second row of one index (a table without its primary
    key) is left out here, counted after the pass; so is a row whose index is not a whole number,
    which ``_check_odd_indexes`` counts."""
    runs: list[_Run] = []
    gap: tuple[int, int, object] | None = None
    run: list[tuple[int, bytes, bytes]] = []
    previous: object = None
    for row in rows:
        idx = row[0]
        if idx == previous:
            continue
        previous = idx
        if idx == end:
            run.append(row)
            end += 1
            odd = None
        elif type(idx) is not int:
            odd = idx if odd is None else odd
        else:  # a whole index past the one expected: those between are missing
            if run:
                runs.append((gap, end - len(run), run))
            gap, run, odd = (end, idx, idx if odd is None else odd), [row], None
            end = idx + 1
    if run:
        runs.append((gap, end - len(run), run))
    return runs, end, odd


def _missing(lo: int, hi: int, shown: object) -> str:
    """The problem of the indexes ``[lo, hi)`` that no row holds, the next row's index being ``shown``."""
    more = (
        ""
        if hi - lo == 1
        else f", and so is entry {lo + 1}"
        if hi - lo == 2
        else f", and so are entries {lo + 1}..{hi - 1}"
    )
    return f"entry {lo}: missing{more} (the next stored index is {_shown_index(shown)})"


def _not_rebuilt(sizes: Sequence[int], broken: int) -> str:
    """The problem of the checkpoints of ``sizes`` (sorted), whose trees hold entry ``broken``,
    which is missing: their roots cannot be recomputed (one line, however many there are)."""
    if len(sizes) == 1:
        return f"checkpoint of size {sizes[0]}: its root cannot be checked: entry {broken}, which its tree holds, is missing"
    others = (
        f"that of the checkpoint of size {sizes[1]}"
        if len(sizes) == 2
        else f"those of the {len(sizes) - 1} larger checkpoints up to size {sizes[-1]}"
    )
    return (
        f"checkpoint of size {sizes[0]}: its root cannot be checked, nor can {others}: entry "
        f"{broken}, which their trees hold, is missing"
    )


KeyedByIdx = Literal["audit_log", "audit_refs"]
"""The tables of the log keyed by ``idx`` whose key ``_one_row_per_index`` reads (only these names
are put into its catalog queries)."""


def _rowid_keyed(store: Store, table: KeyedByIdx) -> bool:
    """Whether SQLite's ``table`` is keyed by ``idx`` as agentgate makes it, an ``INTEGER PRIMARY
    KEY`` of a rowid table, which holds whole numbers only (not one ``WITHOUT ROWID`` or declared
    ``DESC``: SQLite then keeps a separate key, which holds anything)."""
    columns = store.query(f"PRAGMA table_info({table})")
    keys = [row for row in columns if row[5]]
    if len(keys) != 1 or sqlite_name(str(keys[0][1])) != "idx" or str(keys[0][2]).upper() != "INTEGER":
        return False
    return not any(row[3] == "pk" for row in store.query(f"PRAGMA index_list({table})"))


_UNIQUE_IDX_KEY = (
    "SELECT 1 FROM pg_catalog.pg_index i JOIN pg_catalog.pg_attribute a "
    "ON a.attrelid = i.indrelid AND a.attnum = i.indkey[0] "
    "WHERE i.indrelid = pg_catalog.to_regclass('{table}') AND i.indisunique AND i.indisvalid "
    "AND i.indimmediate AND i.indnkeyatts = 1 AND i.indpred IS NULL AND i.indexprs IS NULL "
    "AND a.attname = 'idx' AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_inherits "
    "WHERE inhparent = i.indrelid) LIMIT 1"
)
"""PostgreSQL: a row when the table (``{table}``, a ``KeyedByIdx``) the store's statements
find has a unique index on ``idx`` alone, checked at once, over every row (its primary key as
agentgate makes it), and no table inherits from it (a child's rows are read with it, and its index
does not cover them)."""


def _one_row_per_index(store: Store, table: KeyedByIdx = "audit_log") -> bool:
    """Whether ``table``'s key (``audit_log``, or the reference index ``audit_refs``) rules out two
    rows of one index: SQLite's ``idx INTEGER PRIMARY KEY`` of a rowid table (``_rowid_keyed``),
    PostgreSQL's unique index on ``idx`` alone. A table made again without it (or its key dropped)
    may hold a second row of an index."""
    if store.dialect == "sqlite":
        return _rowid_keyed(store, table)
    return bool(store.query(_UNIQUE_IDX_KEY.format(table=table)))


class _Verification:
    """The ``AuditLog``'s ``verify``: indexes without gaps, entries against their leaf hashes,
    uncovered entries against their own index, checkpoints against their signatures, each other
    and the recomputed roots, and the reference index against the references entries carry."""

    # The log's state this part reads (``AuditLog.__init__`` sets it).
    store: Store
    origin: str
    refs_indexed: bool

    if TYPE_CHECKING:  # what this part calls of the log's other parts

        def open_checkpoint(self, note: str) -> Checkpoint: ...

        def _batches(self, start: int = 0) -> Iterator[list[tuple[int, bytes, bytes]]]: ...

        def _rows(
            self, *, include_entry_from: int, start: int = 0
        ) -> Iterator[tuple[int, bytes | None, bytes]]: ...

        def _checkpoint_rows(self) -> Iterator[Row]: ...

        def _index_given(self, value: object) -> int: ...

    def verify(self, saved_checkpoint: str | None = None) -> VerifyReport:
        """Recompute the tree from the entries' bytes and check everything that can be checked.

        Checks: indexes run from 0 without gaps, no index is held by two rows, and no row is below 0; each entry's bytes match
        its stored leaf hash;
        each entry that no checkpoint covers carries its own index; past an index no row holds
        (named, and counted in ``missing``) the pass goes on: each later entry is checked against
        its leaf hash and its own index, and each checkpoint whose tree holds the missing entry is
        named as one whose root cannot be checked; each checkpoint row's size and
        root columns match its signed note;
        every stored checkpoint is signed by the log key, and no two disagree about one size; the
        recomputed root at each checkpoint's size equals its root; no checkpoint is larger than
        the log (deleted entries, or a database restored from an older copy); the log is
        consistent with ``saved_checkpoint`` (a signed note kept elsewhere) when one is given; and
        the reference index ``audit_refs`` (when this log keeps one) holds exactly the ``(idx, ref)``
        pairs the entries carry, in the same pass (a missing or changed row hides an entry from
        ``explain``; such a problem names no bad index, the entries being intact). The log's
        triggers are read from the catalog: each one not in force is in ``unprotected``, not in
        ``problems`` (the entries are checked as they are), and makes the report not ``ok``.
        Never raises for a tampered log: the report names the first bad index and what is wrong.
        Raises ``InputError``, reading nothing, for a ``saved_checkpoint`` that is not text
        (``given_text``: bytes read from a file in binary mode, say), which is no tampering.
        """
        if saved_checkpoint is not None:
            given_text(saved_checkpoint, "saved_checkpoint", "a signed checkpoint")
        problems: list[str] = []
        bad: list[int] = []
        spans: list[tuple[int, int]] = []  # ranges an edit lies in, no entry of them named
        unopened: list[tuple[str, ...]] = []
        expected, checked, saved_only = self._signed_roots(saved_checkpoint, problems, unopened)
        if expected.get(0, EMPTY_ROOT) != EMPTY_ROOT:
            # The pass compares a root once entries are added: the empty tree's is compared here
            # (until review R65 a signed size 0 with another root verified; checkpoint refused it).
            problems.append(
                "checkpoint of size 0: root does not match the entries; the empty tree's root is "
                "SHA-256 of no bytes"
            )
        acc = RootAccumulator()
        last_good = 0
        refs_seen = 0  # rows of audit_refs compared with the entries they index
        sizes = sorted(expected)
        uncovered = sizes[-1] if sizes else 0
        # The table as agentgate makes it (keyed by idx) holds one row per index (in SQLite, each a
        # whole number): read once, for the pass and for the counts after it.
        keyed = _one_row_per_index(self.store, "audit_log")
        end = 0  # one past the last whole index read: the index the pass expects next
        held = 0  # rows read at distinct whole indexes: the entries the log holds
        missing = 0  # indexes below ``end`` that no row holds
        broken: int | None = None  # the first of them: no root past it can be recomputed
        odd: object = None  # the first row's index since the last whole one read, not a whole number
        for rows in self._batches():
            count = len(rows)
            # Keyed, the rows' indexes are ordered and unique: a batch's first and last show a gap
            # inside. Without the key, every row's index against its position, one C-level
            # comparison per batch: the first and last alone (until review R84) passed a second
            # row of one index beside a gap (0, 1, 1, 3), which also hid the gap from the count of
            # rows after the pass.
            if (
                (rows[0][0] == end and rows[-1][0] == end + count - 1)
                if keyed
                else list(map(_IDX, rows)) == list(range(end, end + count))
            ):
                runs: list[_Run] = [(None, end, rows)]
                end += count
            else:
                runs, end, odd = _runs(rows, end, odd)
            for gap, first, run in runs:
                if gap is not None:
                    # A row deleted in the middle: the pass goes on past it (until review R89 it
                    # stopped, counted the entries before it alone, read the larger checkpoints as
                    # a truncated log and never read the entries after it).
                    problems.append(_missing(*gap))
                    bad.append(gap[0])
                    missing += gap[1] - gap[0]
                    broken = gap[0] if broken is None else broken
                    if self.refs_indexed:  # the rows of the entries missing: named by the line above
                        refs_seen += self._refs_between(gap[0], gap[1])
                held += len(run)
                # Past a missing entry no root can be recomputed: only an entry's own index field
                # shows a row moved there, so it is read for every entry from there on.
                index_from = uncovered if broken is None else min(uncovered, broken)
                computed, skip = self._check_run(first, run, index_from, bad, problems)
                if self.refs_indexed:
                    refs_seen += self._check_refs(first, list(map(_ENTRY, run)), skip, problems)
                if broken is None:
                    last_good = self._feed(
                        acc, computed, sizes, expected, saved_only, last_good, bad, problems, spans
                    )
        if odd is not None:  # rows past the last whole index, none of them whole (named below)
            problems.append(_missing(end, end + 1, odd))
            bad.append(end)
        size = held
        # The counts of repeated and of not whole indexes, each a walk over the table again (until
        # review R70 the first was made on every log), are made only on a table made again without
        # its key, or whose key was dropped (``keyed``, read before the pass).
        if not keyed:
            self._check_repeated_indexes(end, held, bad, problems)
        if self.refs_indexed:
            # Rows past the entries read are left alone: an entry appended since (its row committed
            # with it) must not read as tampering, and a row for an index not written yet only
            # names an entry that does not exist (the trigger overwrites it when one is written).
            rows_in_index = self._refs_between(0, end)
            if rows_in_index != refs_seen:
                problems.append(
                    f"audit_refs has {rows_in_index - refs_seen} row(s) that verify did not compare with "
                    "their entries (the reference index changed while verify read it)"
                )
            if not _one_row_per_index(self.store, "audit_refs"):
                self._check_repeated_refs(end, problems)
                self._check_odd_indexes("audit_refs", problems)
        # Every read above starts at index 0: a row below it (inserted with the triggers dropped)
        # is in no tree, and only this count sees it.
        below, lowest = self.store.query("SELECT COUNT(*), MIN(idx) FROM audit_log WHERE idx < 0")[0]
        if below:
            problems.append(
                f"audit_log has {below} row(s) at an index below 0 (the lowest {lowest}), which no "
                "entry has: rows inserted outside agentgate"
            )
        if not keyed:
            self._check_odd_indexes("audit_log", problems)
        if broken is not None:
            unchecked = [s for s in sizes if broken < s <= end]
            if unchecked:
                problems.append(_not_rebuilt(unchecked, broken))
        # The log's end, not its count of rows: a row missing below it is named above, and is not
        # a truncated log (until review R89 the count before the first missing row was compared).
        has = f"{size}" if not missing else f"{size}, the last at index {end - 1}"
        for cp_size in sorted(s for s in expected if s > end):
            problems.append(
                f"a checkpoint covers {cp_size} entries but the log has {has}: "
                "entries were deleted or the database was restored from an older copy"
            )
            bad.append(end)
        return VerifyReport(
            size,
            acc.root(),
            checked,
            min(bad) if bad else None,
            tuple(problems),
            tuple(unopened),
            self.unprotected(),
            tuple(accepted_repairs(self.store)),
            tuple(upgrade_additions(self.store)),
            signed_size=max(expected, default=0),
            missing=missing,
        )

    def _check_run(
        self,
        first: int,
        rows: list[tuple[int, bytes, bytes]],
        index_from: int,
        bad: list[int],
        problems: list[str],
    ) -> tuple[list[bytes], set[int]]:
        """Check ``rows``, at the consecutive indexes from ``first``: each entry's bytes against its
        stored leaf hash, and the index field and canonical form of each from ``index_from``,
        appending what is wrong to ``problems`` and ``bad``. Returns the leaf hashes computed and
        the positions of the entries reported (for the reference index's comparison)."""
        # Each leaf hash from a copy of the hash of its 0x00 prefix: no copy of the entry's
        # bytes behind the prefix (review R70: about an eighth less time than hashing the two
        # joined, per entry).
        computed: list[bytes] = []
        append, prefixed = computed.append, _LEAF_PREFIX.copy
        for data in map(_ENTRY, rows):
            leaf = prefixed()
            leaf.update(data)
            append(leaf.digest())
        stored = list(map(_LEAF, rows))
        edited = set()
        if computed != stored:
            for k, (c, h) in enumerate(zip(computed, stored, strict=True)):
                if c != h:
                    problems.append(
                        f"entry {first + k}: bytes do not match the stored leaf hash (entry edited)"
                    )
                    bad.append(first + k)
                    edited.add(k)
        # Entries no stored checkpoint covers (and those past a missing one): only their own index
        # field can show that rows were swapped or moved (with their leaf hashes), and only their
        # form that bytes no agentgate wrote were put there, so each of them is read and re-encoded.
        misplaced: set[int] = set()
        for k in range(max(0, index_from - first), len(rows)):
            carried = _index_of(rows[k][1])
            if k not in edited and carried != first + k:
                what = (
                    "is not a canonical entry (bytes written outside agentgate)"
                    if carried is None
                    else f"holds the entry of index {carried} (rows moved, inserted or reordered)"
                )
                problems.append(f"entry {first + k}: {what}")
                bad.append(first + k)
                misplaced.add(k)
        return computed, edited | misplaced

    def _refs_between(self, lo: int, hi: int) -> int:
        """The rows of the reference index at the indexes ``[lo, hi)``: for a gap no row of the log
        holds, those whose entries are missing (named as such), compared with none; for ``[0, end)``
        all those the pass should have compared (``_below``: ``hi`` may be one past 2**63 - 1)."""
        bound, top = _below(hi)
        return int(
            self.store.query(
                f"SELECT COUNT(*) FROM audit_refs WHERE idx >= ? AND {bound} AND ref < ?", (lo, top, _MAX_REF)
            )[0][0]
        )

    def unprotected(self) -> tuple[str, ...]:
        """Each trigger of the log's machinery that is not in force (``missing_protection``), one
        line each, read from the catalog only: what ``verify`` puts in ``VerifyReport.unprotected``,
        without reading the entries (``audit show`` and ``explain`` warn with it)."""
        return tuple(missing_protection(self.store))

    def accept_repair(self, repair: int, by: str, reason: str) -> str:
        """Accept repair ``repair`` of ``audit_repairs`` (a protection trigger a writer's opening put
        back) once ``by`` checked the entries it left unprotected against a copy kept outside the
        database: the acceptance is written to ``audit_repairs`` (append-only), and ``verify`` then
        prints the repair as information, not a problem. Returns the repair, in words. Raises
        ``RepairRefused`` (an ``InputError``) for an id of no repair or one accepted already, and
        ``InputError`` for an empty ``by`` or ``reason``."""
        return accept_repair(self.store, repair, by, reason)

    def repeated_indexes(self, start: int = 0, end: int | None = None) -> list[tuple[int, int]]:
        """The first ten indexes from ``start`` (below ``end`` when given) that more than one row
        of ``audit_log`` holds, each with its number of rows: possible only in a table whose
        primary key was dropped. ``verify`` names each as tampering; ``entries`` yields one row of
        each, and ``agentgate audit show`` names them as ``verify`` does.

        ``start`` is checked as ``entries`` checks it (``_index_given``: ``InputError`` when it is
        not an integer or negative, ``BeyondLogEnd`` past what a store's integer holds) and
        ``end``, when given, must be an integer (``_whole``; one not past ``start`` bounds no
        index): until review R91 both went to the query as given, so that 2**70 was the driver's
        ``StoreError`` and text, ``None`` or 0.5 answered ``[]``, no repeated row."""
        start = self._index_given(start)
        if end is not None and (end := _whole(end, "end")) <= start:
            return []
        # ``_below``: an ``end`` past a row at 2**63 - 1 is an integer no store holds.
        below, params = "", [start]
        if end is not None:
            bound, top = _below(end)
            below, params = f"AND {bound} ", [start, top]
        rows = self.store.query(
            f"SELECT idx, COUNT(*) FROM audit_log WHERE idx >= ? {below}"
            "GROUP BY idx HAVING COUNT(*) > 1 ORDER BY idx LIMIT 10",
            params,
        )
        # A whole number only: text, bytes and NULL (SQLite keeps them in a table made again
        # without its key; text sorts after every number) are the index of no entry, counted and
        # named by verify (until review R84 two rows at 'x' made ``int`` raise in ``audit show``).
        held = ((_stored_index(idx), int(count)) for idx, count in rows)
        return [(idx, count) for idx, count in held if idx is not None]

    def _check_repeated_indexes(self, size: int, held: int, bad: list[int], problems: list[str]) -> None:
        """Append to ``problems`` (and ``bad``) each index below ``size`` (the log's end as the pass
        read it, where it read ``held`` entries) that more than one row of ``audit_log`` holds:
        possible only in a table whose primary key was dropped. The pass read
        one row of each (its leaf hash and the checkpoints' roots check that one); the others are
        found by a count, so that one on the boundary of two batches (read past by ``idx > last``)
        is reported too. Entries appended since the pass began have indexes of ``size`` or more."""
        bound, top = _below(size)
        stored = int(
            self.store.query(f"SELECT COUNT(*) FROM audit_log WHERE idx >= 0 AND {bound}", (top,))[0][0]
        )
        if stored <= held:
            return
        repeated = self.repeated_indexes(0, size)
        for idx, rows in repeated:
            problems.append(
                f"entry {idx}: {rows} rows hold this index, which one entry has: rows inserted outside "
                "agentgate (verify checked one of them)"
            )
            bad.append(idx)
        if stored - held > sum(rows - 1 for _idx, rows in repeated):
            problems.append(f"audit_log has {stored - held} more row(s) below index {size} than entries")

    def _check_repeated_refs(self, size: int, problems: list[str]) -> None:
        """Append to ``problems`` each entry below ``size`` (the first ten) that more than one row
        of the reference index ``audit_refs`` holds: possible only in a table whose primary key was
        dropped (or, PostgreSQL, with a table inheriting from it). The comparison with the entries
        keeps one row per index, and the count of the index's rows counts every one, so a second
        row, even a copy, is seen only here (until review R70 it passed unreported); ``explain``
        would list the entry twice. The entries themselves are intact: no bad index is named."""
        bound, top = _below(size)
        repeated = self.store.query(
            f"SELECT idx, COUNT(*) FROM audit_refs WHERE idx >= 0 AND {bound} "
            "GROUP BY idx HAVING COUNT(*) > 1 ORDER BY idx LIMIT 10",
            (top,),
        )
        for idx, rows in repeated:
            problems.append(
                f"audit_refs has {int(rows)} rows for entry {_shown_index(idx)}, where an entry has at "
                "most one (the reference index was tampered with: rows inserted outside agentgate)"
            )

    def _check_odd_indexes(self, table: KeyedByIdx, problems: list[str]) -> None:
        """Append to ``problems`` the rows of a SQLite ``table`` made again without its key (the
        caller checks: a rowid table keyed by ``idx``, as agentgate makes it, holds nothing else
        and is not scanned again) whose index no entry has, which no read of the pass above sees:
        it reads from index 0 in index order, where SQLite sorts text and bytes after every number
        and leaves NULL out. In ``audit_log``, an index that is not a whole number (NULL, text, a
        fraction, bytes); in ``audit_refs``, one that is not a number (text, bytes, NULL: until
        review R84 unreported), a fraction being compared with the entries and named there."""
        if self.store.dialect != "sqlite":
            return  # PostgreSQL's idx columns hold whole numbers only
        odd, said = (
            (
                "typeof(idx) != 'integer'",
                "whose index is not a whole number (the first: {}), which no entry has: rows written outside agentgate",
            )
            if table == "audit_log"
            else (
                "typeof(idx) IN ('text', 'blob', 'null')",
                "at an index that is not a number (the first: {}), which no entry has (the reference "
                "index was tampered with: rows written outside agentgate)",
            )
        )
        count, lowest = self.store.query(f"SELECT COUNT(*), MIN(idx) FROM {table} WHERE {odd}")[0]
        if count:
            problems.append(f"{table} has {count} row(s) " + said.format(_described(lowest)))

    def _signed_roots(
        self, saved_checkpoint: str | None, problems: list[str], unopened: list[tuple[str, ...]]
    ) -> tuple[dict[int, bytes], int, int | None]:
        """The root each stored checkpoint (and ``saved_checkpoint``) signs, by size; how many
        checkpoint rows were compared with their notes; and the size of the saved checkpoint when
        no stored one has it. Each note that does not open, each row whose columns disagree with
        its note and each fork is appended to ``problems``; the key ids that signed each stored
        note that does not open, to ``unopened``."""
        expected: dict[int, bytes] = {}
        checked = 0
        in_rows: set[int] = set()  # the sizes of the stored checkpoints
        saved_only: int | None = None  # the size of the saved checkpoint, when no stored one has it
        # Checkpoints are read in batches and only their sizes and roots kept: a log checkpointed
        # every minute for a year has half a million of them.
        # The size column is compared as stored (SQLite keeps text, bytes or a fraction there if
        # given one): such a row is reported as edited, never converted or raised on.
        in_table: Iterator[tuple[str, object, bytes | None]] = (
            (_note(note), size, _bytes(root)) for note, size, root in self._checkpoint_rows()
        )
        # ``is not None``: an empty saved checkpoint (a file truncated) is one that does not open
        # (until review R90 it was left out, and verify said ok).
        saved = [(saved_checkpoint, None, None)] if saved_checkpoint is not None else []
        for position, (note, size_column, root_column) in enumerate(itertools.chain(in_table, saved), 1):
            label = f"checkpoint #{position}" if size_column is not None else "saved checkpoint"
            try:
                cp = self.open_checkpoint(note)
            except TamperDetected as exc:  # may quote the note: a tamperer's text
                problems.append(f"{label}: {one_line(str(exc))}")
                if size_column is not None:
                    unopened.append(signer_key_ids(note, self.origin))
                continue
            # The row's size and root columns are what the next checkpoint() builds on: edited,
            # they make it refuse to sign, so they are checked against the signed note here too.
            if size_column is not None:
                checked += 1
                if (cp.size, cp.root) != (size_column, root_column) or type(size_column) is not int:
                    problems.append(
                        f"{label}: its size or root column does not match its signed note (row edited)"
                    )
            if cp.size in expected and expected[cp.size] != cp.root:
                problems.append(f"{label}: two checkpoints of size {cp.size} have different roots (a fork)")
                continue
            expected[cp.size] = cp.root
            if size_column is not None:
                in_rows.add(cp.size)
            elif cp.size not in in_rows:
                saved_only = cp.size
        return expected, checked, saved_only

    def _feed(
        self,
        acc: RootAccumulator,
        computed: list[bytes],
        sizes: list[int],
        expected: dict[int, bytes],
        saved_only: int | None,
        last_good: int,
        bad: list[int],
        problems: list[str],
        spans: list[tuple[int, int]],
    ) -> int:
        """Add the leaf hashes ``computed`` to ``acc`` in segments that end at checkpoint sizes
        (``sizes``, sorted), checking the root at each against ``expected``; a root that does not
        match is appended to ``problems`` with its cause (an entry ``bad`` names already, or the
        first bad index ``_diagnose`` finds, added to ``bad``, and the range it could not narrow
        to an entry added to ``spans``; at ``saved_only``, the size only the
        saved checkpoint has, an edit no entry shows reads as a restore). Returns the size of the
        last checkpoint whose root matched."""
        position = 0
        while position < len(computed):
            after = bisect.bisect_right(sizes, acc.size)  # the next checkpoint size
            target = sizes[after] if after < len(sizes) else None
            take = (
                len(computed) - position
                if target is None
                else min(target - acc.size, len(computed) - position)
            )
            acc.extend(computed[position : position + take])
            position += take
            want = expected.get(acc.size)
            if want is None:
                continue
            if acc.root() == want:
                last_good = acc.size
                continue
            # An edit no entry shows, found under an earlier checkpoint (``spans``), explains this
            # root too: said as that range, not as an entry (until review R81 "explained by entry
            # 0 above", the range's start, which no line named as bad).
            unnamed = [span for span in spans if last_good <= span[0] < acc.size]
            starts = {lo for lo, _ in unnamed}  # in ``bad`` too, as first bad indexes, naming no entry
            named = [i for i in bad if last_good <= i < acc.size and i not in starts]
            if named:
                cause = f"explained by entry {named[0]} above"
            elif unnamed:
                cause = f"explained by the entry changed in [{unnamed[0][0]}, {unnamed[0][1]}) above"
            else:
                first_bad, cause = self._diagnose(last_good, acc.size)
                bad.append(first_bad)  # the first index no good root covers, when none is named
                if cause.endswith(_CHANGED_WITH_LEAF_HASH):
                    spans.append((last_good, acc.size))
                if acc.size == saved_only and cause.endswith(_CHANGED_WITH_LEAF_HASH):
                    # No entry shows an edit: a log that grew again after a restore does too.
                    cause = (
                        f"the log does not extend the saved checkpoint: the database was restored "
                        f"from an older copy (or forked from one) and grew again, or {cause}; it "
                        f"agrees with the stored checkpoints up to size {last_good}"
                    )
            problems.append(f"checkpoint of size {acc.size}: root does not match the entries; {cause}")
        return last_good

    def _check_refs(self, first: int, entries: Sequence[bytes], skip: set[int], problems: list[str]) -> int:
        """Compare the rows of ``audit_refs`` for the entries ``entries`` (the bytes of consecutive
        indexes from ``first``) with the references those entries carry, appending each difference
        to ``problems``; entries at positions ``skip`` (already reported: edited, moved or not
        canonical) are left out. Returns how many index rows it read.

        The reference is read from each entry's bytes (the last ``,"ref":``) by C-level scans, not by
        parsing the entry: this runs for every entry ``verify`` reads. An intact batch is confirmed
        with C-level calls (a count of the entries with a number after their last ``,"ref":``, and
        each row's reference where its entry's is); only a batch where that fails is examined entry
        by entry to name the differences.
        """
        if not entries:
            return 0
        count = len(entries)
        at = list(map(bytes.rfind, entries, itertools.repeat(_REF_KEY)))
        # Up to the next run's first index, so that a fraction between the two (a table without
        # its key) is read here and named; ``_below``: an entry at 2**63 - 1 (the largest a store
        # holds) ends a run at 2**63, which no store's integer holds (review R90).
        bound, top = _below(first + count)
        table = self.store.query(
            f"SELECT idx - ?, ref FROM audit_refs WHERE idx >= ? AND {bound} AND ref < ? ORDER BY idx",
            (first, first, top, _MAX_REF),
        )
        if not skip:
            # Intact when the rows are at distinct entries, each row's entry holds the row's
            # reference at its last ,"ref": (so its entry has a number there), and as many
            # entries have a number there as there are rows: then every entry with a reference
            # (a digit after its last ,"ref":) has its row. The byte after each entry's last
            # ,"ref": is read into one bytes object, its digits counted by one call (review R71:
            # about 40% less time than testing each entry for null,"resource":); an entry with
            # none is read at its 7th byte, where a number only sends the batch to the check below.
            spots = list(map(operator.itemgetter(0), table))
            refs = list(map(operator.itemgetter(1), table))
            needles = map(_REF_NEEDLE.__mod__, refs)
            try:
                heads = bytes(
                    map(operator.getitem, entries, map(operator.add, at, itertools.repeat(len(_REF_KEY))))
                )
            except IndexError:  # an entry that ends at its last ,"ref": (or shorter, with none)
                heads = None
            # Whole numbers only: %d would read a reference SQLite keeps as 0.5 as the 0 it is not
            # (explain looks for 0 and does not find that row); an index kept as 3.5 (a table
            # without its key) picks no entry (until review R71 it raised TypeError here). Not
            # below 0: %d writes -2 as an entry edited to it says, but the check below reads no
            # reference there and names the row (until review R71 this check let it pass).
            if (
                heads is not None
                and len(table) == count - len(heads.translate(None, _NUMBER_START))
                and set(map(type, refs)) <= {int}
                and min(refs, default=0) >= 0
                and set(map(type, spots)) <= {int}
                and len(set(spots)) == len(spots)
                and all(map(bytes.startswith, _pick(entries, spots), needles, _pick(at, spots)))
            ):
                return len(table)
        said: dict[int, int] = {}
        for k, (data, found) in enumerate(zip(entries, at, strict=True)):
            start = found + len(_REF_KEY)
            digits = data[start : data.find(b",", start)]
            if found >= 0 and 0 < len(digits) <= 18 and digits.isdigit():
                said[first + k] = int(digits)
        # As stored: a reference or an index of 0.5 is not 0 (until review R71 an index of 3.5 was
        # read as 3), one of 3.0 (a column without a type keeps it) is 3.
        held = {first + spot: ref for spot, ref in table}
        for k in skip:
            said.pop(first + k, None)
            held.pop(first + k, None)
        for idx in sorted(said.keys() | held.keys()):
            ref, row = said.get(idx), held.get(idx)
            if ref == row:
                continue
            if ref is None:
                if idx != int(idx):  # not the index of an entry (explain finds no entry through it)
                    problems.append(
                        f"audit_refs has a row (to {row}) at index {_shown_index(idx)} (the reference "
                        "index was tampered with)"
                    )
                    continue
                problems.append(
                    f"audit_refs has a row for entry {int(idx)} (to {row}), which refers to no entry "
                    "(the reference index was tampered with)"
                )
                continue
            held_text = "has no row for it" if row is None else f"says {row}"
            problems.append(
                f"entry {idx} refers to entry {ref}, but audit_refs {held_text} (the reference index was "
                f"tampered with: audit explain {ref} would not show entry {idx})"
            )
        return len(table)

    def _diagnose(self, lo: int, hi: int) -> tuple[int, str]:
        """Find the first entry in ``[lo, hi)`` that is not what it claims to be (after a root
        mismatch); ``lo`` with the range when each claims to be what it is (an entry changed
        together with its leaf hash: only the root shows it)."""
        for idx, data, _stored in self._rows(include_entry_from=lo, start=lo):
            if idx >= hi:
                break
            try:
                entry = AuditEntry.from_bytes(data or b"")
            except TamperDetected as exc:  # may quote what the entry holds: a tamperer's text
                return idx, f"entry {idx} is malformed: {one_line(str(exc))}"
            if entry.index != idx:
                return idx, f"entry {idx} holds the entry of index {entry.index} (inserted or reordered)"
        return lo, f"an entry in [{lo}, {hi}) {_CHANGED_WITH_LEAF_HASH}"
