"""Ed25519 keys and ``did:key`` identities.

Signing and verification go through PyNaCl (libsodium): on this project's machines it verifies
about twice as fast as ``cryptography`` (benchmarks/authority.py measures both), and libsodium
rejects non-canonical signatures (S >= L) and small-order public keys by itself. Key *files* are
written with ``cryptography`` as PKCS#8 PEM so that OpenSSL and other tools can read them.

A principal is identified by ``did:key:z...``: the multicodec prefix ``0xed 0x01`` followed by
the 32-byte public key, base58btc-encoded with the multibase prefix ``z``.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass, field
from pathlib import Path

import base58
import nacl.exceptions
import nacl.signing
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from agentgate.errors import InvalidSignature, KeyFileError

_ED25519_MULTICODEC = b"\xed\x01"
_DID_PREFIX = "did:key:z"
SIGNATURE_SIZE = 64
PUBLIC_KEY_SIZE = 32


def did_from_public_key(public_key: bytes) -> str:
    """The ``did:key`` identifier of a raw 32-byte Ed25519 public key."""
    if len(public_key) != PUBLIC_KEY_SIZE:
        raise KeyFileError(f"an Ed25519 public key is {PUBLIC_KEY_SIZE} bytes, got {len(public_key)}")
    return _DID_PREFIX + base58.b58encode(_ED25519_MULTICODEC + public_key).decode("ascii")


def public_key_from_did(did: str) -> bytes:
    """The raw public key inside an Ed25519 ``did:key``; raises ``KeyFileError`` on anything else."""
    if not isinstance(did, str) or not did.startswith(_DID_PREFIX) or len(did) > 64:
        raise KeyFileError(f"not an Ed25519 did:key: {did[:80]!r}")
    try:
        raw = base58.b58decode(did[len(_DID_PREFIX) :])
    except ValueError as exc:
        raise KeyFileError(f"did:key is not valid base58btc: {did[:80]!r}") from exc
    if len(raw) != 2 + PUBLIC_KEY_SIZE or raw[:2] != _ED25519_MULTICODEC:
        raise KeyFileError(f"did:key does not hold an Ed25519 public key: {did[:80]!r}")
    public_key = raw[2:]
    if did_from_public_key(public_key) != did:  # rejects non-canonical base58 spellings
        raise KeyFileError(f"did:key is not in canonical form: {did[:80]!r}")
    return public_key


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
        """Return if ``signature`` is this key's signature of ``message``; else ``InvalidSignature``."""
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
        if len(self.seed) != 32:
            raise KeyFileError("an Ed25519 private key seed is 32 bytes")
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
        return bytes(self._signer.sign(message).signature)


def save_key(key: SigningKey, directory: Path, name: str) -> tuple[Path, Path]:
    """Write ``DIR/NAME.key`` (PKCS#8 PEM, mode 0600, never overwritten) and ``DIR/NAME.pub`` (did:key).

    The private file is created with ``O_EXCL`` and mode 0600 in one call, so there is no moment
    when it exists with wider permissions.
    """
    if not name or "/" in name or name.startswith(".") or "\x00" in name:
        raise KeyFileError(f"invalid key name {name!r}: use a plain file name")
    directory.mkdir(parents=True, exist_ok=True)
    key_path, pub_path = directory / f"{name}.key", directory / f"{name}.pub"
    pem = Ed25519PrivateKey.from_private_bytes(key.seed).private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    try:
        fd = os.open(key_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError as exc:
        raise KeyFileError(f"{key_path} already exists; refusing to overwrite a key") from exc
    with os.fdopen(fd, "wb") as out:
        out.write(pem)
    pub_path.write_text(key.did + "\n")
    return key_path, pub_path


def load_signing_key(path: Path | str) -> SigningKey:
    """Load a private key file; refuses one that group or others can read or write."""
    path = Path(path)
    try:
        mode = path.stat().st_mode
        data = path.read_bytes()
    except OSError as exc:
        raise KeyFileError(f"{path}: cannot read private key: {exc.strerror}") from exc
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise KeyFileError(
            f"{path}: private key is accessible by others (mode {stat.S_IMODE(mode):04o}); run chmod 600 {path}"
        )
    try:
        private = serialization.load_pem_private_key(data, password=None)
    except (ValueError, TypeError) as exc:
        raise KeyFileError(f"{path}: not a PKCS#8 PEM private key") from exc
    if not isinstance(private, Ed25519PrivateKey):
        raise KeyFileError(f"{path}: not an Ed25519 private key")
    return SigningKey(private.private_bytes_raw())


def load_public_key(spec: str | Path) -> PublicKey:
    """A public key from a ``did:key`` string, or from a file holding one (or a PEM public key)."""
    text = str(spec).strip()
    if text.startswith("did:"):
        return PublicKey.from_did(text)
    path = Path(spec)
    try:
        data = path.read_bytes()[:8192]
    except OSError as exc:
        raise KeyFileError(f"{path}: cannot read public key: {exc.strerror}") from exc
    stripped = data.strip()
    if stripped.startswith(b"did:"):
        return PublicKey.from_did(stripped.decode("ascii", errors="replace"))
    try:
        loaded = serialization.load_pem_public_key(stripped)
    except (ValueError, TypeError) as exc:
        raise KeyFileError(f"{path}: neither a did:key nor a PEM public key") from exc
    raw = loaded.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return PublicKey(raw)


class Keyring:
    """Maps principal ids (``did:key``) to their public keys; verification keys are cached."""

    def __init__(self, keys: list[PublicKey] | None = None) -> None:
        self._keys: dict[str, PublicKey] = {}
        for key in keys or []:
            self.add(key)

    def add(self, key: PublicKey) -> None:
        self._keys[key.did] = key

    def get(self, did: str) -> PublicKey:
        """The key for ``did``; a ``did:key`` is self-describing, so unknown ones are decoded."""
        key = self._keys.get(did)
        if key is None:
            key = PublicKey.from_did(did)
            self._keys[did] = key
        return key

    def __contains__(self, did: object) -> bool:
        return did in self._keys
