"""Ed25519 keys and ``did:key`` identities.

Signing and verification go through PyNaCl (libsodium): on this project's machines it verifies
about twice as fast as ``cryptography`` (benchmarks/authority.py measures both), and libsodium
rejects non-canonical signatures (S >= L) and small-order public keys by itself. Key *files* are
written with ``cryptography`` as PKCS#8 PEM so that OpenSSL and other tools can read them.

A principal is identified by ``did:key:z...``: the multicodec prefix ``0xed 0x01`` followed by
the 32-byte public key, base58btc-encoded with the multibase prefix ``z``.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import re
import stat
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import base58
import nacl.exceptions
import nacl.signing
from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import dsa, ec, ed448, rsa, x448, x25519
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from agentgate._paths import make_private_directories, remove_made, unmade_above
from agentgate._shown import shown
from agentgate._shown import shown_path as shown_path  # re-exported: callers quote paths through keys
from agentgate.errors import InputError, InvalidSignature, KeyFileError

_ED25519_MULTICODEC = b"\xed\x01"
_DID_PREFIX = "did:key:z"
SIGNATURE_SIZE = 64
PUBLIC_KEY_SIZE = 32
MAX_KEY_FILE_BYTES = 8192
"""The most a key file may hold; an Ed25519 PEM key is about 120 bytes."""


def as_path(path: object, what: str, error: type[InputError] = InputError, *, doing: str = "read") -> Path:
    """``path`` (text, bytes or ``os.PathLike``; bytes decoded as the file system does) as a
    ``Path``; anything else (``None``, a number, a key object) raises ``error`` naming ``what``
    the file was to hold (and what was ``doing`` with it), instead of ``pathlib``'s bare
    ``TypeError``."""
    try:
        return Path(os.fsdecode(path))  # type: ignore[arg-type]
    except TypeError:
        raise error(
            f"cannot {doing} {what}: expected a file path (text or os.PathLike), got {type(path).__name__}"
        ) from None


def _bytes_expected(what: str, value: object) -> InputError:
    """The error for a value that is not ``bytes`` where an Ed25519 operation takes bytes."""
    return InputError(f"{what} must be bytes, got {type(value).__name__}")


def read_regular_file(
    path: Path | str, limit: int, what: str, error: type[InputError] = InputError
) -> tuple[bytes, os.stat_result]:
    """The bytes of the regular file at ``path`` (at most ``limit`` of them) and its ``fstat``.

    Opens without blocking (``O_NONBLOCK``), so a FIFO or a device given in place of a file is
    refused at once instead of waiting forever for a writer; anything but a regular file (a FIFO,
    a directory, a device, a socket) is refused, and so is a file of more than ``limit`` bytes,
    after reading at most ``limit + 1`` of them. The permission bits returned are those of the
    file that was read (no second look-up by name). Raises ``error`` (an ``InputError``) naming
    ``path`` and ``what`` it was to hold.
    """
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        raise error(f"{shown_path(path)}: cannot read {what}: {exc.strerror}") from None
    except ValueError:  # a NUL byte in the path, which no file name can hold
        raise error(f"{shown_path(path)}: cannot read {what}: the path holds a NUL byte") from None
    except TypeError:  # None, a number: not a path at all
        raise error(
            f"cannot read {what}: expected a file path (text or os.PathLike), got {type(path).__name__}"
        ) from None
    try:
        status = os.fstat(fd)
        if not stat.S_ISREG(status.st_mode):
            raise error(f"{shown_path(path)}: cannot read {what}: not a regular file")
        if status.st_size > limit:
            raise error(f"{shown_path(path)}: cannot read {what}: larger than {limit} bytes")
        chunks: list[bytes] = []
        size = 0
        while size <= limit:
            chunk = os.read(fd, limit + 1 - size)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    except OSError as exc:
        raise error(f"{shown_path(path)}: cannot read {what}: {exc.strerror}") from None
    finally:
        os.close(fd)
    if size > limit:
        raise error(f"{shown_path(path)}: cannot read {what}: larger than {limit} bytes")
    return b"".join(chunks), status


def did_from_public_key(public_key: bytes) -> str:
    """The ``did:key`` identifier of a raw 32-byte Ed25519 public key."""
    if not isinstance(public_key, bytes):
        raise KeyFileError(
            f"an Ed25519 public key is {PUBLIC_KEY_SIZE} bytes, got {type(public_key).__name__}"
        )
    if len(public_key) != PUBLIC_KEY_SIZE:
        raise KeyFileError(f"an Ed25519 public key is {PUBLIC_KEY_SIZE} bytes, got {len(public_key)}")
    return _DID_PREFIX + base58.b58encode(_ED25519_MULTICODEC + public_key).decode("ascii")


def public_key_from_did(did: str) -> bytes:
    """The raw public key inside an Ed25519 ``did:key``; raises ``KeyFileError`` on anything else,
    quoting the text given unless it looks like a key itself (``looks_like_key``: a private key
    pasted after ``did:``, until review R86 quoted up to 80 characters of it); what is not text
    is named by its type (``did_refusal``)."""
    if not isinstance(did, str) or not did.startswith(_DID_PREFIX) or len(did) > 64:
        raise _refused_did("not an Ed25519 did:key", did)
    try:
        raw = base58.b58decode(did[len(_DID_PREFIX) :])
    except ValueError as exc:
        raise _refused_did("did:key is not valid base58btc", did) from exc
    if len(raw) != 2 + PUBLIC_KEY_SIZE or raw[:2] != _ED25519_MULTICODEC:
        raise _refused_did("did:key does not hold an Ed25519 public key", did)
    public_key = raw[2:]
    if did_from_public_key(public_key) != did:  # rejects non-canonical base58 spellings
        raise _refused_did("did:key is not in canonical form", did)
    return public_key


def _refused_did(why: str, did: object) -> KeyFileError:
    return KeyFileError(did_refusal(why, did))


def did_refusal(why: str, did: object) -> str:
    """The message refusing ``did`` (what was given where a did:key belongs) for ``why``. Every
    did reader says it so (this module's, ``Keyring.get`` and the token decoder's
    ``did_public_key``, which quoted a private key after ``did:`` until review R86b); called on
    refusal only, so no decoded did pays.

    - What is not text: a number by its size, anything else by its type (``_shown.shown``). Until
      review R86c its ``repr`` was quoted: a seed or a PEM given as bytes showed key material, and
      an integer of more than 4,300 digits was a bare ``ValueError``.
    - Text that does not look like a key (``looks_like_key``: the text alone, whatever files
      exist; until review R86c ``is_key_text`` asked, so the refusal of a client's invocation
      ``iss`` told whether a file of that name existed): its first 80 characters.
    - A DID of another method, as W3C DID syntax writes one (``did:ethr:0x...``, ``did:jwk:...``)
      whose id looks like a key: named by its method, its id not shown (it may be a private key
      put in that form). Until review R86b it was told to replace a key.
    - Other text that looks like a key itself (a private key's PEM or base64 after ``did:``):
      not shown."""
    if not isinstance(did, str):
        return f"{why}: got {shown(did)}"
    if not looks_like_key(did):
        return f"{why}: {did[:80]!r}"
    method = _DID_SYNTAX.fullmatch(did)
    if method is not None and method[1] != "key":
        return (
            f"{why}: a did:{method[1][:20]} DID (its id looks like a key and is not shown); "
            "agentgate reads Ed25519 did:key DIDs only (NAME.pub holds one)"
        )
    return (
        "not an Ed25519 did:key but text that looks like a key itself (PEM, base64 or hex "
        "text): give the did:key of the public key (NAME.pub holds it) or the path of a key "
        "file (the value is not shown; if it is a private key and was logged elsewhere, "
        "replace the key)"
    )


_DID_SYNTAX = re.compile(
    r"did:([a-z0-9]+):(?:[A-Za-z0-9._:-]|%[0-9A-Fa-f]{2})*(?:[A-Za-z0-9._-]|%[0-9A-Fa-f]{2})"
)
"""A DID as W3C DID Core (section 3.1) writes one: ``did:``, a method name of small letters and
digits, ``:``, and an id of letters, digits, ``.-_:`` and %-escapes, not ending in ``:``."""


@dataclass(frozen=True)
class PublicKey:
    """An Ed25519 verification key and its ``did:key``."""

    raw: bytes
    did: str = field(init=False)
    _verifier: nacl.signing.VerifyKey = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "did", did_from_public_key(self.raw))
        object.__setattr__(self, "_verifier", nacl.signing.VerifyKey(self.raw))

    @classmethod
    def from_did(cls, did: str) -> PublicKey:
        return cls(public_key_from_did(did))

    def verify(self, message: bytes, signature: bytes) -> None:
        """Return if ``signature`` is this key's signature of ``message``; else ``InvalidSignature``.

        Raises ``InputError`` when ``message`` or ``signature`` is not ``bytes`` (a ``bytearray``
        or ``memoryview`` included, as ``SigningKey.sign`` refuses them: until review R84 PyNaCl
        took a ``bytearray`` message here, and a ``str`` or ``list`` signature of the wrong length
        was an ``InvalidSignature``), whatever their length: both are checked before either is
        read."""
        for what, value in (("the message", message), ("the signature", signature)):
            if not isinstance(value, bytes):
                raise _bytes_expected(what, value)
        if len(signature) != SIGNATURE_SIZE:
            raise InvalidSignature(f"an Ed25519 signature is 64 bytes, got {len(signature)}")
        try:
            self._verifier.verify(message, signature)
        except (nacl.exceptions.BadSignatureError, nacl.exceptions.ValueError) as exc:
            raise InvalidSignature(f"signature does not verify under {self.did}") from exc

    def is_valid(self, message: bytes, signature: bytes) -> bool:
        try:
            self.verify(message, signature)
        except InvalidSignature:
            return False
        return True


@dataclass(frozen=True)
class SigningKey:
    """An Ed25519 private key. Its ``repr`` never shows the secret."""

    seed: bytes = field(repr=False)
    public: PublicKey = field(init=False)
    _signer: nacl.signing.SigningKey = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not isinstance(self.seed, bytes) or len(self.seed) != 32:
            got = f"{len(self.seed)} bytes" if isinstance(self.seed, bytes) else type(self.seed).__name__
            raise KeyFileError(f"an Ed25519 private key seed is 32 bytes, got {got}")
        signer = nacl.signing.SigningKey(self.seed)
        object.__setattr__(self, "_signer", signer)
        object.__setattr__(self, "public", PublicKey(bytes(signer.verify_key)))

    @classmethod
    def generate(cls) -> SigningKey:
        return cls(os.urandom(32))

    @property
    def did(self) -> str:
        return self.public.did

    def sign(self, message: bytes) -> bytes:
        """The Ed25519 signature of ``message``; ``InputError`` when it is not ``bytes``."""
        try:
            return bytes(self._signer.sign(message).signature)
        except TypeError:  # PyNaCl's, for a str, None or a bytearray
            raise _bytes_expected("the message to sign", message) from None


_PAIR_TEMPORARY = (".agentgate-keypair-", ".tmp")
"""Prefix and suffix of the temporary files of ``save_key`` (told apart from other writers')."""
_LOCK_WAIT_S = 10.0


def save_key(key: SigningKey, directory: Path | str, name: str) -> tuple[Path, Path]:
    """Write ``DIR/NAME.key`` (PKCS#8 PEM, mode 0600) and ``DIR/NAME.pub`` (did:key), both or neither.

    Neither file is ever overwritten. A missing ``DIR``, and each missing directory above it, is
    created with mode 0700 whatever the umask (``_paths.make_private_directories``), and removed again
    when the pair is then refused or not written: a refusal leaves nothing made. Both are first written whole to temporary files in ``DIR``
    (the private one created with ``O_EXCL`` and mode 0600 in one call, so it never exists with
    wider permissions) and synced; then ``NAME.key`` and ``NAME.pub`` are hard-linked into place
    in that order, each link failing if the name exists, the directory synced after each, so
    ``NAME.pub`` is the commit point: a ``NAME.pub`` written here never exists without its
    ``NAME.key``, even after a power loss. Any failure or interruption (an exception, Ctrl-C)
    removes the name linked so far and the temporary files. A process killed outright (SIGKILL,
    power loss) between the two links leaves a ``NAME.key`` without ``NAME.pub`` and its
    temporary files: the next ``save_key`` in ``DIR`` removes that key (it is still linked to a
    temporary file of this function, so it is recognised; nobody was told its did:key) and every
    such temporary file. Once ``NAME.pub`` is linked, the key's temporary file is removed at once
    (before the slow directory sync), so a process killed from then on leaves a whole pair that no
    later call removes, even after the user moved ``NAME.pub`` away to publish it (only a kill
    between those two system calls still leaves it recognisable). Calls in one ``DIR`` are serialized by an advisory lock on ``DIR``
    (``flock``, released by the kernel when its holder dies), so that clean-up never touches a
    pair another process is writing.

    ``directory`` is a path (text, bytes or ``os.PathLike``). Raises ``KeyFileError`` for a
    ``directory`` that is none, a name that is not a plain file name (not text, empty, with a
    ``/`` or a NUL, starting with a dot, starting or ending with white space, or not encodable as a file
    name: a lone surrogate), an existing ``NAME.key`` or
    ``NAME.pub``, a ``DIR`` that goes up (``..``) out of a directory that does not exist
    (``unmade_above``: until review R88 it was made, as ``mkdir -p`` would), a ``DIR`` others may change (``unsafe_directory``: where the key could be
    replaced, and where ``load_signing_key`` would refuse it), or a target that cannot be written (``DIR`` a file, ``NAME.pub`` a directory, a
    name too long, no space, a file system without hard links), or when another process holds
    the lock on ``DIR`` for more than ten seconds.
    """
    # None, a number: until review R84 a TypeError out of ``directory / name``.
    directory = as_path(directory, "a key pair into its directory", KeyFileError, doing="write")
    if not isinstance(name, str):
        raise KeyFileError(f"invalid key name: expected text, got {type(name).__name__}")
    if not name or "/" in name or name.startswith(".") or "\x00" in name or not _encodable(name):
        raise KeyFileError(f"invalid key name {shown_value(name)}: use a plain file name")
    if name != name.strip():  # until review R89 ``"alice.key "`` wrote ``alice.key .key``
        raise KeyFileError(
            f"invalid key name {shown_value(name)}: it starts or ends with white space; leave it out"
        )
    _refuse_unsafe_directory(directory, directory / f"{name}.key")  # before anything is made
    above = unmade_above(directory)
    if above is not None:  # mkdir -p would make it only for the path to step out of it again
        raise KeyFileError(
            f"{shown_path(directory)}: cannot create the key directory: {shown_path(above)} names no "
            "directory (a directory the path goes up out of with .. is not made); give the "
            "directory without it"
        )
    made = _make_key_directories(directory)
    try:
        _refuse_unsafe_directory(directory, directory / f"{name}.key")  # changed since: a race
        return _write_pair(key, directory, name)
    except BaseException:  # a refusal leaves nothing made: the directories made above go too
        remove_made(made)
        raise


def _make_key_directories(directory: Path) -> list[Path]:
    """``make_private_directories(directory)``: the directories made, outermost first, each 0700
    whatever the umask. Raises ``KeyFileError`` when one cannot be made, having removed those it
    made."""
    try:
        return make_private_directories(directory)
    except FileExistsError:  # something that is no directory is there (mkdir says "File exists")
        kind = (
            "a symbolic link to no directory" if os.path.islink(directory) else "a file that is no directory"
        )
        raise KeyFileError(
            f"{shown_path(directory)}: cannot create the key directory: {kind} is there; give a "
            "directory (created if missing)"
        ) from None
    except OSError as exc:
        raise KeyFileError(
            f"{shown_path(directory)}: cannot create the key directory: {exc.strerror}"
        ) from None
    except ValueError:  # a NUL byte in the path, or a lone surrogate (UnicodeEncodeError)
        fault = "a NUL byte" if "\x00" in str(directory) else "a character no file name can hold"
        raise KeyFileError(
            f"{str(directory)!r}: cannot create the key directory: the path holds {fault}"
        ) from None


def _write_pair(key: SigningKey, directory: Path, name: str) -> tuple[Path, Path]:
    """``save_key``'s writing of the pair into ``directory``, which is there and judged safe."""
    key_path, pub_path = directory / f"{name}.key", directory / f"{name}.pub"
    pem = Ed25519PrivateKey.from_private_bytes(key.seed).private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    temporaries: list[Path] = []
    files: list[os.stat_result] = []  # what each temporary file is (its device and inode)
    linked: list[tuple[Path, os.stat_result]] = []  # (final name, the file it links) made by this call
    try:
        with _directory_lock(directory):
            try:
                try:
                    _remove_interrupted_pairs(directory)
                    for final, what in ((key_path, "a key"), (pub_path, "a public key")):
                        if os.path.lexists(final):  # refused before anything is linked
                            raise KeyFileError(f"{final} already exists; refusing to overwrite {what}")
                    for data, mode in ((pem, 0o600), ((key.did + "\n").encode("ascii"), 0o644)):
                        fd, temporary = tempfile.mkstemp(
                            dir=directory, prefix=_PAIR_TEMPORARY[0], suffix=_PAIR_TEMPORARY[1]
                        )
                        temporaries.append(Path(temporary))
                        with os.fdopen(fd, "wb") as out:
                            out.write(data)
                            out.flush()
                            os.fchmod(out.fileno(), mode)
                            os.fsync(out.fileno())
                            files.append(os.fstat(out.fileno()))
                    _sync_directory(directory)  # the temporary files first: they mark a half-made pair
                    for final, temporary_path, file in (
                        (key_path, temporaries[0], files[0]),
                        (pub_path, temporaries[1], files[1]),
                    ):
                        try:
                            os.link(temporary_path, final, follow_symlinks=False)
                        except FileExistsError:
                            what = "a key" if final == key_path else "a public key"
                            raise KeyFileError(
                                f"{final} already exists; refusing to overwrite {what}"
                            ) from None
                        linked.append((final, file))
                        if final == pub_path:
                            # Committed: NAME.key stops being a link of a temporary file at once
                            # (before the slow sync), so a run killed from here on leaves a pair
                            # no later clean-up takes for a half-made one, even once the user has
                            # moved NAME.pub away.
                            temporaries[0].unlink()
                        _sync_directory(directory)  # NAME.key durable before NAME.pub is linked
                except OSError as exc:
                    raise KeyFileError(
                        f"{directory / name}: cannot write the key pair: {exc.strerror}"
                    ) from None
            except BaseException:  # any failure, the OSError above included: take back what was linked
                for final, file in reversed(linked):
                    _unlink_if_same(final, file)
                raise
            finally:
                for temporary_path in temporaries:
                    temporary_path.unlink(missing_ok=True)
    except OSError as exc:  # DIR cannot be opened for its lock, or a temporary file not removed
        raise KeyFileError(f"{directory}: cannot write a key pair there: {exc.strerror}") from None
    return key_path, pub_path


def _encodable(name: str) -> bool:
    """Whether ``name`` can be a file name here: a lone surrogate (``"\\ud800"``) has no bytes in the
    file system's encoding (until review R84 a ``UnicodeEncodeError`` out of ``save_key``)."""
    try:
        os.fsencode(name)
    except UnicodeEncodeError:
        return False
    return True


def _private_group(gid: int, owner: int) -> bool:
    """Whether the group ``gid`` holds no one but the user ``owner``: the primary group of no
    other user, and no other member (a user private group, as Debian's ssh judges one; a group of
    no member at all is not one). Such a group may write where its owner may."""
    import grp  # on the path of a group-writable directory only
    import pwd

    try:
        group = grp.getgrgid(gid)
        name = pwd.getpwuid(owner).pw_name
    except KeyError:  # a group or user the system does not know: nobody can say who is in it
        return False
    primary = [user.pw_uid for user in pwd.getpwall() if user.pw_gid == gid]
    if any(uid != owner for uid in primary) or any(member != name for member in group.gr_mem):
        return False
    return bool(primary or group.gr_mem)


def _refuse_unsafe_directory(directory: Path, key_path: Path) -> None:
    """Raise ``KeyFileError`` when a private key at ``key_path`` could be replaced through a
    directory on its way (``unsafe_directory``): where it would also never be read."""
    try:
        unsafe = unsafe_directory(key_path)
    except ValueError:  # a NUL byte in the path: mkdir says so
        return
    if unsafe is not None:
        raise KeyFileError(
            f"{shown_path(directory)}: cannot write a private key in a directory others may change: {unsafe}"
        )


@contextlib.contextmanager
def _directory_lock(directory: Path) -> Iterator[None]:
    """Hold an exclusive ``flock`` on ``directory`` (waits up to ``_LOCK_WAIT_S``, then
    ``KeyFileError``). The kernel releases it when the holder exits or is killed."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        end = time.monotonic() + _LOCK_WAIT_S
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= end:
                    raise KeyFileError(
                        f"{directory}: another process has been writing a key pair there for "
                        f"{_LOCK_WAIT_S:.0f}s; try again"
                    ) from None
                time.sleep(0.02)
        yield
    finally:
        os.close(fd)  # releases the lock


def _remove_interrupted_pairs(directory: Path) -> None:
    """Remove what a ``save_key`` killed outright in ``directory`` left (the lock is held, so no
    other call is writing): every ``NAME.key`` without its ``NAME.pub`` that is still a link of
    one of its temporary files, then those temporary files."""
    temporaries = [
        entry
        for entry in os.scandir(directory)
        if entry.name.startswith(_PAIR_TEMPORARY[0]) and entry.name.endswith(_PAIR_TEMPORARY[1])
    ]
    if not temporaries:
        return
    inodes = set()
    for entry in temporaries:
        with contextlib.suppress(OSError):
            status = entry.stat(follow_symlinks=False)
            inodes.add((status.st_dev, status.st_ino))
    for entry in os.scandir(directory):
        if not entry.name.endswith(".key") or os.path.lexists(directory / (entry.name[:-4] + ".pub")):
            continue
        with contextlib.suppress(OSError):
            status = entry.stat(follow_symlinks=False)
            if (status.st_dev, status.st_ino) in inodes:
                os.unlink(entry.path)
    for entry in temporaries:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(entry.path)
    _sync_directory(directory)


def _unlink_if_same(path: Path, file: os.stat_result) -> None:
    """Remove ``path`` if it is still the file ``file`` describes (never someone else's file)."""
    try:
        if os.path.samestat(os.lstat(path), file):
            path.unlink()
    except OSError:
        pass  # gone already, or not ours: nothing of this call to remove


def _sync_directory(directory: Path) -> None:
    """``fsync`` the directory, so that the names linked into it survive a power loss."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


_SQLITE_HEADERS = (b"SQLite format 3\x00", b"\x37\x7f\x06\x82", b"\x37\x7f\x06\x83")
"""The first bytes of a SQLite database and of its write-ahead log (both byte orders)."""


def output_file_start(path: Path | str, size: int) -> bytes | None:
    """The first ``size`` bytes (fewer if it is shorter) of the regular file at ``path``, which an
    output is to replace, for the caller to judge what it holds; ``b""`` where nothing is there
    (gone since it was looked at: nothing to lose), and ``None`` where an empty file is there that
    the user may not read (nothing to lose either, but nothing the caller can hold open). The one
    check of every ``--out``: ``replace_file``'s and that of ``audit prove`` and ``audit report``
    (until review R91d the audit verbs had their own, which refused a leased file, and told a file
    removed meanwhile as one there).

    Raises ``OSError`` (``EEXIST``) whose text says what is there and that it is kept: anything
    but a regular file (``a symbolic link is there``, ``not a regular file is there``, as looked
    at or as opened); a file that is not empty and cannot be read (``a file that cannot be read
    (it may hold a private key) is there``: a rename needs no right to the file it replaces, and
    until review R91 another user's private key (mode 0600) in a directory the caller may write to
    was replaced); and one that could not be checked for another reason (an I/O error, no file
    descriptor free), naming it (until review R91b said to be one that "cannot be read"). Raises
    the ``OSError`` of the look at ``path`` itself (a directory above that cannot be searched).

    Opened as ``_opened`` opens it (a FIFO put there is not waited on, a lease's break is), and
    read blocking once ``fstat`` shows a regular file, so that a file system honouring
    ``O_NONBLOCK`` on reads does not refuse it (until review R91c it was refused as a file that
    could not be checked)."""
    try:
        looked_at = os.lstat(path)
    except FileNotFoundError:
        return b""
    if not stat.S_ISREG(looked_at.st_mode):
        raise _kept(
            "a symbolic link" if stat.S_ISLNK(looked_at.st_mode) else "not a regular file", named=False
        )
    try:
        fd = _opened(path)
        try:
            if stat.S_ISREG(os.fstat(fd).st_mode):
                os.set_blocking(fd, True)
                return os.read(fd, size)
        finally:
            os.close(fd)
    except FileNotFoundError:
        return b""  # gone since it was looked at: nothing there to lose
    except PermissionError:  # EACCES, EPERM, opening or reading: the user may not read it
        if looked_at.st_size == 0:
            return None
        raise _kept("a file that cannot be read (it may hold a private key)") from None
    except OSError as exc:  # an I/O error, no file descriptor free: not a refused read
        raise _kept(f"a file that could not be checked ({exc.strerror or exc})") from None
    raise _kept("not a regular file", named=False)  # put there since it was looked at


def _kept(held: str, *, named: bool = True) -> OSError:
    """The refusal of an output's path where ``held`` is there (``named``: a file, which another
    name for the output avoids)."""
    return OSError(
        errno.EEXIST, f"{held} is there; refusing to replace it" + (" (name another file)" if named else "")
    )


def _refuse_irreplaceable(path: Path) -> None:
    """Raise ``OSError`` (``EEXIST``) where what is at ``path`` must never be replaced by an
    output: what ``output_file_start`` refuses, and a regular file that holds a private key (PEM,
    any kind: lost for good) or a SQLite database or write-ahead log (a store's grants,
    revocations and audit log). ``--out`` naming one is a slip of tab completion, and the file
    would be gone with no error."""
    head = output_file_start(path, 4096) or b""
    if head.startswith(_SQLITE_HEADERS):
        raise _kept("a SQLite database")
    if b"PRIVATE KEY-----" in head:
        raise _kept("a private key")


def _opened(path: Path | str) -> int:
    """A file descriptor open for reading on what is at ``path``, never waiting on a FIFO or a
    device put there: opened without blocking (``O_NONBLOCK``; until review R91b a FIFO swapped in
    after the look at ``path`` held the command until a writer came). A regular file another
    process holds a kernel lease on (Samba's oplocks, knfsd's delegations) refuses that open
    (``EWOULDBLOCK``) as its holder is told to let go: it is opened again waiting for that, as
    before review R91b (the kernel breaks a lease not given up within
    ``/proc/sys/fs/lease-break-time``, 45 s by default; until review R91c it was refused as a file
    that could not be checked), but only the very file ``fstat`` shows regular: it is pinned with
    ``O_PATH`` (which neither waits on a FIFO nor breaks a lease) and reopened through
    ``/proc/self/fd``, never by name (until review R91d a FIFO renamed over ``path`` between the
    look and the blocking open, as the holder is told to let go, held the command for good).
    Where it is not a regular file the pinned descriptor is returned, for the caller's ``fstat`` to
    refuse. Leases are Linux's: elsewhere (no ``O_PATH``, no ``/proc``) the ``BlockingIOError`` is
    raised. Raises ``OSError``."""
    flags = os.O_RDONLY | os.O_NOCTTY | os.O_CLOEXEC
    try:
        return os.open(path, flags | os.O_NONBLOCK)
    except BlockingIOError:
        if not (hasattr(os, "O_PATH") and os.path.isdir("/proc/self/fd")):
            raise
    pinned = os.open(path, os.O_PATH | os.O_CLOEXEC)
    try:
        if not stat.S_ISREG(os.fstat(pinned).st_mode):
            return pinned  # put there since it was looked at
        fd = os.open(f"/proc/self/fd/{pinned}", flags)  # the same file: waits for the lease's break
    except BaseException:
        os.close(pinned)
        raise
    os.close(pinned)
    return fd


class FilledFile(FileExistsError):
    """``replace_file(..., exclusive=True)``: a file that is not empty is at the path when the new
    one would take its place."""


class HeldFile(FilledFile):
    """``replace_file(..., exclusive=True)``: another such call holds the path (it is writing a file
    there at this moment)."""


class UnopenableFile(FilledFile):
    """``replace_file(..., exclusive=True)``: an empty file the user may not open is at the path: no
    lock can be held on it while the new one is written, so it is not replaced."""


def replace_file(
    path: Path,
    data: bytes,
    mode: int,
    before_rename: Callable[[], None] | None = None,
    *,
    exclusive: bool = False,
) -> None:
    """Write ``data`` to a new file beside ``path`` and rename it over ``path``, with ``mode``.

    The new file is created with ``O_EXCL`` and mode 0600 (then set to ``mode``), written and
    synced before the rename: an existing file keeps neither its permissions nor its contents in
    part, and readers see the old file or the whole new one. Only a regular file is replaced:
    ``path`` being a symbolic link (neither followed nor replaced), a directory, a FIFO or a
    device raises ``OSError`` before anything is written, and so does a regular file that holds
    what no output may replace: a private key or a SQLite database, or one that is not empty and
    cannot be read (``_refuse_irreplaceable``).
    ``before_rename`` runs after the data is safely written and before the rename; if it raises,
    nothing is renamed. Raises ``OSError`` (or what ``before_rename`` raises); the temporary file
    never outlives a failure.

    ``exclusive``: what is at ``path`` is replaced only if it is an empty regular file, and that
    holds at the moment of writing, not only when it was looked at (review R72: a file created
    between a caller's look and the rename was replaced). Once the data is written, the name is
    taken (``_name_taken``: an empty placeholder made with ``O_CREAT | O_EXCL``, 0600, or the
    empty file there, held with ``flock`` until the end, which another exclusive writer is
    refused by, ``HeldFile``; an empty file the user may not open cannot be held so and is not
    replaced, ``UnopenableFile``) before ``before_rename`` runs; then the data is linked in the
    placeholder's place (``_put``: a file put there meanwhile by a writer that took no lock is
    kept, ``FilledFile``). A file already there that is not empty raises ``FilledFile`` and nothing
    is written; the placeholder is removed if ``before_rename`` or the link fails. A crash leaves
    at most that empty file, never part of ``data``. An empty file that was there is replaced as
    it is (a writer that holds it open and writes to it at that very moment loses what it writes).
    """
    _refuse_irreplaceable(path)
    fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=".agentgate-", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
            out.flush()
            os.fchmod(out.fileno(), mode)
            os.fsync(out.fileno())
        if not exclusive:
            if before_rename is not None:
                before_rename()
            os.replace(temporary, path)
            return
        with _name_taken(path) as taken:
            if before_rename is not None:
                before_rename()
            _put(temporary, path, taken)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):  # linked and unlinked already (``_put``)
            os.unlink(temporary)
        raise


@dataclass(frozen=True)
class _Taken:
    """The name ``path`` as ``_name_taken`` holds it for ``_put``."""

    file: os.stat_result
    """The status of the empty file at the name when it was taken."""
    made: bool
    """Whether that file is the placeholder made there (``False``: an empty file found there)."""


_TAKING_TRIES = 3
"""How many times ``_name_taken`` looks again at a name whose file is removed as it is looked at."""


@contextlib.contextmanager
def _name_taken(path: Path) -> Iterator[_Taken]:
    """Hold the name ``path`` for ``replace_file(..., exclusive=True)``: create it empty (0600),
    or, where an empty regular file is there already, take that one; in both cases with an
    exclusive ``flock`` on that file until the block ends, so that another exclusive writer
    (another ``grant issue --out`` of the same file) is refused and does not take the placeholder
    for an empty file a user left (review R72: it did, and the two tokens were renamed over each
    other, both said written). An empty file the user may not open (another user's, mode 0600)
    cannot be held so: it is refused, ``UnopenableFile``, before ``before_rename`` runs (review
    R92 took it without a lock, and review R92b found that unsafe: in a sticky directory such as
    /tmp, or where the file is immutable, the rename failed once the grant was recorded, and two
    writers of it were no longer kept apart). A file removed between the look and the open is
    nothing to lose: the name is taken again (until review R92 it was told as "not empty").
    Raises ``FilledFile`` for a file that is not empty, and ``HeldFile`` for one another writer
    holds (or that is made and removed each time it is looked at). The placeholder made here is
    removed if the block fails while it is still there, empty."""
    fd, created = -1, False
    for _ in range(_TAKING_TRIES):
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        except FileExistsError:
            pass
        else:
            created = True
            break
        try:  # O_NONBLOCK: a FIFO made there since is not waited on (it is refused below)
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        except FileNotFoundError:  # removed since: taken again
            continue
        except PermissionError:  # the user may not open it: no lock can be held on it
            try:
                there = os.lstat(path)
            except FileNotFoundError:  # removed since: taken again
                continue
            if stat.S_ISREG(there.st_mode) and there.st_size == 0:
                raise UnopenableFile(
                    errno.EEXIST,
                    "a file you may not open is there: it cannot be held while written",
                    str(path),
                ) from None
            raise FilledFile(errno.EEXIST, "a file that is not empty is there", str(path)) from None
        except OSError:  # a symbolic link (ELOOP): not the empty file looked at
            raise FilledFile(errno.EEXIST, "a file that is not empty is there", str(path)) from None
        break
    else:
        raise HeldFile(errno.EEXIST, "another command is writing it", str(path))
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise HeldFile(errno.EEXIST, "another command is writing it", str(path)) from None
        held = os.fstat(fd)
        if not (stat.S_ISREG(held.st_mode) and held.st_size == 0 and _is_there(path, held)):
            raise FilledFile(errno.EEXIST, "a file that is not empty is there", str(path))
        taken = _Taken(held, made=created)
        try:
            yield taken
        except BaseException:
            if taken.made:
                _remove_placeholder(path, taken.file)
            raise
    finally:
        os.close(fd)  # releases the lock


def _put(temporary: str, path: Path, taken: _Taken) -> None:
    """Put the written file ``temporary`` at ``path``, held by ``_name_taken``: the placeholder
    made there is removed and the file linked in its place (``_link_in``), which fails rather
    than replace a file put there meanwhile by a writer that took no lock (a ``mv`` over it); an
    empty file that was there is replaced if it is still that file, empty, and linked in the same
    way if it is gone (until review R92b it was renamed there, over whatever was put there since
    it was found gone). Raises ``FilledFile`` otherwise."""
    if taken.made:
        _remove_placeholder(path, taken.file)
        _link_in(temporary, path)
        return
    try:
        there = os.lstat(path)
    except FileNotFoundError:  # removed since by its owner
        _link_in(temporary, path)
        return
    if (there.st_dev, there.st_ino) != (taken.file.st_dev, taken.file.st_ino) or there.st_size != 0:
        raise FilledFile(errno.EEXIST, "a file was put there while it was written", str(path))
    os.replace(temporary, path)


def _link_in(temporary: str, path: Path) -> None:
    """Give the written file ``temporary`` the name ``path``, where nothing was a moment ago, and
    take its own name away: linked, which fails rather than replace a file put there since
    (``FilledFile``), or, on a file system without hard links (FAT, some network mounts), renamed
    if nothing is there."""
    try:
        os.link(temporary, path)
    except FileExistsError:
        raise FilledFile(errno.EEXIST, "a file was put there while it was written", str(path)) from None
    except OSError as exc:
        if exc.errno not in _NO_HARD_LINKS:
            raise
        if os.path.lexists(path):
            raise FilledFile(errno.EEXIST, "a file was put there while it was written", str(path)) from None
        os.replace(temporary, path)
        return
    os.unlink(temporary)


_NO_HARD_LINKS = frozenset({errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.ENOSYS})
"""What ``link`` raises on a file system that has no hard links (FAT's ``EPERM``)."""


def _is_there(path: Path, held: os.stat_result) -> bool:
    """Whether ``path`` names the file ``held`` is the status of."""
    try:
        there = os.lstat(path)
    except FileNotFoundError:
        return False
    return (there.st_dev, there.st_ino) == (held.st_dev, held.st_ino)


def _remove_placeholder(path: Path, placeholder: os.stat_result) -> None:
    """Remove the empty file ``_name_taken`` made at ``path``, if it is still that file, empty."""
    with contextlib.suppress(OSError):
        there = os.lstat(path)
        if (there.st_dev, there.st_ino) == (placeholder.st_dev, placeholder.st_ino) and there.st_size == 0:
            os.unlink(path)


def _refuse_more_than_one_key(path: Path, data: bytes, what: str) -> None:
    """Raise ``KeyFileError`` when ``data``, a file of a PEM block, holds more than that one block:
    a second block, or any text but white space before or after it (a UTF-8 byte order mark
    first aside). The PEM readers take the first block silently and skip what surrounds it, so two
    keys concatenated (or a pair in one file) would be read as one, and so was a PEM key with a
    did:key below it until review R84. The text is not quoted: it may be a key. Data without
    ``-----BEGIN`` is left to the reader, which refuses it."""
    if data.count(b"-----BEGIN") > 1:
        raise KeyFileError(f"{shown_path(path)}: holds more than one PEM block; give a file of one {what}")
    data = data.removeprefix(b"\xef\xbb\xbf")
    begin = data.find(b"-----BEGIN")
    if begin < 0:
        return
    end = data.find(b"-----END", begin)
    close = data.find(b"-----", end + len(b"-----END")) if end >= 0 else -1
    after = data[close + len(b"-----") :] if close >= 0 else b""
    if data[:begin].strip() or after.strip():
        raise KeyFileError(
            f"{shown_path(path)}: holds text outside its PEM block (a second key, a did:key, a note); "
            f"a key file holds one {what} and nothing else: give a file of the PEM block alone"
        )


_KEY_TEXT = re.compile(r"[A-Za-z0-9+/=_-]{40,}")
_KEY_SEPARATORS = re.compile(r"[\s\"'`:=,;()\[\]{}<>#$]+")
_DID_KEY = re.compile(r"did:key:z[1-9A-HJ-NP-Za-km-z]+(?:#z[1-9A-HJ-NP-Za-km-z]+)?")
_GROUPS = re.compile(r"[\s:,;-]+")
_FLAT_DROP = re.compile(r"0[xX]|\\x|[\s:,;\-\"'`\[\](){}=]")
_HEX64 = re.compile(r"[0-9a-fA-F]{64,}")
_NAME_PART = re.compile(r"(?:[a-z0-9_-]|[A-Z](?=[a-z]))+")
"""A part of a path of names: letters, digits, ``-`` and ``_``, each capital followed by a small
letter (``JohnDoe``, ``agent-keys_2``; not ``keyV2``). Each character is taken by one of two
alternatives, one at a time: ``(?:[A-Z]?[a-z]+|[0-9]+|[-_])+`` took the same parts, but a run of
small letters could be split into words in exponentially many ways, and it tried them all before
refusing a part that ends in ``+`` (seconds at 26 letters, review R88), judged on a client's
invocation ``iss`` before any signature check."""
_HEX = re.compile(r"[0-9a-fA-F]{40,}")


def _key_like(word: str) -> bool:
    """Whether ``word`` looks like key material rather than a name: 40 or more characters, all
    hex digits, or all base64 ones mixed as random bytes come out (four capitals and four small
    letters at least: a 43-character seed has fewer about once in a million). Directory and
    file names, words joined by ``-`` or ``_`` with a capital or two, are not."""
    word = word.removeprefix("0x").removeprefix("0X")
    if _KEY_TEXT.fullmatch(word) is None:
        return False
    if _HEX.fullmatch(word):
        return True
    if word.startswith("/") and all(_NAME_PART.fullmatch(part) for part in word.split("/") if part):
        return False  # an absolute path of CamelCase names (``/Users/JohnDoe/...``)
    upper = sum(c.isupper() for c in word)
    lower = sum(c.islower() for c in word)  # (words: a capital or two, mostly small letters)
    return upper >= 4 and lower >= 4


def _grouped_key(text: str) -> bool:
    """Whether ``text`` is key material written in groups: 64 or more hex digits once the
    separators, quotes, ``0x`` and ``\\x`` are taken out (``openssl``'s ``c8:c9:...``, a C array,
    a bytes repr, with a label or not), or base64 in groups of at most 8 characters."""
    if _HEX64.search(_FLAT_DROP.sub("", text)):  # 32 bytes or more in hex, however written
        return True
    short = [g for g in (g.strip("\"'`") for g in _GROUPS.split(text)) if 0 < len(g) <= 8]
    return len(short) > 4 and _key_like("".join(short))


def looks_like_key(text: str) -> bool:
    """Whether ``text`` looks like a key itself, judged by the text alone, as ``is_key_text``
    judges it before asking whether a file of that name exists. Where no path belongs (a did),
    this is the whole judgement: asking the file system would tell whoever sent the text which
    files exist on this host (``did_refusal`` did so for a client's invocation ``iss`` until
    review R86c)."""
    stripped = text.strip()
    return (
        "-----BEGIN" in stripped
        or "\n" in stripped
        or stripped.lstrip("\"'[ ").startswith("{")
        or any(_key_like(word.rstrip(".")) for word in _KEY_SEPARATORS.split(_DID_KEY.sub(" ", stripped)))
        or _grouped_key(stripped)
    )


def is_key_text(value: str | bytes | os.PathLike[str] | os.PathLike[bytes], base: Path | None = None) -> bool:
    """Whether ``value``, given where a key file's path (or a did:key) belongs, looks like a key
    itself and names no existing file (a relative one under ``base``, else the working
    directory): a PEM block or a part of one, more than one line, a JSON object or array (a
    JWK), or a word of 40 or more hex digits or base64 characters mixed as random bytes are
    (``_key_like``), words being split at blanks, quotes and the punctuation of labels and
    assignments (``"$(cat agent.key)"``, a secret mapped to an
    environment variable, a seed as tools print it, ``ed25519:SEED``, ``export KEY=SEED``,
    ``"d": "SEED",``). A did:key in it is not such a word. Such a value is never quoted in an
    error: it is likely a private key, and errors reach logs. A path whose names are words is
    not such text, nor is a file that exists, whatever its name (``looks_like_key`` judges the
    text alone)."""
    try:
        text = os.fsdecode(value)
    except (TypeError, ValueError):
        return False  # neither text, bytes nor a path: the caller's type check names it
    if not looks_like_key(text):
        return False
    try:
        return not os.path.lexists(base / text if base is not None else text)
    except (OSError, ValueError):  # a NUL character, a name too long: no file of that name
        return True


def refuse_key_text(value: object, where: str) -> None:
    """Raise ``KeyFileError`` naming ``where`` (a flag, a variable, a field) when ``value`` (text,
    bytes or a path) looks like a key itself (``is_key_text``), not quoting it."""
    if isinstance(value, str | bytes | os.PathLike) and is_key_text(value):
        raise KeyFileError(
            f"{where} names no file and looks like a key itself (PEM, base64 or hex text), not the "
            "path of a key file or a did:key: put the key in a file and give its path (the value is "
            "not shown; if it is a private key and was logged elsewhere, replace the key)"
        )


def shown_value(value: str, limit: int = 200) -> str:
    """``value`` quoted for an error (its first ``limit`` characters), unless it looks like a key's
    own text (``is_key_text``): then a placeholder that says why it is not shown."""
    return "(not shown: it looks like a key itself)" if is_key_text(value) else repr(value[:limit])


def _not_a_private_key(data: bytes) -> str:
    """Why ``data``, which no PEM private key reader took, is no private key, for an error that
    names what it is when it is a key of the wrong kind: a public key (PEM, or a did:key as
    ``NAME.pub`` holds it) given where its private key belongs is told so, not called malformed."""
    stripped = data.removeprefix(b"\xef\xbb\xbf").strip()
    if not stripped:  # until review R74 "not a PKCS#8 PEM private key", as though of a wrong format
        return "empty (or only white space): no private key in it; give the private key (NAME.key)"
    public = stripped.startswith(b"did:key:")
    if not public and b"-----BEGIN" in stripped:
        with contextlib.suppress(ValueError, UnsupportedAlgorithm):
            serialization.load_pem_public_key(stripped)
            public = True
    if public:
        return "a public key, not a private key; give the private key (NAME.key, not NAME.pub)"
    return "not a PKCS#8 PEM private key"


def _algorithm(key: object) -> str:
    """The kind of a key that is not Ed25519, as an error names it, with its article (``an RSA``,
    ``an EC (secp256r1)``, ``an X25519``), for either half of a pair."""
    for kinds, name in _ALGORITHMS:
        if isinstance(key, kinds):
            curve = getattr(key, "curve", None)
            return f"{name} ({curve.name})" if curve is not None else name
    return "a non-Ed25519"


_ALGORITHMS: tuple[tuple[tuple[type, ...], str], ...] = (
    ((rsa.RSAPrivateKey, rsa.RSAPublicKey), "an RSA"),
    ((ec.EllipticCurvePrivateKey, ec.EllipticCurvePublicKey), "an EC"),
    ((dsa.DSAPrivateKey, dsa.DSAPublicKey), "a DSA"),
    ((ed448.Ed448PrivateKey, ed448.Ed448PublicKey), "an Ed448"),
    ((x25519.X25519PrivateKey, x25519.X25519PublicKey), "an X25519"),
    ((x448.X448PrivateKey, x448.X448PublicKey), "an X448"),
)
"""The key kinds ``cryptography`` reads from PEM other than Ed25519, as errors name them."""


def load_signing_key(path: Path | str) -> SigningKey:
    """Load an Ed25519 private key file (PKCS#8 PEM).

    Raises ``KeyFileError`` for a file that cannot be read, is not a regular file (a FIFO is
    refused at once, never waited on), holds more than ``MAX_KEY_FILE_BYTES``, does not hold
    exactly one Ed25519 private key and nothing else (``_refuse_more_than_one_key``), is readable or writable by group or others, is owned by
    another user than this process's or root, or lies in a directory others may change
    (``unsafe_directory``: one group or others may write, not sticky, or one another user owns,
    on the path as given or the file's real one). What the file
    holds is judged first, so that a public key given in its place is called that, not a private
    key to ``chmod``.
    """
    refuse_key_text(path, "the private key's path")
    path = as_path(path, "private key", KeyFileError)
    data, status = read_regular_file(path, MAX_KEY_FILE_BYTES, "private key", KeyFileError)
    _refuse_more_than_one_key(path, data, "private key")
    try:
        private = serialization.load_pem_private_key(data, password=None)
    except TypeError as exc:  # cryptography's "Password was not given but private key is encrypted"
        raise KeyFileError(
            f"{shown_path(path)}: an encrypted private key; agentgate reads unencrypted PKCS#8 PEM "
            "keys only (as `agentgate keys new` writes them): decrypt it into a new file first "
            "(openssl pkey -in FILE -out NEW.key; chmod 600 NEW.key)"
        ) from exc
    except (ValueError, UnsupportedAlgorithm) as exc:
        raise KeyFileError(f"{shown_path(path)}: {_not_a_private_key(data)}") from exc
    if not isinstance(private, Ed25519PrivateKey):
        raise KeyFileError(
            f"{shown_path(path)}: not an Ed25519 private key but {_algorithm(private)} one; agentgate signs "
            "with Ed25519 keys only (`agentgate keys new` makes one)"
        )
    mode = status.st_mode
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise KeyFileError(
            f"{shown_path(path)}: private key is accessible by others (mode {stat.S_IMODE(mode):04o}); run chmod 600 {shown_path(path)}"
        )
    if status.st_uid not in (os.geteuid(), 0):
        # Readable here only by root's right to read any file: its owner may chmod or rewrite it
        # (and so choose the key this process signs with).
        raise KeyFileError(
            f"{shown_path(path)}: private key is owned by another user (uid {status.st_uid}), who may change "
            f"it; run chown {os.geteuid()} {shown_path(path)}"
        )
    unsafe = unsafe_directory(path)
    if unsafe is not None:
        raise KeyFileError(f"{shown_path(path)}: private key is in a directory others may change: {unsafe}")
    return SigningKey(private.private_bytes_raw())


def unsafe_directory(path: Path) -> str | None:
    """Why a file at ``path`` could be replaced by another user through a directory on its way,
    as ssh's StrictModes judges a key's directories; ``None`` when it cannot. Each directory the
    path passes through counts (``_walked``): those of the path as given (a link in one of them
    can be pointed elsewhere), those in which each link of a chain of links lies (until review
    R70 a link in the middle of a chain, ``keys -> hop/a -> real``, was not judged: ``hop`` was
    on neither the given path nor the real one) and those of the file it reaches, up to ``/``:
    one that others may
    write, or its group unless that is its owner's private group (``_private_group``: a user's
    own group, as a umask of 002 makes directories 0775 in), or a user or group its POSIX ACL
    lets write (``_other_writers``), unless it is sticky (as ``/tmp``,
    1777: there only an entry's owner may rename or remove it), or one owned by another user
    than this process's or root (its owner may replace any entry in it). The answer names the
    directory, what is wrong and the fix."""
    try:
        given = Path(os.getcwd(), path) if not os.path.isabs(path) else Path(path)
    except OSError as exc:  # the working directory was removed: its chain cannot be told
        return f"the working directory, which cannot be found ({exc.strerror}); cd to one that exists"
    seen: set[tuple[int, int]] = set()
    for directory in (*_walked(given), *given.parents, *Path(os.path.realpath(given)).parents):
        try:
            status = os.stat(directory)
        except OSError:
            continue  # not reachable now: the file was read through it, so it is judged by its real path
        if (status.st_dev, status.st_ino) in seen:
            continue
        seen.add((status.st_dev, status.st_ino))
        if status.st_uid not in (os.geteuid(), 0):
            return (
                f"{shown_path(directory)}: owned by uid {status.st_uid}, who may replace any file in it; "
                "move the key into a directory of your own (mkdir -m 700 DIR makes one)"
            )
        if status.st_mode & stat.S_ISVTX:
            continue  # sticky (as /tmp): only an entry's owner may rename or remove it there
        writers = _other_writers(directory, status)
        if writers is not None:
            return f"{shown_path(directory)} (mode {stat.S_IMODE(status.st_mode):04o}): {writers}"
    return None


def _other_writers(directory: Path, status: os.stat_result) -> str | None:
    """Who other than the owner of ``directory`` (whose status is ``status``) may write in it, and
    the fix, for ``unsafe_directory``'s answer; ``None`` for nobody. Others, by the mode; its group,
    by the mode, unless that is the owner's private group (``_private_group``); and, where it has
    a POSIX ACL (``_acl_entries``), each user or group an entry of it lets write (``_acl_writer``):
    with such entries the mode's group bits show the ACL's mask, not the group's own permissions,
    so a directory of its owner's private group and ``user:nobody:rwx`` looked like one only its
    group may write (until review R84 it passed)."""
    writer: str | None
    try:
        entries = _acl_entries(directory)
    except ValueError:
        entries, writer = [], "someone (an ACL in a format agentgate does not read)"
    else:
        writer = None if entries is None else _acl_writer(entries, status)
    if writer is not None:
        return (
            f"its POSIX ACL lets {writer} rename files in it; run setfacl -b {shown_path(directory)} "
            f"(or chmod g-w {shown_path(directory)}, which masks the entry)"
        )
    mode = status.st_mode
    if mode & stat.S_IWOTH or (
        entries is None and mode & stat.S_IWGRP and not _private_group(status.st_gid, status.st_uid)
    ):
        return f"group or others may rename files in it; run chmod go-w {shown_path(directory)}"
    return None


_ACL_XATTR = "system.posix_acl_access"
"""Where Linux keeps a file's POSIX ACL: a little-endian version (2), then per entry (a line of
``getfacl``'s) its tag and permissions (16 bits each) and its uid or gid (32 bits)."""
_ACL_USER, _ACL_GROUP_OBJ, _ACL_GROUP, _ACL_MASK = 0x02, 0x04, 0x08, 0x10
_ACL_WRITE = 0x02


def _acl_entries(directory: Path) -> list[tuple[int, int, int]] | None:
    """The entries (tag, permissions, uid or gid) of the POSIX ACL of ``directory``; ``None``
    where it has none, where the system or the file system keeps none (no ``os.getxattr``: not
    Linux; no extended attributes there), or where it cannot be read (``os.stat`` could, so the
    mode is judged). Raises ``ValueError`` for an ACL of a format this reader does not know."""
    getxattr = getattr(os, "getxattr", None)
    if getxattr is None:
        return None
    try:
        raw: bytes = getxattr(directory, _ACL_XATTR)
    except OSError:  # ENODATA (none), ENOTSUP (no extended attributes), or gone since os.stat
        return None
    if len(raw) < 4 or (len(raw) - 4) % 8 or int.from_bytes(raw[:4], "little") != 2:
        raise ValueError("not a version 2 POSIX ACL")
    return [
        (
            int.from_bytes(raw[at : at + 2], "little"),
            int.from_bytes(raw[at + 2 : at + 4], "little"),
            int.from_bytes(raw[at + 4 : at + 8], "little"),
        )
        for at in range(4, len(raw), 8)
    ]


def _acl_writer(entries: list[tuple[int, int, int]], status: os.stat_result) -> str | None:
    """Whom the ACL ``entries`` of the directory whose status is ``status`` let write in it, other
    than its owner, root and this process's user; ``None`` for nobody. A named user's entry, a
    named group's and the owning group's count with the write bit the mask leaves them; a group
    that is the owner's private group (``_private_group``) may write, as without an ACL."""
    mask = next((perms for tag, perms, _ in entries if tag == _ACL_MASK), 0o7)
    for tag, perms, who in entries:
        if not perms & mask & _ACL_WRITE:
            continue
        if tag == _ACL_USER and who not in (status.st_uid, os.geteuid(), 0):
            return f"user uid {who}"
        if tag == _ACL_GROUP and not _private_group(who, status.st_uid):
            return f"group gid {who}"
        if tag == _ACL_GROUP_OBJ and not _private_group(status.st_gid, status.st_uid):
            return f"its group (gid {status.st_gid})"
    return None


_MAX_LINKS = 40
"""Links followed on one path before the walk gives up, as Linux's ``ELOOP`` limit."""


def _walked(path: Path) -> list[Path]:
    """The directories in which a name is looked up on the way from ``/`` to the file at the
    absolute ``path``, each link followed where it lies (a relative target read from the
    directory holding the link, ``..`` as the kernel reads it, from the directory reached):
    nearest the file first. No link is left in them, so ``os.stat`` judges each as it is. The
    walk stops at a part that cannot be read, and after ``_MAX_LINKS`` links (a loop): the rest
    is judged by the path as given and the real path."""
    parts = list(path.parts)
    current = Path(path.anchor)
    walked: list[Path] = []
    links = 0
    while parts:
        name = parts.pop(0)
        if name == path.anchor or name in ("", "."):
            continue
        walked.append(current)
        if name == "..":
            current = current.parent
            continue
        step = current / name
        try:
            target = os.readlink(step)
        except OSError:  # not a link (or not there): the walk goes on into it as it is
            current = step
            continue
        links += 1
        if links > _MAX_LINKS:
            break
        if os.path.isabs(target):
            current = Path(Path(target).anchor)
        parts[:0] = Path(target).parts
    return walked[::-1]


def load_public_key(spec: str | Path) -> PublicKey:
    """A public key from a ``did:key`` string, or from a file holding one (or a PEM public key).

    Only Ed25519 keys: raises ``KeyFileError`` for a PEM key of another algorithm (RSA, X25519...),
    a file that cannot be read, is not a regular file or holds more than ``MAX_KEY_FILE_BYTES``,
    a file of more than one key (two dids, two PEM blocks, a PEM key with any text beside its
    block: which one is meant is not for the parser to pick), and for anything that is neither a ``did:key`` nor a PEM public key. An error
    quotes at most the one line of a did, never the rest of a file (a private key pasted below).
    """
    if not isinstance(spec, str):
        spec = as_path(spec, "public key", KeyFileError)  # None or a key object: no TypeError
    text = str(spec).strip()
    if text.startswith("did:"):
        return PublicKey.from_did(text)
    refuse_key_text(text, "the public key given")
    path = Path(spec)
    data, _ = read_regular_file(path, MAX_KEY_FILE_BYTES, "public key", KeyFileError)
    stripped = data.removeprefix(b"\xef\xbb\xbf").strip()  # a UTF-8 BOM (an editor's), as a PEM file may have
    if not stripped:  # until review R74 "neither a did:key nor a PEM public key", as though of a wrong format
        raise KeyFileError(
            f"{shown_path(path)}: empty (or only white space): no public key in it; give a file of one "
            "did:key or PEM public key (NAME.pub)"
        )
    if stripped.startswith(b"did:"):
        if len(stripped.splitlines()) > 1:
            raise KeyFileError(
                f"{shown_path(path)}: holds more than one line; a public key file holds one did:key"
            )
        try:
            return PublicKey.from_did(stripped.decode("ascii", errors="replace"))
        except KeyFileError as exc:  # which of several --trust files is wrong
            raise KeyFileError(f"{shown_path(path)}: {exc}") from exc
    _refuse_more_than_one_key(path, stripped, "public key")
    try:
        loaded = serialization.load_pem_public_key(stripped)
    except (ValueError, TypeError, UnsupportedAlgorithm) as exc:
        if b"PRIVATE KEY-----" in stripped:  # never quoted: it is a secret
            raise KeyFileError(
                f"{shown_path(path)}: a private key, where its public key belongs; give the public "
                "key (NAME.pub or its did:key), and keep the private key to its holder"
            ) from exc
        raise KeyFileError(f"{shown_path(path)}: neither a did:key nor a PEM public key") from exc
    if not isinstance(loaded, Ed25519PublicKey):
        raise KeyFileError(f"{shown_path(path)}: not an Ed25519 public key but {_algorithm(loaded)} one")
    return PublicKey(loaded.public_bytes_raw())


class Keyring:
    """Maps principal ids (``did:key``) to their public keys; verification keys are cached.

    Only the keys added are held (and ``in`` says which): an unknown id is decoded on each
    lookup, so callers presenting fresh ids cannot grow the ring or join it."""

    def __init__(self, keys: list[PublicKey] | None = None) -> None:
        self._keys: dict[str, PublicKey] = {}
        for key in keys or []:
            self.add(key)

    def add(self, key: PublicKey) -> None:
        self._keys[key.did] = key

    def get(self, did: str) -> PublicKey:
        """The key for ``did``; a ``did:key`` is self-describing, so unknown ones are decoded.

        Raises ``KeyFileError`` for anything that is not an Ed25519 ``did:key`` (a list or a
        number included)."""
        try:
            key = self._keys.get(did)
        except TypeError:  # unhashable: not a did
            raise _refused_did("not an Ed25519 did:key", did) from None
        return key if key is not None else PublicKey.from_did(did)

    def __contains__(self, did: object) -> bool:
        """Whether the key of ``did`` was added; ``False`` for anything that is no did, an
        unhashable list included (until review R84 a ``TypeError``)."""
        try:
            return did in self._keys
        except TypeError:
            return False
