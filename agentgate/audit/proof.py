"""Offline proof bundles in the C2SP tlog-proof format.

::

    c2sp.org/tlog-proof@v1
    extra <base64 of the entry's canonical bytes>
    index <leaf index>
    <base64 inclusion proof hash>      (zero or more lines)

    <signed checkpoint note>

The ``extra`` line carries the audit entry itself, so one file answers "is this entry in the log
whose key I hold, and what does it say?" with nothing but the log's public key.
"""

from __future__ import annotations

import base64
from collections.abc import Iterable
from collections.abc import Set as AbstractSet
from dataclasses import dataclass

from agentgate._shown import quoted
from agentgate.audit.entry import AuditEntry
from agentgate.audit.merkle import HASH_SIZE, leaf_hash, tree_integer, verify_inclusion
from agentgate.audit.note import (
    MAX_TREE_SIZE,
    Checkpoint,
    _public_key,
    canonical_base64,
    given_text,
    open_checkpoint,
    tree_number,
)
from agentgate.errors import InputError, TamperDetected
from agentgate.keys import PublicKey

HEADER = "c2sp.org/tlog-proof@v1"
_MAX_BUNDLE = 1 << 20


@dataclass(frozen=True)
class ProofBundle:
    """An entry, its index, its inclusion proof, and the signed checkpoint the proof leads to."""

    index: int
    entry: bytes
    proof: tuple[bytes, ...]
    checkpoint_note: str

    def text(self) -> str:
        """The bundle in tlog-proof text form. Raises ``InputError`` naming the field, before
        anything is written, for an ``index`` that is not a whole number from 0 to
        ``MAX_TREE_SIZE`` (``tree_integer``, a bool refused), an ``entry`` that is empty or not
        bytes, a ``proof`` that is no iterable of hashes (bytes, none empty: its line would be the
        blank one that ends the proof; ``_hashes_given``), or a ``checkpoint_note`` that is
        empty or not text (``given_text``): until review R91 an index of ``True``, ``1.0`` or
        ``None`` was written as it prints, a bundle ``parse`` refuses (``not a decimal number``),
        and a hash or entry given as ``str``, or a note as ``bytes``, raised a bare ``TypeError``.
        A hash of any other length is written, as ``parse`` reads it (verifying it is
        ``TamperDetected``: a bundle that does not verify, as a test writes one), and ``proof``
        may be any iterable of hashes in order (a ``list``, a ``tuple``, a generator; not a
        ``set``): until review R91b both were refused."""
        index = tree_integer(self.index, "index", "proof bundle", bools=False)
        if not 0 <= index <= MAX_TREE_SIZE:
            raise InputError(f"proof bundle: index must be 0 .. 2**64-1, got {quoted(index, 40)}")
        entry = _bytes_given(self.entry, "entry")
        if not entry:
            raise InputError("proof bundle: entry is empty (a bundle carries the entry's canonical bytes)")
        hashes = _hashes_given(self.proof)
        note = given_text(self.checkpoint_note, "checkpoint_note", "a signed checkpoint")
        if not note:
            raise InputError(
                "proof bundle: checkpoint_note is empty (a bundle ends with its signed checkpoint)"
            )
        lines = [HEADER, "extra " + base64.b64encode(entry).decode(), f"index {index}"]
        lines += [base64.b64encode(h).decode() for h in hashes]
        return "\n".join(lines) + "\n\n" + note

    @classmethod
    def parse(cls, text: str) -> ProofBundle:
        """Parse tlog-proof text; raises ``TamperDetected`` when it is malformed (an ``extra`` or
        proof hash line that is not canonical base64 named by its line number,
        ``canonical_base64``), ``InputError`` when it is not text (``given_text``)."""
        if len(given_text(text, "text", "a proof bundle")) > _MAX_BUNDLE:
            raise TamperDetected("proof bundle is too large")
        head, sep, note = text.partition("\n\n")
        if not sep:
            raise TamperDetected("proof bundle has no checkpoint after a blank line")
        lines = head.split("\n")
        if lines[0] != HEADER:
            raise TamperDetected(f"not a tlog-proof (first line must be {HEADER!r})")
        if not note:  # cut off after the blank line (until review R82: "line N+1 is blank", no such line)
            raise TamperDetected(
                f"proof bundle has no checkpoint: it ends at the blank line after its proof, line {len(lines) + 1}"
            )
        _refuse_blank_line_in_proof(len(lines) + 1, note)
        rest = lines[1:]
        entry = b""
        if rest and rest[0].startswith("extra "):
            entry = canonical_base64(rest.pop(0)[6:], "proof bundle line 2 (extra)")
        if not rest or not rest[0].startswith("index "):
            raise TamperDetected("proof bundle has no valid 'index N' line")
        index = tree_number(rest.pop(0)[6:], f"proof bundle line {len(lines) - len(rest)} (index)")
        first = len(lines) - len(rest) + 1  # the line number of the first proof hash
        proof = tuple(
            canonical_base64(line, f"proof bundle line {first + position} (proof hash)")
            for position, line in enumerate(rest)
        )
        if not entry:
            raise TamperDetected("proof bundle carries no entry (extra line)")
        return cls(index, entry, proof, note)


def _hashes_given(proof: object) -> list[bytes]:
    """``proof``, a bundle's proof, as the list of its hashes, each as ``_bytes_given`` reads it:
    ``InputError`` naming ``proof`` for what is no iterable of them (``None``; a ``str`` or
    ``bytes``, whose items are characters or numbers; a numpy array of no dimension; a ``set``,
    whose items are in no order: until review R91c written as they came), and naming
    ``proof[i]`` for an empty hash, whose line would be the blank line that ends the proof."""
    refused = InputError(
        f"proof bundle: proof must be an iterable of hashes (bytes), got {type(proof).__name__}"
    )
    if isinstance(proof, str | bytes | bytearray | memoryview) or not isinstance(proof, Iterable):
        raise refused
    if isinstance(proof, AbstractSet):  # its hashes in no order: a bundle that verifies INVALID
        raise InputError(
            f"proof bundle: proof must be its hashes in order, leaf to root, got {type(proof).__name__}"
        )
    try:
        items = iter(proof)
    except TypeError:  # ``__iter__`` and nothing to iterate (a numpy array of no dimension)
        raise refused from None
    hashes = [_bytes_given(h, f"proof[{position}]") for position, h in enumerate(items)]
    for position, h in enumerate(hashes):
        if not h:
            raise InputError(
                f"proof bundle: proof[{position}] is empty (its line would be the blank line that ends the proof)"
            )
    return hashes


def _bytes_given(value: object, field: str) -> bytes:
    """``value``, a bundle's ``field`` (its entry, a proof hash), as bytes: ``bytes``, or a
    ``bytearray`` or ``memoryview`` holding them; ``InputError`` naming ``field`` and the type for
    anything else (a ``str`` too: its characters are no bytes) and for a released ``memoryview``."""
    if not isinstance(value, bytes | bytearray | memoryview):
        raise InputError(f"proof bundle: {field} must be bytes, got {type(value).__name__}")
    try:
        return bytes(value)
    except ValueError:  # a released memoryview
        raise InputError(f"proof bundle: {field} must be bytes, got a released memoryview") from None


def _refuse_blank_line_in_proof(blank: int, note: str) -> None:
    """Raise ``TamperDetected`` naming the line when the bundle's first blank line, line ``blank``,
    stands inside the proof, not between it and the checkpoint ``note`` (the text after it): the
    note begins with another blank line, or with a line of the proof (``extra``, ``index``, or a
    32-byte hash not followed by a tree size, which a checkpoint's origin line always is). Without
    this a blank line added inside the proof was reported as a missing ``index`` line or a
    malformed checkpoint body, with no line named."""
    first, _, after = note.partition("\n")
    if first == "":
        raise TamperDetected(
            f"proof bundle line {blank + 1} is blank: one blank line, line {blank}, ends the proof"
        )
    size_line = after.partition("\n")[0]
    if first.startswith(("extra ", "index ")) or (
        _is_hash(first) and not (size_line.isascii() and size_line.isdigit())
    ):
        raise TamperDetected(
            f"proof bundle line {blank} is blank inside the proof: line {blank + 1} is still one of "
            "its lines (the proof ends at its first blank line, where its checkpoint begins)"
        )


def _is_hash(line: str) -> bool:
    try:
        return len(canonical_base64(line, "line")) == HASH_SIZE
    except TamperDetected:
        return False


def verify_bundle(
    text: str, public_key: PublicKey, origin: str | None = None
) -> tuple[AuditEntry, Checkpoint]:
    """The entry and checkpoint of a proof bundle, once everything in it verifies.

    Checks: the checkpoint's signature under ``public_key`` (and ``origin`` if given), the
    inclusion proof from the entry's leaf hash to the checkpoint's root, and that the entry's own
    index is the proven index. Raises ``TamperDetected`` naming the first check that fails, and
    ``InputError`` when ``public_key`` is no ``PublicKey`` (checked first: until review R90b a
    malformed bundle was refused as that) or ``text`` is not text (``given_text``).
    """
    _public_key(public_key, "public_key")
    bundle = ProofBundle.parse(text)
    checkpoint = open_checkpoint(bundle.checkpoint_note, public_key, origin)
    verify_inclusion(leaf_hash(bundle.entry), bundle.index, checkpoint.size, bundle.proof, checkpoint.root)
    entry = AuditEntry.from_bytes(bundle.entry)
    if entry.index != bundle.index:
        raise TamperDetected(f"entry says index {entry.index} but the proof is for index {bundle.index}")
    return entry, checkpoint
