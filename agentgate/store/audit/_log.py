"""``AuditLog``: its making, appends (one entry, or a group commit), checkpoints, and the reads
of the log, in batches whose size follows the entries' (memory does not grow with the log).

It inherits its proofs and ``explain`` (``_proofs``), the cached roots of blocks of leaf hashes
(``_nodes``) and ``verify`` (``_verify``)."""

from __future__ import annotations

import operator
import sqlite3
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, cast

from agentgate.audit.entry import AuditEntry, encode_bounded, utc_now
from agentgate.audit.merkle import RootAccumulator, leaf_hash
from agentgate.audit.note import Checkpoint, _keys_given, given_text, open_checkpoint, sign_checkpoint
from agentgate.errors import AuditError, BeyondLogEnd, InputError, StoreError, TamperDetected
from agentgate.keys import PublicKey, SigningKey
from agentgate.store._base import Row, Store, Transaction, driver_error_line, loaded_driver_errors
from agentgate.store.audit._keys import DEFAULT_ORIGIN, entry_limit, log_signer
from agentgate.store.audit._nodes import _CachedRoots
from agentgate.store.audit._proofs import _Proofs
from agentgate.store.audit._schema import (
    APPEND_LOCK,
    create_audit_tables,
    protection_said,
    refs_complete,
    refuse_dropped_log,
)
from agentgate.store.audit._stored import (
    _MAX_INDEX,
    _bytes,
    _index_of,
    _note,
    _parsed,
    _read_entry,
    _switch,
    _whole,
    blob_column,
    latest_checkpoint_row,
    no_entry,
)
from agentgate.store.audit._verify import _Verification

_BATCH = 20_000
"""The most rows one read of the log fetches."""
_BATCH_BYTES = 16 << 20
"""About how many bytes of entries one read of the log fetches (memory while reading a log)."""
_FIRST_BATCH = 16
"""Rows in the first read, before the entries' size is known."""
_ROW_BYTES = 300
"""What a row costs besides its entry's bytes (index, leaf hash, Python objects), for sizing."""
_CHECKPOINT_BATCH = 1_000
"""Checkpoint rows one read fetches."""
_INSERT = "INSERT INTO audit_log (idx, entry, leaf_hash) VALUES (?, ?, ?)"
_LOG_SCHEMA = (
    "SELECT pg_catalog.quote_ident(n.nspname) FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n "
    "ON n.oid = c.relnamespace WHERE c.oid = pg_catalog.to_regclass('audit_log')"
)
"""SQL (PostgreSQL): the schema of the ``audit_log`` the store's statements find, quoted as an
identifier: where the log's functions are made (``AUDIT_DDL`` pins the path to it)."""


def _lock_next(tx: Transaction) -> tuple[str, ...]:
    """PostgreSQL: the statements that take the append lock and read the next index, the last one
    returning it: ``agentgate_audit_lock_next()`` of the log tables' schema (one round trip),
    called by that schema-qualified name, so that a function of the same name in a schema earlier
    on the writer's search path (a schema named after the role, which ``"$user"`` puts first) is
    not run (until review R60 it ran at each append, and could refuse it or skip the lock). For a
    schema whose name holds ``?``, which the store's statements read as a parameter, the lock and
    the read are two statements (READ COMMITTED: the read sees every append committed before the
    lock was granted). Raises ``AuditError`` where the store has no table audit_log."""
    schema = _execute(tx, _LOG_SCHEMA)
    if not schema:
        raise AuditError("audit log: entry not written: the store has no table audit_log")
    name = str(schema[0][0])
    if "?" not in name:
        return (f"SELECT {name}.agentgate_audit_lock_next()",)
    return (
        f"SELECT pg_catalog.pg_advisory_xact_lock({APPEND_LOCK})",
        "SELECT COALESCE(MAX(idx) + 1, 0) FROM audit_log",
    )


def _wrap(exc: Exception, what: str) -> AuditError:
    """The ``AuditError`` for a statement the driver refused, its text on one line (``driver_error_line``)."""
    return AuditError(f"audit log: {what} failed: {driver_error_line(exc)}")


def _execute(tx: Transaction, sql: str, params: Sequence[Any] = ()) -> list[Row]:
    try:
        return tx.execute(sql, params)
    except loaded_driver_errors() as exc:
        raise _wrap(exc, "a statement") from exc


class AuditLog(_Proofs, _CachedRoots, _Verification):
    """The append-only, signed Merkle audit log kept in ``store``."""

    _lock_next: tuple[str, ...] | None = None
    """PostgreSQL: the statements that take the append lock and read the next index
    (``_lock_next``), found at the first append (a class default: set on the instance then)."""

    def __init__(
        self,
        store: Store,
        signer: SigningKey | PublicKey,
        origin: str = DEFAULT_ORIGIN,
        *,
        previous_keys: Iterable[PublicKey] = (),
        max_entry_bytes: int | None = None,
        create: bool = True,
        key_named: str | None = None,
    ) -> None:
        """The log in ``store``, signing new checkpoints with ``signer``.

        ``max_entry_bytes`` bounds each new entry (default ``AGENTGATE_AUDIT_MAX_ENTRY_BYTES``,
        else 64 KiB; at least 4096): larger values are recorded by digest (``encode_bounded``).
        Raises ``InputError`` for a bound below 4096 or one that is not a whole number, and,
        before anything is read or made in ``store``, for a ``signer`` that is no ``SigningKey``
        or ``PublicKey`` (``log_signer``), ``previous_keys`` that are no iterable of
        ``PublicKey`` (``_keys_given``) or an ``origin`` that is no key name (text, no space or
        ``+``): until review R91 ``None`` or raw bytes as ``signer`` were taken and refused at
        the first checkpoint, naming ``public_key``, and the others raised a bare ``TypeError``.

        ``previous_keys`` are the public keys of log keys rotated out: checkpoints they signed
        still verify; new checkpoints are signed only with ``signer``. Given the log key's public
        key only (an auditor's copy), the log reads, verifies and proves against stored
        checkpoints, and ``checkpoint`` raises ``AuditError`` when it would have to sign.

        ``create``: make the log's tables where the store has none (a log never made there), and
        put back what is missing of an existing log's machinery (its triggers, the reference
        index, the record that the log was made). ``False`` (the verbs that only read a log)
        opens it without writing anything: no table, trigger or row is made, the reference index
        is read only where it is complete (``explain`` reads the whole log otherwise), and the
        cache of block roots is read, never written; ``verify`` reports a missing protection
        trigger instead of hiding it. In a store where no log was made ``exists`` is then
        ``False``: there is nothing to read, and reading raises ``StoreError``. Either way a log
        that was dropped raises ``LogDropped`` (a ``StoreError``) and nothing is created.

        ``key_named``: how the caller was given ``signer``, as a refusal should name it when the
        latest stored checkpoint is signed by one other key (``wrong_key_cause``); the command
        line gives ``AGENTGATE_LOG_KEY`` or ``--key, AGENTGATE_LOG_KEY``. ``None``: not named.
        """
        self.max_entry_bytes = entry_limit(max_entry_bytes)
        self.store = store
        signer = log_signer(signer)
        self.signer: SigningKey | None = signer if isinstance(signer, SigningKey) else None
        self._public = signer.public if isinstance(signer, SigningKey) else signer
        self.origin = origin
        self.key_named = key_named
        self.previous_keys = _keys_given(self._public, previous_keys)
        Checkpoint(origin, 0, bytes(32)).text()  # validates the origin now, not at the first checkpoint
        self.exists = create or refuse_dropped_log(store)
        """Whether the store holds the log's tables (``False`` only for ``create=False``)."""
        if create:
            self.refs_indexed = create_audit_tables(store)
        else:
            self.refs_indexed = self.exists and refs_complete(store)
        """Whether ``audit_refs`` indexes every entry's reference (else ``explain`` scans the log)."""
        self._caches = create
        """Whether reads may fill (and empty) the cache of block roots: not in a log opened to read."""
        # Appends guess the next index only where the next-index trigger is known to guard them.
        self._guessing = store.dialect == "sqlite" and bool(
            store.query(
                "SELECT 1 FROM sqlite_master WHERE type = 'trigger' AND name = 'audit_log_next_index' COLLATE NOCASE"
            )
        )
        self._guess: int | None = None
        # Entries, leaf hashes and roots are read as bytes whatever type the row holds.
        self._entry, self._leaf, self._root, self._hash, self._note = (
            blob_column(store, c) for c in ("entry", "leaf_hash", "root", "hash", "note")
        )
        self._empty = "x''" if store.dialect == "sqlite" else "''::bytea"

    def open_checkpoint(self, note: str) -> Checkpoint:
        """A checkpoint of this log signed by its key or a previous one; ``TamperDetected`` otherwise,
        also when a line by any of them does not verify, whichever key's line does (until review
        R82 a note opened under a previous key ignored a bad line by the log key)."""
        return open_checkpoint(note, self.public_key, self.origin, self.previous_keys)

    def _signs(self, note: str) -> bool:
        """Whether ``note`` is signed by this log's own key (not only by a previous one)."""
        try:
            open_checkpoint(note, self.public_key, self.origin)
        except TamperDetected:
            return False
        return True

    @property
    def public_key(self) -> PublicKey:
        """The public key of the log key: what checkpoints must be signed with."""
        return self._public

    # --- writing ------------------------------------------------------------------------------

    def lock(self, tx: Transaction) -> None:
        """Take the append lock now, held to the end of ``tx``.

        A writer whose transaction also changes budget, quota or nonce rows takes it first, so
        that every writer takes its locks in one order (the append lock, then rows) and none can
        deadlock with another that appends after locking rows. PostgreSQL: the advisory lock the
        appends take (``agentgate_audit_lock_next``). SQLite: nothing to do, ``BEGIN IMMEDIATE``
        already took the database's one write lock.
        """
        if self.store.dialect == "postgresql":
            tx.execute(f"SELECT pg_catalog.pg_advisory_xact_lock({APPEND_LOCK})")

    def append(self, fields: Mapping[str, Any], tx: Transaction | None = None) -> int:
        """Append one entry and return its index.

        ``fields`` are ``AuditEntry`` fields except ``index`` (assigned here) and ``time``
        (defaults to now). With ``tx`` the entry commits with the caller's transaction; without,
        it commits before this returns. Raises ``InputError`` for bad fields (``fields`` not a
        ``Mapping`` included: until review R89 a bare ``TypeError``) and ``AuditError``
        (or ``StoreError``) when the entry cannot be written, in which case nothing was written.
        """
        if tx is None:
            try:
                with self.store.transaction() as own:
                    return self._append(own, fields)
            except StoreError as exc:
                raise AuditError(f"audit log: entry not written: {exc}") from exc
        return self._append(tx, fields)

    def append_many(self, batch: Sequence[Mapping[str, Any]]) -> list[int]:
        """Append several entries in one transaction (group commit); all or none are written.
        Raises ``InputError``, writing none, for bad fields, ``batch`` not a sequence or an item
        of it not a ``Mapping`` (named ``batch[K]``; until review R89 a bare ``TypeError`` or
        ``ValueError``), and ``AuditError`` when they cannot be written."""
        if not isinstance(batch, Iterable) or isinstance(batch, str | bytes | bytearray | Mapping):
            raise InputError(f"batch must be a sequence of entries' fields, got {type(batch).__name__}")
        try:
            with self.store.transaction() as tx:
                index = self._next_index(tx)
                rows = [self._row(index + k, fields, f"batch[{k}]") for k, fields in enumerate(batch)]
                if rows:
                    tx.executemany("INSERT INTO audit_log (idx, entry, leaf_hash) VALUES (?, ?, ?)", rows)
                return [row[0] for row in rows]
        except loaded_driver_errors(StoreError) as exc:
            raise AuditError(f"audit log: entries not written: {exc}") from exc

    def _next_index(self, tx: Transaction) -> int:
        """The next index, with the append lock held until ``tx`` ends (SQLite: its write lock;
        PostgreSQL: ``_lock_next``)."""
        if self.store.dialect == "postgresql":
            if self._lock_next is None:
                self._lock_next = _lock_next(tx)
            found: list[Row] = []
            for statement in self._lock_next:
                found = _execute(tx, statement)
            return int(found[0][0])
        return int(_execute(tx, "SELECT COALESCE(MAX(idx) + 1, 0) FROM audit_log")[0][0])

    def _row(self, index: int, fields: Mapping[str, Any], given: str = "fields") -> tuple[int, bytes, bytes]:
        """The row of entry ``index`` with ``fields``; ``InputError`` naming them as ``given`` (the
        argument) when they are no ``Mapping``, and for bad fields (``encode_bounded``)."""
        if not isinstance(fields, Mapping):
            raise InputError(
                f"{given} must be a mapping of an entry's field names to values, got {type(fields).__name__}"
            )
        if "index" in fields:
            raise InputError("audit entry field index is assigned by the log, not the caller")
        values = dict(fields)
        values.setdefault("time", utc_now())
        values["index"] = index
        data = encode_bounded(values, self.max_entry_bytes)
        return index, data, leaf_hash(data)

    def _append(self, tx: Transaction, fields: Mapping[str, Any]) -> int:
        guess = self._guess
        if guess is not None:
            # SQLite: the index after this log's last append, without reading it. The
            # audit_log_next_index trigger refuses the row unless it is exactly the next index, and
            # a refused statement leaves the transaction usable, so a stale guess (another
            # connection appended, or a rollback undid an append) costs one retry below, never a
            # gap or a duplicate.
            row = self._row(guess, fields)
            try:
                tx.execute(_INSERT, row)
            except sqlite3.IntegrityError:
                pass
            else:
                self._guess = guess + 1
                return guess
        row = self._row(self._next_index(tx), fields)
        _execute(tx, _INSERT, row)
        if self._guessing:
            self._guess = row[0] + 1
        return row[0]

    def checkpoint(self, saved: str | None = None) -> str:
        """Sign and store a checkpoint of the whole log; returns the signed note.

        Refuses (``TamperDetected``) to sign a log whose prefix no longer matches the latest
        checkpoint, or whose newer entries do not match their stored leaf hashes or do not carry
        their own index (rows swapped), so a tampered log is never laundered by a fresh signature.
        ``saved``, a signed checkpoint of this log kept outside the database (the one ``agentgate
        audit checkpoint --out FILE`` wrote last), must still be a prefix of the log too: a
        database restored from an older copy, or forked from one, is refused, not signed over.
        Refuses (``TamperDetected``, naming it in ``verify``'s words) to sign while a trigger of the
        log's machinery is not in force (``missing_protection``: dropped, changed or disabled after
        this log was opened, or never put back by a role that may not): the checkpoint would vouch
        for what was appended or edited while nothing refused it. Returning the stored checkpoint
        when the log has not grown signs nothing, and is not refused.
        Reads the log in batches: memory does not grow with its size. Raises ``InputError``,
        signing nothing, when ``saved`` is not text (``given_text``).
        """
        acc, latest, prev_size = self._extension(saved)
        if latest and acc.size == prev_size and (self.signer is None or self._signs(_note(latest[2]))):
            # Nothing new to sign, and signed by this log's key: a log key rotated out since then
            # gets a checkpoint of the same size under the new key (docs/operations.md, step 4).
            return _note(latest[2])
        self._refuse_unprotected(acc.size)
        if self.signer is None:
            raise AuditError(
                f"audit log: a new checkpoint of {acc.size} entries needs the log's private key "
                "(this log was opened with its public key only)"
            )
        note = sign_checkpoint(Checkpoint(self.origin, acc.size, acc.root()), self.signer)
        with self.store.transaction() as tx:
            _execute(
                tx,
                "INSERT INTO audit_checkpoints (size, root, note, created) VALUES (?, ?, ?, ?)",
                (acc.size, acc.root(), note, utc_now()),
            )
        return note

    def check_extends(self, saved: str | None = None) -> None:
        """Raise ``TamperDetected`` where ``checkpoint(saved)`` would refuse to sign; sign and
        write nothing. Needs no private key: ``agentgate audit checkpoint`` checks a log with no
        checkpoint yet this way before it creates the log key, so that a refused log leaves none."""
        acc, latest, prev_size = self._extension(saved)
        if not latest or acc.size != prev_size:
            self._refuse_unprotected(acc.size)

    def _refuse_unprotected(self, size: int) -> None:
        """Raise ``TamperDetected`` naming the first trigger of the log's machinery not in force
        (``protection_said``), where a checkpoint of ``size`` entries would be signed."""
        unprotected = protection_said(self.store)
        if unprotected is not None:
            raise TamperDetected(
                f"audit log: {unprotected}; no checkpoint of {size} entries signed: it would vouch "
                "for what was appended or edited while nothing refused it (run agentgate audit verify)"
            )

    def _extension(self, saved: str | None) -> tuple[RootAccumulator, Row | None, int]:
        """The log's tree (its accumulator), the latest checkpoint row and its size, once the log is
        checked to extend that checkpoint and ``saved``: ``checkpoint``'s checks, nothing signed."""
        # size -> (root, what it is): the roots the log must still have at those sizes.
        targets: dict[int, tuple[bytes, str]] = {}
        if saved is not None:
            try:
                kept = self.open_checkpoint(given_text(saved, "saved", "a signed checkpoint"))
            except TamperDetected as exc:  # named: the stored one is read next (until review R72 not said)
                raise TamperDetected(f"audit log: the saved checkpoint does not open: {exc}") from None
            targets[kept.size] = (kept.root, "the saved checkpoint")
        latest = self._latest_checkpoint_row()
        prev_size = 0
        if latest:
            # What was signed, its row's unsigned columns checked against it, is what the log must
            # still match.
            signed = self._open_latest(latest)
            if targets.get(signed.size, (signed.root, ""))[0] != signed.root:
                raise TamperDetected(
                    f"audit log: the saved checkpoint and the last stored one disagree about size {signed.size}"
                )
            prev_size = signed.size
            targets[signed.size] = (signed.root, "the last checkpoint")
        acc = RootAccumulator()
        pending: list[bytes] = []

        def settle() -> None:
            acc.extend(pending)
            pending.clear()
            if acc.size in targets and acc.root() != targets[acc.size][0]:
                raise TamperDetected(
                    f"audit log: the first {acc.size} entries no longer match {targets[acc.size][1]}"
                )

        settle()  # a checkpoint of the empty log
        for idx, data, stored in self._rows(include_entry_from=prev_size):
            count = acc.size + len(pending)
            if idx != count:
                raise TamperDetected(f"audit log: entry {count} is missing")
            if data is not None and leaf_hash(data) != stored:
                raise TamperDetected(f"audit log: entry {idx} does not match its leaf hash")
            if data is not None:
                carried = _index_of(data)
                if carried is None:  # bytes no agentgate wrote, with a matching leaf hash
                    raise TamperDetected(f"audit log: entry {idx} is not a canonical entry")
                if carried != idx:  # rows swapped or moved, hashes and all
                    raise TamperDetected(f"audit log: entry {idx} does not carry its own index")
            pending.append(stored)
            if count + 1 in targets or len(pending) >= _BATCH:
                settle()
        settle()
        beyond = [size for size in targets if size > acc.size]
        if beyond:
            raise TamperDetected(
                f"audit log: has {acc.size} entries, {targets[min(beyond)][1]} had {min(beyond)} "
                "(entries deleted, or the database restored from an older copy)"
            )
        return acc, latest, prev_size

    # --- reading ------------------------------------------------------------------------------

    def size(self, tx: Transaction | None = None) -> int:
        """Entries in the log (read in ``tx`` when given): indexes of 0 or more that a row holds,
        each once (a row below 0, inserted outside agentgate, is no entry: no tree holds it; nor
        is a second row of one index, in a table whose primary key was dropped: ``verify`` reads
        one row of it. Counted, either would make ``audit show --last N`` start past the newest
        entries)."""
        read = self.store.query if tx is None else tx.execute
        return int(read("SELECT COUNT(DISTINCT idx) FROM audit_log WHERE idx >= 0")[0][0])

    def entry_bytes(self, index: int) -> bytes:
        """The stored bytes of entry ``index``; raises ``InputError`` if there is none
        (``BeyondLogEnd`` past the end of the log, or when ``index`` is not an integer (``_whole``)), and
        ``TamperDetected`` when more than one row holds it, or when its row was deleted (``_absent``)."""
        return self._stored_row(_whole(index, "entry index"))[0]

    def _stored_row(
        self, index: int, tx: Transaction | None = None, *, against_checkpoint: bool = True
    ) -> tuple[bytes, bytes]:
        """The stored ``(entry, leaf_hash)`` of entry ``index``; ``_absent``'s error when no row
        holds it (``against_checkpoint`` as it takes it); ``TamperDetected`` when more than one
        row holds it (``_read_rows``)."""
        rows = self._read_rows([index], tx) if 0 <= index <= _MAX_INDEX else {}
        if index in rows:
            return rows[index]
        row = self._read_again(index, tx, against_checkpoint=against_checkpoint)
        if isinstance(row, InputError):
            raise row
        return row

    def _read_again(
        self, index: int, tx: Transaction | None = None, *, against_checkpoint: bool = True
    ) -> tuple[bytes, bytes] | InputError:
        """The stored ``(entry, leaf_hash)`` of entry ``index``, which a first read found no row
        of, read again where ``_absent`` says it was deleted: entries commit in index order (the
        append lock), so a row absent now, below an end read after the first read, was deleted;
        one another writer committed since the first read is the entry, not a deleted one. Raises
        that ``TamperDetected`` when the row is still absent; returns ``_absent``'s other error
        (an index past the log's end, or below 0) for the caller to raise or pass over;
        ``against_checkpoint`` as ``_absent`` takes it."""
        refused = self._absent(index, tx, against_checkpoint=against_checkpoint)
        if not isinstance(refused, TamperDetected):
            return refused
        rows = self._read_rows([index], tx)
        if index not in rows:
            raise refused
        return rows[index]

    def _absent(
        self, index: int, tx: Transaction | None = None, *, against_checkpoint: bool = True
    ) -> InputError | TamperDetected:
        """The error for entry ``index``, which no row holds: ``TamperDetected`` where it is below
        the log's end (its row deleted, as ``verify`` names it) or covered by the latest stored
        checkpoint, its signature checked (``_open_latest``: the newest rows deleted, or the
        database restored from an older copy); ``BeyondLogEnd`` past the end of the log otherwise,
        and ``InputError`` below 0. Until review R89 an index below the end was ``InputError``,
        ``audit log has no entry N`` (``explain`` and ``prove``: exit 2, as for unusable input).
        ``against_checkpoint=False`` reads no checkpoint (``referring``'s, for a reader without
        the log key): past the end is then ``BeyondLogEnd``. Read in ``tx`` when given: a
        transaction that holds the audit append lock and read on another connection waited on
        its own lock behind any session queued for the table (on PostgreSQL a lock timeout that
        no deadlock check sees), and took a second connection from the pool (until the session
        after review R94, which CI's failed run found)."""
        if index < 0:
            return no_entry(index)
        end = self._end(tx)
        if index < end:
            return TamperDetected(
                f"audit log: entry {index} is missing from the log, which holds entries up to index "
                f"{end - 1} (its row was deleted)"
            )
        latest = self._latest_checkpoint_row(tx) if against_checkpoint else None
        if latest is not None and type(latest[0]) is int and index < latest[0]:
            return self._short_of_checkpoint(index, latest, tx)
        return BeyondLogEnd(index, self.size(tx), "entry")

    def entry(
        self, index: int, tx: Transaction | None = None, *, against_checkpoint: bool = True
    ) -> AuditEntry:
        """Entry ``index``, parsed (read in ``tx`` when given); ``TamperDetected`` naming ``index``
        if its bytes are not canonical, do not match its stored leaf hash or do not carry
        ``index`` (edited in the database, canonical all the same), more than one row holds
        ``index`` (a table whose primary key was dropped; review R86) or its row was deleted
        (``_absent``; review R89), as ``verify`` reports them:
        every reader acts on what it reads (settlements and superseded or voided approval
        requests copy an entry's fields into the entries they write). Until review R83 only
        canonical bytes were checked; R83 first checked the rest for the command line's settle
        paths alone, then here, for every reader (one SHA-256 of bytes already read).

        ``against_checkpoint=False``, for a reader that holds no log key (``approval sign
        --store``), reads no checkpoint, as ``referring`` takes it: an index past the log's end is
        ``BeyondLogEnd`` even where the latest checkpoint covers it (until review R91c that
        checkpoint was opened with a key that signs nothing, and the refusal blamed the key);
        ``InputError`` when it is not a bool (``_switch``)."""
        index = _whole(index, "entry index")
        against_checkpoint = _switch(against_checkpoint, "against_checkpoint")
        return _read_entry(index, self._stored_row(index, tx, against_checkpoint=against_checkpoint))

    def entries_at(self, indexes: Iterable[int]) -> dict[int, AuditEntry]:
        """The entries at ``indexes``, parsed, read in a few statements (500 indexes each), not
        one per entry. ``TamperDetected`` for one that is not the entry it should be (as
        ``entry`` says), and ``entry``'s error for one that
        is not in the log or not an integer (``_whole``) (until review R82 a bool or a float was read as the
        entry it equals, and a string failed with a ``TypeError``); ``InputError`` for ``indexes``
        that are no iterable, or text or bytes (until review R89 ``None`` was a bare ``TypeError``)."""
        if not isinstance(indexes, Iterable) or isinstance(indexes, str | bytes | bytearray):
            raise InputError(f"indexes must be an iterable of entry indexes, got {type(indexes).__name__}")
        wanted = sorted({_whole(index, "entry index") for index in indexes})
        read = self._read_rows(wanted)
        for index in wanted:
            if index not in read:
                self.entry(index)  # raises the error naming the missing entry
        return {index: _read_entry(index, read[index]) for index in wanted}

    def entries(self, start: int = 0, *, skip_malformed: bool = False) -> Iterator[AuditEntry]:
        """Every entry from ``start`` in index order, read in batches.

        Raises ``TamperDetected`` (naming its index) at the first entry whose bytes are not a
        canonical entry, or passes over it when ``skip_malformed`` (a report of a log that
        ``verify`` found tampered). An index that more than one row holds (a table whose primary
        key was dropped) yields the row ``verify`` reads, once: an index is one entry;
        ``repeated_indexes`` names such indexes (``entry`` and ``explain``, which read one index
        by key, refuse it).

        ``start``, as ``entry`` takes an index: ``InputError`` when it is not an integer (``_whole``)
        or negative, ``BeyondLogEnd`` past what a store's integer holds (until review R82 a float was read, a
        string failed with a ``TypeError``, and 2**63 reached the driver: ``StoreError``).
        """
        start = self._index_given(start)
        previous: int | None = None
        for idx, data, _leaf in self._rows(include_entry_from=start, start=start):
            if idx == previous:  # a second row of it, read in the same batch (the next starts past it)
                continue
            previous = idx
            try:
                yield _parsed(idx, data or b"")
            except TamperDetected:
                if not skip_malformed:
                    raise

    def checkpoints(self) -> list[str]:
        """Every stored signed checkpoint, oldest first."""
        return [
            _note(r[0]) for r in self.store.query(f"SELECT {self._note} FROM audit_checkpoints ORDER BY id")
        ]

    def latest_checkpoint(self) -> str | None:
        row = self._latest_checkpoint_row()
        return _note(row[2]) if row else None

    def _latest_checkpoint_row(self, tx: Transaction | None = None) -> Row | None:
        return latest_checkpoint_row(self.store, tx)

    def _row_batches(
        self, *, include_entry_from: int, start: int = 0
    ) -> Iterator[list[tuple[int, bytes | None, bytes]]]:
        """``(idx, entry or None, leaf_hash)`` rows in index order, from ``start``, in batches;
        entries only from ``include_entry_from``.

        A batch holds about ``_BATCH_BYTES`` (at most ``_BATCH`` rows): the first is small, the
        next sized by the entries seen so far, so a log of large entries is read in small batches.
        """
        last, limit = start - 1, min(_FIRST_BATCH, _BATCH)
        while True:
            # A NULL entry or leaf hash (a tampered table without its NOT NULL constraints)
            # reads as empty bytes: it then fails the leaf hash check instead of crashing. Both
            # dialects return the (cast) columns as bytes, so the rows are used as they come.
            # Every entry from start (verify's pass): no CASE for each row (review R70).
            every = include_entry_from <= start
            entry = f"COALESCE({self._entry}, {self._empty})"
            rows = self.store.query(
                f"SELECT idx, {entry if every else f'CASE WHEN idx >= ? THEN {entry} END'}, "
                f"COALESCE({self._leaf}, {self._empty}) FROM audit_log WHERE idx > ? ORDER BY idx LIMIT ?",
                (last, limit) if every else (include_entry_from, last, limit),
            )
            batch = cast(list[tuple[int, bytes | None, bytes]], rows)
            if batch:
                yield batch
            if len(rows) < limit:
                return
            last = batch[-1][0]
            # C-level calls, not a Python step per row (verify reads every row through here).
            entries = filter(None, map(operator.itemgetter(1), batch))
            size = sum(map(len, entries)) + _ROW_BYTES * len(batch)
            limit = max(1, min(_BATCH, _BATCH_BYTES * len(batch) // size))

    def _batches(self, start: int = 0) -> Iterator[list[tuple[int, bytes, bytes]]]:
        """Every ``(idx, entry, leaf_hash)`` row from ``start`` in index order, in batches."""
        for batch in self._row_batches(include_entry_from=start, start=start):
            yield cast(list[tuple[int, bytes, bytes]], batch)  # every entry is included from start

    def _rows(self, *, include_entry_from: int, start: int = 0) -> Iterator[tuple[int, bytes | None, bytes]]:
        """``(idx, entry or None, leaf_hash)`` in index order; entries only from ``include_entry_from``."""
        for batch in self._row_batches(include_entry_from=include_entry_from, start=start):
            yield from batch

    def _checkpoint_rows(self) -> Iterator[Row]:
        """Every ``(note, size, root)`` checkpoint row, oldest first, read in batches; rows at a
        negative id too (agentgate never writes one, but no trigger refuses one: an id of one's
        own is refused only when it exists, and ``checkpoint`` builds on such a row)."""
        last: int | None = None
        while True:
            after = "" if last is None else "WHERE id > ? "
            rows = self.store.query(
                f"SELECT id, {self._note}, size, {self._root} FROM audit_checkpoints {after}ORDER BY id LIMIT ?",
                (_CHECKPOINT_BATCH,) if last is None else (last, _CHECKPOINT_BATCH),
            )
            for row in rows:
                yield row[1:]
            if len(rows) < _CHECKPOINT_BATCH:
                return
            last = int(rows[-1][0])

    def _subtree_roots(self, ranges: Sequence[tuple[int, int]], size: int) -> list[bytes]:
        """The Merkle roots of the disjoint leaf ranges ``[lo, hi)`` within the first ``size`` entries.

        Reads the stored leaf hashes once, in batches (memory does not grow with the log). Raises
        ``TamperDetected`` when the log has fewer than ``size`` entries or a gap before ``size``.
        """
        accumulators = [RootAccumulator() for _ in ranges]
        chunk: list[bytes] = []
        start = 0

        def feed() -> None:
            nonlocal start
            end = start + len(chunk)
            for (lo, hi), acc in zip(ranges, accumulators, strict=True):
                if max(lo, start) < min(hi, end):
                    acc.extend(chunk[max(lo, start) - start : min(hi, end) - start])
            start = end
            chunk.clear()

        for idx, _data, stored in self._rows(include_entry_from=size):
            if idx >= size:
                break
            if idx != start + len(chunk):
                raise TamperDetected(f"audit log: entry {start + len(chunk)} is missing")
            chunk.append(stored)
            if len(chunk) >= _BATCH:
                feed()
        feed()
        if start < size:
            raise TamperDetected(f"audit log has {start} entries, fewer than {size}")
        return [acc.root() for acc in accumulators]

    def _end(self, tx: Transaction | None = None) -> int:
        """One past the largest stored index (the log's size, unless rows are missing). Summed
        here, not in SQL: past a row at 2**63 - 1 it is 2**63, which PostgreSQL's bigint refused
        (``StoreError``) and SQLite made a float (until review R90). Only numbers are read (SQLite
        sorts text and bytes, which a table made again without its key may hold, after them). Read
        in ``tx`` when given."""
        read = self.store.query if tx is None else tx.execute
        top = read("SELECT MAX(idx) FROM audit_log WHERE idx <= ?", (_MAX_INDEX,))[0][0]
        return 0 if top is None else int(top) + 1

    def _read_rows(
        self, indexes: Sequence[int], tx: Transaction | None = None
    ) -> dict[int, tuple[bytes, bytes]]:
        """``idx -> (entry, leaf_hash)`` of the rows among ``indexes`` that exist, read by key
        (in ``tx`` when given). ``TamperDetected`` in ``verify``'s words for an index that more
        than one row holds (a table whose primary key was dropped): which of them is the entry
        only the signed tree can say, and no order of the rows says which one ``verify`` and
        ``entries`` read (PostgreSQL orders equal indexes as it finds them). Until review R86 the
        last row read was kept, where ``entries`` yielded another: ``explain`` and ``entry`` showed
        and acted on a forged row ``audit show`` did not list, and said nothing of the second."""
        found: dict[int, tuple[bytes, bytes]] = {}
        rows_held: dict[int, int] = {}
        read = self.store.query if tx is None else tx.execute
        # An index no store's integer holds names no row (an entry's ``ref`` may be any size).
        indexes = [index for index in indexes if 0 <= index <= _MAX_INDEX]
        for start in range(0, len(indexes), 500):
            chunk = list(indexes[start : start + 500])
            marks = ", ".join("?" * len(chunk))
            for idx, data, stored in read(
                f"SELECT idx, {self._entry}, {self._leaf} FROM audit_log WHERE idx IN ({marks})", chunk
            ):
                index = int(idx)
                rows_held[index] = rows_held.get(index, 0) + 1
                found[index] = (_bytes(data), _bytes(stored))
        repeated = sorted(index for index, rows in rows_held.items() if rows > 1)
        if repeated:
            raise TamperDetected(
                f"audit log: entry {repeated[0]}: {rows_held[repeated[0]]} rows hold this index, which "
                "one entry has: rows inserted outside agentgate"
            )
        return found
