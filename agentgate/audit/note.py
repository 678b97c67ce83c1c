"""Signed checkpoints: C2SP signed-note envelopes around C2SP tlog-checkpoint bodies.

A checkpoint's text is three lines, each ending in ``\\n``: the log's origin, the tree size in
decimal, the base64 root hash. The signed note is that text, one blank line, then one signature
line per signer: ``— <key name> <base64(key id || Ed25519 signature)>``. The key id is the first
four bytes of ``SHA-256(key name || 0x0A || 0x01 || public key)`` (0x01 = Ed25519), and the
signature covers the text only. A verifier key is written ``<name>+<hex key id>+<base64(0x01 ||
public key)>``, the form other signed-note tools accept. Verification needs only the public key.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
from collections.abc import Iterable
from dataclasses import dataclass

from agentgate._shown import quoted
from agentgate.audit.merkle import HASH_SIZE, tree_integer
from agentgate.errors import InputError, InvalidSignature, TamperDetected
from agentgate.keys import PublicKey, SigningKey

_ED25519 = b"\x01"
_EM_DASH = "\u2014"
_NAME = re.compile(r"[^\s+]+\Z")  # ``\Z``: ``$`` would let a final newline through
_MAX_NOTE = 1 << 16
_MAX_SIGNATURES = 100
"""The most signature lines a note may carry (as Go's golang.org/x/mod/sumdb/note reads them)."""


def _check_name(name: object, argument: str) -> None:
    """Refuse (``InputError``) a name that is no signed-note key name: not text (``given_text``,
    naming ``argument``: until review R91 an ``int`` or ``bytes`` failed in the pattern with a
    bare ``TypeError``), empty, with a space or a ``+``, or not UTF-8 text (a lone surrogate, from
    an environment variable that is not UTF-8)."""
    name = given_text(name, argument, "a log origin")
    if not name or not _NAME.match(name) or not _is_utf8(name):
        raise InputError(f"invalid log origin / key name {name!r}: non-empty UTF-8 text, no spaces, no '+'")


def given_text(value: object, argument: str, what: str) -> str:
    """``value``, ``what`` (a signed checkpoint, a proof bundle) that a caller gave as ``argument``,
    when it is text; ``InputError`` naming ``argument`` otherwise. Until review R89 bytes (a file
    read in binary mode) failed deep inside with a bare ``TypeError``, ``None`` with an
    ``AttributeError``, and ``AuditLog.verify``, which never raises for a tampered log, raised one."""
    if isinstance(value, str):
        return value
    binary = isinstance(value, bytes | bytearray | memoryview)
    hint = ": decode the bytes (a file read in binary mode) as UTF-8" if binary else ""
    raise InputError(f"{argument} must be {what} as text (str), got {type(value).__name__}{hint}")


def canonical_base64(text: str, where: str) -> bytes:
    """The bytes that ``text``, standard padded base64, holds, when ``text`` is their one
    canonical encoding (the text ``base64.b64encode`` writes for them). Raises
    ``TamperDetected`` naming ``where`` (``proof bundle line 4 (proof hash)``) for text that is
    not base64, and for base64 that is not canonical: Python's decoder (like Go's) ignores the
    unused bits of the character before the ``=`` padding and accepts padding added after it,
    so until review R94 an edited hash or signature line of a bundle or saved checkpoint still
    verified, and two different files were the same evidence."""
    try:
        raw = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise TamperDetected(f"{where} is not base64") from exc
    if base64.b64encode(raw).decode() != text:
        raise TamperDetected(
            f"{where} is not canonical base64 (unused bits before its '=' padding set, or padding "
            f"added): the {len(raw)} bytes it holds are written {quoted(base64.b64encode(raw).decode(), 100)}"
        )
    return raw


def _is_utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _public_key(value: object, argument: str) -> PublicKey:
    """``value``, a verification key a caller gave as ``argument``, when it is a ``PublicKey``;
    ``InputError`` naming ``argument`` and what it got otherwise (until review R90 raw key bytes
    or ``None`` failed with a bare ``AttributeError``)."""
    if isinstance(value, PublicKey):
        return value
    binary = isinstance(value, bytes | bytearray | memoryview)
    hint = ": wrap the 32 raw key bytes as PublicKey(raw)" if binary else ""
    raise InputError(f"{argument} must be a PublicKey (agentgate.keys), got {type(value).__name__}{hint}")


def _keys_given(public_key: object, previous_keys: object) -> tuple[PublicKey, ...]:
    """``previous_keys`` as a tuple, once ``public_key`` and each of them is a ``PublicKey``
    (``_public_key``); ``InputError`` for a ``previous_keys`` that is text, bytes or no iterable
    (a ``set`` or a generator of keys is taken, as before review R90, which refused all but a
    sequence)."""
    _public_key(public_key, "public_key")
    if isinstance(previous_keys, str | bytes | bytearray | memoryview) or not isinstance(
        previous_keys, Iterable
    ):
        raise InputError(
            f"previous_keys must be an iterable of PublicKey, got {type(previous_keys).__name__}"
        )
    return tuple(_public_key(key, f"previous_keys[{position}]") for position, key in enumerate(previous_keys))


def key_id(name: str, public_key: PublicKey) -> bytes:
    """The 4-byte signed-note key id of an Ed25519 key under ``name``; ``InputError`` when
    ``public_key`` is no ``PublicKey``."""
    raw = _public_key(public_key, "public_key").raw
    return hashlib.sha256(name.encode() + b"\n" + _ED25519 + raw).digest()[:4]


def verifier_key(name: str, public_key: PublicKey) -> str:
    """The signed-note verifier key string ``name+keyid+base64(0x01||key)``; ``InputError`` for
    a ``name`` that is no key name (``_check_name``) or a ``public_key`` that is no ``PublicKey``."""
    _check_name(name, "name")
    encoded = base64.b64encode(_ED25519 + _public_key(public_key, "public_key").raw).decode()
    return f"{name}+{key_id(name, public_key).hex()}+{encoded}"


def _root_bytes(root: object) -> bytes:
    """``root``, a checkpoint's root hash, as the 32 bytes signed: ``bytes``, or a ``bytearray`` or
    ``memoryview`` holding them, which were signed before review R90 (it refused all but
    ``bytes``). ``InputError`` naming the type for anything else (a ``str`` of 32 characters too,
    whose bytes are no hash), and the length for a root of another one."""
    if not isinstance(root, bytes | bytearray | memoryview):
        raise InputError(
            f"a checkpoint needs a 32-byte root (bytes, bytearray or memoryview), got {type(root).__name__}"
        )
    try:
        raw = bytes(root)
    except ValueError:  # a released memoryview
        raise InputError("a checkpoint needs a 32-byte root, got a released memoryview") from None
    if len(raw) != HASH_SIZE:
        raise InputError(f"a checkpoint needs a 32-byte root, got {len(raw)} bytes")
    return raw


@dataclass(frozen=True)
class Checkpoint:
    """A tree head: ``size`` leaves with Merkle ``root``, in the log named ``origin``."""

    origin: str
    size: int
    root: bytes

    def text(self) -> str:
        """The checkpoint body, three newline-terminated lines. Raises ``InputError`` for an
        ``origin`` that is no key name (``_check_name``: text too, until review R91 a bare
        ``TypeError``), a ``size`` that is not a whole number from 0 to ``MAX_TREE_SIZE`` (``tree_integer``, a bool
        refused) or a ``root`` that is not 32 bytes (``_root_bytes``): until review R90 a size of
        ``True``, ``1.0`` or ``Fraction(3, 2)`` passed the range check and was written as it
        prints, a note signed that no reader opens (``tree_number``: not a decimal number)."""
        _check_name(self.origin, "origin")
        size = tree_integer(self.size, "size", "checkpoint", bools=False)
        root = _root_bytes(self.root)
        if not 0 <= size <= MAX_TREE_SIZE:
            raise InputError(f"a checkpoint needs a size 0 .. 2**64-1, got {quoted(size, 40)}")
        return f"{self.origin}\n{size}\n{base64.b64encode(root).decode()}\n"

    @classmethod
    def parse(cls, text: str) -> Checkpoint:
        """Parse a checkpoint body; raises ``TamperDetected`` if it is malformed, ``InputError``
        if it is not text (``given_text``)."""
        lines = given_text(text, "text", "a checkpoint body").split("\n")
        if len(lines) < 4 or lines[-1] != "" or any(line == "" for line in lines[:-1]):
            raise TamperDetected("checkpoint body must be at least three non-empty lines ending in newline")
        origin, size_text, root_text = lines[0], lines[1], lines[2]
        size = tree_number(size_text, "checkpoint line 2 (tree size)")
        root = canonical_base64(root_text, "checkpoint line 3 (root hash)")
        if len(root) != HASH_SIZE:
            raise TamperDetected(f"checkpoint root hash is {len(root)} bytes, not {HASH_SIZE}")
        return cls(origin, size, root)


MAX_TREE_SIZE = 2**64 - 1
"""The largest tree size a checkpoint may give: C2SP tlog-checkpoint's is a 64-bit unsigned
number (Go's ``strconv.ParseUint(size, 10, 64)`` reads it)."""


def tree_number(text: str, where: str) -> int:
    """``text`` as a tree size or leaf index: ASCII digits, no leading zero, at most
    ``MAX_TREE_SIZE``. Raises ``TamperDetected`` naming ``where`` (``checkpoint line 2 (tree
    size)``) and what is wrong. The digits are counted before any is converted: a line of a
    million digits is refused as that, not by Python's limit on converting long digit strings."""
    if not re.fullmatch(r"[0-9]+", text, re.ASCII):
        raise TamperDetected(f"{where} {text[:40]!r} is not a decimal number")
    if len(text) > 1 and text[0] == "0":
        raise TamperDetected(f"{where} {text[:40]!r} has a leading zero")
    if len(text) > len(str(MAX_TREE_SIZE)) or int(text) > MAX_TREE_SIZE:
        shown = f"has {len(text)} digits:" if len(text) > 40 else f"{text} is"
        raise TamperDetected(
            f"{where} {shown} more than {MAX_TREE_SIZE} (2**64-1), the most the C2SP tlog formats allow"
        )
    return int(text)


def sign_note(text: str, key: SigningKey, name: str) -> str:
    """The signed note of ``text`` (which must end in a newline) with one signature by ``key``;
    ``InputError`` when ``key`` is no ``SigningKey``."""
    if not isinstance(key, SigningKey):
        raise InputError(f"key must be a SigningKey (agentgate.keys), got {type(key).__name__}")
    _check_name(name, "name")
    if not text.endswith("\n") or "\n\n" in text:
        raise InputError("note text must end in a newline and contain no blank line")
    signature = key.sign(text.encode())
    line = base64.b64encode(key_id(name, key.public) + signature).decode()
    return f"{text}\n{_EM_DASH} {name} {line}\n"


def open_note(note: str, public_key: PublicKey, name: str, previous_keys: Iterable[PublicKey] = ()) -> str:
    """The text of ``note`` if it carries a valid signature by ``public_key`` under ``name``, or
    by one of ``previous_keys`` (rotated-out log keys).

    Every signature line is read before any is trusted (as C2SP signed-note readers do): a
    malformed line anywhere (trailing text, a blank line, more than ``_MAX_SIGNATURES`` lines), a
    second line by a key, or a line by a key that does not verify makes the whole note
    malformed, wherever it stands; the keys are ``public_key`` and every one of ``previous_keys``
    alike (until review R82 a line by the log key that did not verify was read as another key's,
    and ignored, when a previous key's line verified). Lines by other keys are ignored (they may
    be witnesses'). Raises ``TamperDetected`` when the note is malformed or no line verifies
    under a key, ``InputError`` when it is not text (``given_text``) or a key is no ``PublicKey``
    (checked first, ``_keys_given``).
    """
    previous_keys = _keys_given(public_key, previous_keys)
    if len(given_text(note, "note", "a signed note")) > _MAX_NOTE:
        raise TamperDetected("signed note is too large")
    try:  # a lone surrogate (text decoded with surrogateescape, say) is no signed UTF-8 text
        note.encode("utf-8")
    except UnicodeEncodeError:
        raise TamperDetected("signed note is not valid Unicode text") from None
    text, sep, signatures = note.partition("\n\n")
    if not sep or not signatures.endswith("\n"):
        raise TamperDetected("signed note has no signature block")
    text += "\n"
    lines = signatures[:-1].split("\n")
    if len(lines) > _MAX_SIGNATURES:
        raise TamperDetected(f"signed note has {len(lines)} signature lines, more than {_MAX_SIGNATURES}")
    wanted = key_id(name, public_key)
    # The log key last: of two keys with one key id (a chance of 2**-32) it is the one read.
    known = {key_id(name, key): key for key in (*previous_keys, public_key)}
    ours: dict[bytes, bytes] = {}  # key id -> the signature by that known key under ``name``
    others: list[str] = []  # key ids of the signatures under ``name`` by other keys
    for line in lines:
        if not line:  # a blank line added after the note (an editor's, an echo's) included
            raise TamperDetected("signed note has an empty line among its signature lines")
        parts = line.split(" ")
        if len(parts) != 3 or parts[0] != _EM_DASH:
            raise TamperDetected(f"malformed signature line {line[:80]!r}")
        blob = canonical_base64(parts[2], f"signature line {line[:80]!r}")
        if len(blob) < 5:
            raise TamperDetected(f"malformed signature line {line[:80]!r}: no key id and signature")
        if parts[1] != name or blob[:4] not in known:
            if parts[1] == name and len(blob) == 4 + 64:
                others.append(blob[:4].hex())
            continue
        if blob[:4] in ours:
            raise TamperDetected(
                f"signed note carries two signature lines by the log key {name}{_rotated(blob[:4], wanted)}"
            )
        ours[blob[:4]] = blob[4:]
    for signer, signature in ours.items():
        try:
            known[signer].verify(text.encode(), signature)
        except InvalidSignature as exc:
            raise TamperDetected(
                f"checkpoint signature by {name}{_rotated(signer, wanted)} does not verify"
            ) from exc
    if ours:
        return text
    if others:
        # Say which key did sign it: after a log-key rotation, a checkpoint of the old key is
        # otherwise indistinguishable from a forged one (docs/operations.md, Rotating the log key).
        raise TamperDetected(
            f"note carries no signature by the log key {name} (key id {wanted.hex()}); it is signed "
            f"by key id {', '.join(others)}: a rotated-out log key verifies only when its public "
            "key is given (AGENTGATE_LOG_PREVIOUS_KEYS), any other key is a forgery"
        )
    raise TamperDetected(f"note carries no signature by the log key {name}")


def _rotated(signer: bytes, wanted: bytes) -> str:
    """What a refusal adds to the key name for the known key with key id ``signer``: nothing for
    the log key (key id ``wanted``), the key id of a rotated-out one."""
    return "" if signer == wanted else f" (rotated-out log key, key id {signer.hex()})"


def signer_key_ids(note: str, name: str) -> tuple[str, ...]:
    """The hex key ids of the well-formed signature lines under ``name`` in ``note`` (a 4-byte key
    id and a 64-byte signature), in order, none of them verified: for saying which key signed a
    note that does not open under the key given. Empty for text with no such line."""
    ids: list[str] = []
    for line in note.partition("\n\n")[2].split("\n")[:_MAX_SIGNATURES]:
        parts = line.split(" ")
        if len(parts) != 3 or parts[0] != _EM_DASH or parts[1] != name:
            continue
        try:
            blob = canonical_base64(parts[2], "signature line")
        except TamperDetected:
            continue
        if len(blob) == 4 + 64:
            ids.append(blob[:4].hex())
    return tuple(ids)


def other_signer(note: str, name: str, public_key: PublicKey) -> str | None:
    """The hex key id of the one key whose signature lines under ``name`` ``note`` carries, when
    that key is not ``public_key`` (``None`` for no such line, several keys, or ``public_key``'s):
    a note that does not open under the key given and is signed by one other key."""
    ids = set(signer_key_ids(note, name))
    if len(ids) != 1:
        return None
    (only,) = ids
    return None if only == key_id(name, public_key).hex() else only


def wrong_key_cause(found: str, given: str, signer: str, where: str | None) -> str:
    """The ``likely cause:`` every audit verb gives, in the same words, when ``found`` (what did
    not verify: ``none of the 2 stored checkpoint(s) verifies``) under the key given (key id
    ``given``) is signed by one other key (key id ``signer``): a wrong key is the likelier story,
    though replacing every signature with one's own looks the same, so the verb still refuses or
    says TAMPERED or INVALID, and the reader tells the two apart (review R54 for ``audit verify``;
    review R74 for ``verify-proof``, ``checkpoint``, ``prove`` and the verbs that read the latest
    stored checkpoint). ``where`` is how that verb is given its key (``--key`` for
    ``verify-proof``, ``AGENTGATE_LOG_KEY`` for the verbs that sign): a way it does not take would
    send the reader to set what it never reads (until the review of R74 all named both). ``None``
    (a log a program opened, ``AuditLog(key_named=None)``): no way is named, and the reader is
    told to open the log with the right key rather than to run a command again."""
    how = f"not this log's key ({where}), run again" if where else "not this log's key, open the log"
    return (
        f"likely cause: {found} under the key given (key id {given}), and all are signed by one "
        f"other key (key id {signer}): if the key given is {how} "
        "with the right one; if it is, the signatures were replaced: tampering"
    )


def sign_checkpoint(checkpoint: Checkpoint, key: SigningKey) -> str:
    """The checkpoint as a signed note, signed under its origin as key name."""
    return sign_note(checkpoint.text(), key, checkpoint.origin)


def open_checkpoint(
    note: str, public_key: PublicKey, origin: str | None = None, previous_keys: Iterable[PublicKey] = ()
) -> Checkpoint:
    """A checkpoint whose signature by ``public_key`` (or one of ``previous_keys``, under the rules
    of ``open_note``) verifies; raises ``TamperDetected`` otherwise.

    ``origin``, when given, must match the checkpoint's (checked first: a checkpoint of another log
    is refused as that, not as unsigned); otherwise the origin on its first line is taken as the
    key name. Raises ``InputError`` when ``note`` or ``origin`` is not text (``given_text``), or
    a key is no ``PublicKey`` (``_keys_given``), before anything is compared: until review R90b a
    ``public_key`` of ``None`` with another ``origin`` was refused as a checkpoint of another log.
    """
    first_line = given_text(note, "note", "a signed checkpoint").split("\n", 1)[0]
    previous_keys = _keys_given(public_key, previous_keys)
    if origin is not None and given_text(origin, "origin", "a log origin") != first_line:
        # Before the signature, which is made under the body's origin: checked under another
        # name it fails as if the note were unsigned, and a log read with the wrong origin
        # (AGENTGATE_LOG_ORIGIN) would have every checkpoint reported as a forgery.
        raise TamperDetected(f"checkpoint is for log {first_line[:100]!r}, expected {origin!r}")
    name = origin if origin is not None else first_line
    text = open_note(note, public_key, name, previous_keys)
    checkpoint = Checkpoint.parse(text)
    if checkpoint.origin != name:
        raise TamperDetected(f"checkpoint is for log {checkpoint.origin!r}, expected {name!r}")
    return checkpoint
