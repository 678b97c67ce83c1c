"""The ``AuditLog``'s proofs (``_Proofs``): an entry's inclusion proof bundle (``prove``), the
consistency proof between two sizes (``consistency``), and ``explain``: an entry with the entries
of its decision or call (found through the reference index, else by a scan), each proven against
the latest signed checkpoint."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from agentgate._shown import quoted
from agentgate.audit.entry import AuditEntry
from agentgate.audit.merkle import consistency_ranges, inclusion_ranges, leaf_hash, verify_inclusion
from agentgate.audit.note import Checkpoint, given_text, key_id, other_signer, wrong_key_cause
from agentgate.audit.proof import ProofBundle
from agentgate.errors import BeyondLogEnd, InputError, TamperDetected
from agentgate.store._base import Row, Store, Transaction
from agentgate.store.audit._stored import (
    _MAX_INDEX,
    _bytes,
    _note,
    _parsed,
    _stored_index,
    _switch,
    _whole,
    no_entry,
)

if TYPE_CHECKING:
    from agentgate.keys import PublicKey, SigningKey


@dataclass(frozen=True)
class Explanation:
    """What ``AuditLog.explain`` found for one entry, every entry in it proven or listed unproven."""

    entry: AuditEntry
    """The entry asked for."""
    related: tuple[AuditEntry, ...]
    """The entries that refer to it and the one it refers to, in index order."""
    checkpoint: Checkpoint | None
    """The latest stored checkpoint (signature checked) the entries were proven against, if any."""
    unproven: tuple[int, ...]
    """Indexes shown that the checkpoint does not cover yet (appended after it)."""
    indexed: bool
    """Whether the related entries were found through the reference index (else a full scan)."""


class _Proofs:
    """The ``AuditLog``'s proofs: ``prove`` (an entry's tlog-proof bundle against a signed
    checkpoint), ``consistency`` (between two sizes), and ``explain`` / ``referring`` (an entry and
    the entries related to it, read through the reference index and proven against the latest
    stored checkpoint)."""

    # The log's state this part reads (``AuditLog.__init__`` sets it).
    store: Store
    refs_indexed: bool
    origin: str
    signer: SigningKey | None
    key_named: str | None

    if TYPE_CHECKING:  # what this part calls of the log's other parts

        @property
        def public_key(self) -> PublicKey: ...

        def size(self, tx: Transaction | None = None) -> int: ...

        def checkpoint(self, saved: str | None = None) -> str: ...

        def open_checkpoint(self, note: str) -> Checkpoint: ...

        def entry_bytes(self, index: int) -> bytes: ...

        def _stored_row(
            self, index: int, tx: Transaction | None = None, *, against_checkpoint: bool = True
        ) -> tuple[bytes, bytes]: ...

        def _latest_checkpoint_row(self, tx: Transaction | None = None) -> Row | None: ...

        def _batches(self, start: int = 0) -> Iterator[list[tuple[int, bytes, bytes]]]: ...

        def _subtree_roots(self, ranges: Sequence[tuple[int, int]], size: int) -> list[bytes]: ...

        def _end(self, tx: Transaction | None = None) -> int: ...

        def _absent(
            self, index: int, tx: Transaction | None = None, *, against_checkpoint: bool = True
        ) -> InputError | TamperDetected: ...

        def _read_again(
            self, index: int, tx: Transaction | None = None, *, against_checkpoint: bool = True
        ) -> tuple[bytes, bytes] | InputError: ...

        def _read_rows(
            self, indexes: Sequence[int], tx: Transaction | None = None
        ) -> dict[int, tuple[bytes, bytes]]: ...

        def _cached_roots(self, ranges: Sequence[tuple[int, int]]) -> list[bytes]: ...

        def _forget_nodes(self) -> None: ...

    def prove(self, index: int, checkpoint_note: str | None = None) -> ProofBundle:
        """A tlog-proof bundle for entry ``index`` against ``checkpoint_note`` (default: a fresh one).

        Raises ``InputError`` if the checkpoint does not cover the entry
        (``BeyondLogEnd`` for an index past the end of the log, against a fresh checkpoint: then
        checked before anything is signed, so bad input stores no checkpoint, nor does an entry
        whose bytes do not match its stored leaf hash or whose row was deleted), and
        ``TamperDetected`` when the entry's bytes do not lead to the checkpoint's root (edited in
        the database after it was signed) or its row is missing below the log's end or inside a
        signed checkpoint (``_absent``: deleted): no bundle that cannot verify is returned.
        ``InputError`` too, signing nothing, for a ``checkpoint_note`` that is not text (``given_text``).
        """
        index = _whole(index, "entry index")
        if index < 0:
            raise no_entry(index)
        if checkpoint_note is not None:
            given_text(checkpoint_note, "checkpoint_note", "a signed checkpoint")
        else:  # bad input, or an entry edited or deleted in the database, signs nothing
            data, stored = self._stored_row(index)
            if leaf_hash(data) != stored:
                raise TamperDetected(
                    f"audit log: entry {index} is not the entry its signed checkpoint holds "
                    "(its bytes do not match its stored leaf hash)"
                )
        note = self.checkpoint() if checkpoint_note is None else checkpoint_note
        checkpoint = self.open_checkpoint(note)
        if checkpoint_note is None and index >= checkpoint.size:
            raise BeyondLogEnd(index, checkpoint.size, "entry")
        if not 0 <= index < checkpoint.size:
            raise InputError(
                f"entry {quoted(index)} is not covered by a checkpoint of size {checkpoint.size}"
            )
        # Past the end first: an entry the checkpoint given covers is missing, not past the end.
        self._refuse_past_end(checkpoint, "the checkpoint given")
        data = self.entry_bytes(index)
        ranges = inclusion_ranges(index, checkpoint.size)
        try:  # from the node cache when the proof it gives leads to the signed root
            proof = self._cached_roots(ranges)
            verify_inclusion(leaf_hash(data), index, checkpoint.size, proof, checkpoint.root)
        except TamperDetected:
            proof = self._subtree_roots(ranges, checkpoint.size)
            try:  # a bundle is written only when it verifies: the entry's bytes are the signed ones
                verify_inclusion(leaf_hash(data), index, checkpoint.size, proof, checkpoint.root)
            except TamperDetected as exc:
                raise TamperDetected(
                    f"audit log: entry {index} is not the entry its signed checkpoint holds ({exc})"
                ) from None
        return ProofBundle(index, data, tuple(proof), note)

    def consistency(self, size1: int, size2: int) -> list[bytes]:
        """The RFC 9162 consistency proof between two sizes of this log, read in one streaming pass.

        Raises ``InputError`` unless ``0 < size1 <= size2`` are ``int``, ``BeyondLogEnd`` (an ``InputError``)
        when the log holds fewer than ``size2`` entries, and ``TamperDetected`` when an entry
        before ``size2`` is missing.
        """
        size1, size2 = _whole(size1, "size"), _whole(size2, "size")
        # The bound before the proof's ranges (until review R84 after: one range per bit of a
        # size far past the end was computed, and 2**1200 raised RecursionError first).
        if 0 < size1 <= size2 and size2 > self._end():
            raise BeyondLogEnd(size2, self.size())
        try:
            ranges = consistency_ranges(size1, size2)
        except ValueError as exc:
            raise InputError(str(exc)) from exc
        return self._subtree_roots(ranges, size2)

    def explain(self, index: int) -> Explanation:
        """Entry ``index`` with the entries of its decision or call, each proven to be in the log.

        Related entries are those that refer to it (``ref``: its outcome, approvals given, a
        declined approval) and the one it refers to. They are found through the reference index
        (``audit_refs``) when it is complete, reading only those rows, else by reading the whole
        log. Each entry shown is parsed from its canonical bytes, matched against its stored leaf
        hash, and proven by an inclusion proof against the latest stored checkpoint (its signature
        checked); entries newer than that checkpoint are listed in ``unproven``. Raises
        ``BeyondLogEnd`` for an index past the end of the log, ``InputError`` for a negative index
        or one that is not an integer (``_whole``),
        and ``TamperDetected`` when the entry's row was deleted (``_absent``: an index below the
        log's end, or inside its latest signed checkpoint, that no row holds; until review R89
        ``InputError``), when a related entry's row was deleted in the same way (until review R90
        it was left out, and the call read as one without an outcome), when an entry shown is
        malformed, does not carry its own index or
        leaf hash, is held by more than one row (a table whose primary key was dropped: until
        review R86 the last row read was shown, without a word of the other) or is not in the
        signed tree.
        """
        index = _whole(index, "entry index")
        data, stored = self._stored_row(index)
        entry = _parsed(index, data)
        shown = {index: (data, stored, entry), **self._related(index, entry.ref)}
        for idx, (row_data, row_stored, parsed) in shown.items():
            if parsed.index != idx:
                raise TamperDetected(f"audit log: entry {idx} holds the entry of index {parsed.index}")
            if leaf_hash(row_data) != row_stored:
                raise TamperDetected(f"audit log: entry {idx} does not match its leaf hash")
        # Each stored leaf hash was just checked against its entry's bytes: proven as it is.
        checkpoint, unproven = self._prove_included(
            {idx: row_stored for idx, (_d, row_stored, _e) in shown.items()}
        )
        related = tuple(parsed for idx, (_d, _s, parsed) in sorted(shown.items()) if idx != index)
        return Explanation(entry, related, checkpoint, unproven, self.refs_indexed)

    def referring(self, index: int, *, against_checkpoint: bool = True) -> list[AuditEntry]:
        """The entries whose ``ref`` is ``index`` (its outcomes, approvals given...), in index
        order, each parsed from its row: through the reference index when it is complete, else by
        reading the whole log. ``TamperDetected`` for a malformed one, for one whose row was
        deleted (``_related``: missing below the log's end or inside its latest signed
        checkpoint, until review R90 left out), and, as ``explain`` refuses it, whenever the latest
        signed checkpoint covers more entries than the log holds (``_short_of_checkpoint``: its
        newest rows deleted, or the database restored from an older copy) or its row does not
        match its note (``_open_latest``: a size that is not an integer), on either path and
        whatever ``audit_refs`` still names: until review R91 a deleted newest outcome was left out
        without a word when the whole log was read or its ``audit_refs`` row went too, and
        ``GatedBroker.reconcile`` read a granted lease as one that never held GPUs;
        ``InputError`` for an
        ``index`` that is not an integer (``_whole``) or negative, ``BeyondLogEnd`` for one past what a store's integer
        holds (until review R82 it reached the driver: ``StoreError``).

        ``against_checkpoint=False``, for a reader that holds no log key and trusts the store as it
        is (``approval sign --store``), reads no checkpoint: a log shorter than its latest one is
        not refused, and a row the reference index names past the log's end names no entry, as in
        a log without checkpoints (rows missing below the end are still refused). Such a reader
        opened the checkpoint with a key that signs nothing: until review R91b a newest row
        deleted was refused as a checkpoint that does not open, blaming the key given. A flag
        that is not a bool is ``InputError`` (``_switch``): until review R91c ``None`` or ``0``
        turned the check off without a word."""
        index = self._index_given(index)
        if not _switch(against_checkpoint, "against_checkpoint"):
            related = self._related(index, None, against_checkpoint=False)
            return [related[idx][2] for idx in sorted(related)]
        # Nothing below the end may say which deleted row referred to ``index``: the signed size
        # is what does (a missing row below the end is refused by ``_related``). The checkpoint
        # first, then the end, once: entries commit before a checkpoint that covers them and no
        # end goes back, so another writer appending (and signing) meanwhile never makes the end
        # short of it (until review R91b the end was read twice, the checkpoint last: such a
        # writer made a healthy log ``TamperDetected``). The refusal's numbers only for a short
        # log: on a healthy one its count of the whole table cost every call (review R91b).
        latest = self._latest_checkpoint_row()
        if latest is not None:
            if type(latest[0]) is not int:
                # A size SQLite sorts above every integer (text, a fraction) hides the real latest
                # checkpoint: refused as ``explain`` refuses it (until review R91c passed over).
                self._open_latest(latest)  # raises: no note signs a size that is no integer
            if latest[0] > (end := self._end()):
                raise self._short_of_checkpoint(end, latest)
        related = self._related(index, None)
        return [related[idx][2] for idx in sorted(related)]

    def _index_given(self, value: object) -> int:
        """``value``, an entry index a caller gave to read from: ``_whole``'s ``InputError`` when
        it is not an integer (``_whole``), ``InputError`` when it is negative (no entry has such an
        index), ``BeyondLogEnd`` past what a store's integer holds, as ``referring`` and
        ``entries`` read one: both ends are checked before any query, so the driver's overflow is
        never reached (until review R86d -10**5000 reached it: ``StoreError``)."""
        index = _whole(value, "entry index")
        if index < 0:
            raise no_entry(index)
        if index > _MAX_INDEX:
            raise BeyondLogEnd(index, self.size(), "entry")
        return index

    def _related(
        self, index: int, ref: int | None, *, against_checkpoint: bool = True
    ) -> dict[int, tuple[bytes, bytes, AuditEntry]]:
        """``idx -> (entry, leaf hash, parsed)`` of the entries other than ``index`` that refer to
        it, and of entry ``ref``. ``TamperDetected`` (``_absent``) when a row the reference index
        or ``ref`` names is missing below the log's end or inside its latest signed checkpoint
        (not read when ``against_checkpoint`` is false: ``referring``), and, without the reference index, for any row missing below the log's end (the whole log
        is read, and a deleted row may be one that referred to ``index``): until review R90 such
        an entry (a call's outcome, deleted) was left out without a word, and ``explain`` said the
        call had no outcome. One past both (a reference index row for an entry not written yet, a
        ``ref`` past the end) names no entry, as before."""
        related: dict[int, tuple[bytes, bytes, AuditEntry]] = {}
        if self.refs_indexed:
            # A row at an index that is not a whole number (a fraction, text, bytes or NULL: a table
            # made again without its key) names no entry, and verify names it (until review R84
            # int() raised on text, and read 3.5 as entry 3).
            held = self.store.query("SELECT idx FROM audit_refs WHERE ref = ?", (index,))
            refs = {idx for idx in map(_stored_index, (row[0] for row in held)) if idx is not None}
            if ref is not None:
                refs.add(ref)
        else:
            # Every entry is read (and parsed: a malformed one is refused) to find those; they are
            # then read by key, as the reference index's are, so that a second row of one is
            # refused (``_read_rows``), not kept in place of the first (until review R86).
            refs = set() if ref is None else {ref}
            end = 0  # one past the last whole index read
            gap: int | None = None  # the first index below it that no row holds
            for batch in self._batches():
                for idx, data, _stored in batch:
                    if type(idx) is int:
                        gap = end if gap is None and idx > end else gap
                        end = max(end, idx + 1)
                    if idx != ref and _parsed(idx, data).ref == index:
                        refs.add(idx)
            # A deleted row may have been one that refers to ``index``: nothing else says which.
            if gap is not None and isinstance(refused := self._absent(gap), TamperDetected):
                raise refused
        named = sorted(refs - {index})
        rows = self._read_rows(named)
        for idx in named:
            # ``_read_again``: a deleted row is refused, a row past the log's end names no entry.
            if idx in rows:
                continue
            row = self._read_again(idx, against_checkpoint=against_checkpoint)
            if not isinstance(row, InputError):
                rows[idx] = row
        for idx, (data, stored) in rows.items():
            # The reference index is no evidence: each row it names is read, parsed and checked.
            other = _parsed(idx, data)
            if idx != index and (other.ref == index or idx == ref):
                related[idx] = (data, stored, other)
        return related

    def _refuse_past_end(self, checkpoint: Checkpoint, which: str) -> None:
        """Raise ``TamperDetected`` naming both sizes when ``checkpoint`` signs more entries than
        the log holds (its newest entries deleted, or the database restored from an older copy),
        before a proof is built against it: the node cache is asked for every block up to the
        signed size, so a size of 2**40 held gigabytes and never ended (until review R65)."""
        if checkpoint.size > self._end():
            raise TamperDetected(
                f"audit log has {self.size()} entries, but {which} covers {checkpoint.size} "
                "(entries deleted, or the database restored from an older copy)"
            )

    def _open_latest(self, row: Row) -> Checkpoint:
        """The checkpoint the latest stored row (size, root, note) signs, its signature checked
        (``open_checkpoint``); ``TamperDetected`` naming that row when its note does not open, as
        verify names each checkpoint: the note's own error does not say which note (until review
        R72 explain and checkpoint refused with ``signed note has no signature block`` alone), and
        when its size or root column is not what the note signs. The row was picked by its size
        column: a copy of an older note given a larger one made ``explain`` prove against that
        older checkpoint (until review R88 only ``checkpoint`` compared the columns)."""
        note = _note(row[2])
        try:
            signed = self.open_checkpoint(note)
        except TamperDetected as exc:
            signer = other_signer(note, self.origin, self.public_key)
            cause = "" if signer is None else "; " + self._wrong_key_cause(signer)
            raise TamperDetected(
                f"audit log: its latest stored checkpoint (size {row[0]!r}) does not open: {exc}{cause}"
            ) from None
        # The size column as stored: SQLite keeps text or a fraction there if given one.
        if (signed.size, signed.root) != (row[0], _bytes(row[1])) or type(row[0]) is not int:
            raise TamperDetected("audit log: the latest checkpoint row does not match its signed note")
        return signed

    def _short_of_checkpoint(self, index: int, latest: Row, tx: Transaction | None = None) -> TamperDetected:
        """The error for entry ``index``, which no row holds, covered by the latest stored
        checkpoint ``latest`` (a row read before the log's end was): its signature checked
        (``_open_latest``, whose ``TamperDetected`` is raised when it does not open), the log is
        shorter than what it signs, its newest rows deleted or the database restored from an
        older copy. Counted in ``tx`` when given."""
        signed = self._open_latest(latest)
        return TamperDetected(
            f"audit log: entry {index} is missing from the log, which has {self.size(tx)} entries, but "
            f"its latest signed checkpoint covers {signed.size} (entries deleted, or the database "
            "restored from an older copy)"
        )

    def _wrong_key_cause(self, signer: str) -> str:
        """``wrong_key_cause`` for the latest stored checkpoint signed by ``signer`` alone, naming
        how the log was given its key as its opener said (``key_named``: the command line's
        ``AGENTGATE_LOG_KEY`` or ``--key``), or not at all (until review R81 a log opened by a
        program named the command line's ways too)."""
        given = key_id(self.origin, self.public_key).hex()
        return wrong_key_cause("the latest stored checkpoint does not verify", given, signer, self.key_named)

    def _prove_included(self, leaves: Mapping[int, bytes]) -> tuple[Checkpoint | None, tuple[int, ...]]:
        """Prove each ``index -> leaf hash`` in ``leaves`` included in the latest stored checkpoint.

        Returns that checkpoint (``None`` when there is none) and the indexes it does not cover.
        One pass over the stored leaf hashes below its size computes every proof. Raises
        ``TamperDetected`` when its signature, its row's size and root columns (``_open_latest``)
        or a proof fails.
        """
        row = self._latest_checkpoint_row()
        if row is None:
            return None, tuple(sorted(leaves))
        checkpoint = self._open_latest(row)
        self._refuse_past_end(checkpoint, "its latest signed checkpoint")
        size = checkpoint.size
        covered = sorted(idx for idx in leaves if idx < size)
        paths = [inclusion_ranges(idx, size) for idx in covered]
        ranges = [r for path in paths for r in path]

        def check(roots: list[bytes]) -> None:
            for idx, path in zip(covered, paths, strict=True):
                proof, roots = roots[: len(path)], roots[len(path) :]
                try:
                    verify_inclusion(leaves[idx], idx, size, proof, checkpoint.root)
                except TamperDetected as exc:
                    raise TamperDetected(
                        f"audit log: entry {idx} is not in the tree signed at size {size}: {exc}"
                    ) from exc

        if covered:
            try:
                check(self._cached_roots(ranges))
            except TamperDetected:
                # The cache is no evidence: rebuilt from the stored leaf hashes alone, the proof
                # either holds (a cached node was wrong: the cache is emptied) or the log is bad.
                check(self._subtree_roots(ranges, size))
                self._forget_nodes()
        return checkpoint, tuple(sorted(idx for idx in leaves if idx >= size))
