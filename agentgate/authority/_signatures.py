"""Ed25519 signatures of grants, and the keys they are checked under.

A did's key is decoded once (a bounded cache: the key is a pure function of the string); libsodium
refuses non-canonical S and small-order keys. A verifier's trust anchors are the root keys it
was given, each decoded once, when configured: configuration, never a cache.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable
from typing import Any

import nacl.bindings
import nacl.exceptions

from agentgate.authority._encoding import did_public_key
from agentgate.errors import InvalidSignature, TokenFormatError
from agentgate.keys import SIGNATURE_SIZE, PublicKey, SigningKey

_KEY_CACHE: dict[str, bytes] = {}


def _cached_key(did: str) -> bytes:
    """The 32-byte key decoded from ``did``, once per string (a bounded cache: the key is a pure
    function of the string, so a cached one is exactly what decoding it again gives). Raises
    ``TokenFormatError`` for a string that is not an Ed25519 did:key."""
    key = _KEY_CACHE.get(did)
    if key is None:
        if len(_KEY_CACHE) >= 4096:
            _KEY_CACHE.clear()
        key = _KEY_CACHE[did] = did_public_key(did)
    return key


def verify_signature(did: str, message: bytes, signature: bytes, key: bytes | None = None) -> None:
    """Raise ``InvalidSignature`` unless ``signature`` is the Ed25519 signature of ``message`` by ``did``.

    ``key``, when given, is the key already decoded from ``did`` (a configured trust anchor's).
    Otherwise keys are decoded from the did once (a bounded cache: the key is a pure function of
    the string). libsodium's ``crypto_sign_open`` refuses non-canonical S and small-order keys;
    the length is checked here first.
    """
    if key is None:
        try:
            key = _cached_key(did)
        except TokenFormatError as exc:
            raise InvalidSignature(f"{did[:80]!r} is not a usable Ed25519 key") from exc
    if len(signature) != SIGNATURE_SIZE:
        raise InvalidSignature(f"an Ed25519 signature is {SIGNATURE_SIZE} bytes, got {len(signature)}")
    if not _sign_open(signature + message, key):
        raise InvalidSignature(f"signature does not verify under {did}")


def _bindings_open(signed: bytes, key: bytes) -> bool:
    try:
        nacl.bindings.crypto_sign_open(signed, key)
    except nacl.exceptions.CryptoError:
        return False
    return True


def _load_sign_open() -> Callable[[bytes, bytes], bool]:
    """Whether ``signed`` (signature then message) verifies under the 32-byte Ed25519 ``key``.

    libsodium's ``crypto_sign_open`` (the same function ``nacl.bindings.crypto_sign_open``
    wraps), called through PyNaCl's own cffi module with NULL for both outputs, which libsodium
    allows: no message buffer is allocated and nothing is copied back, saving a few microseconds
    per signature. Where that module is not importable, the PyNaCl binding is used.
    """
    try:
        sodium: Any = importlib.import_module("nacl._sodium")
        sign_open, null = sodium.lib.crypto_sign_open, sodium.ffi.NULL
    except (ImportError, AttributeError):  # pragma: no cover - PyNaCl without its cffi module
        return _bindings_open

    def open_signed(signed: bytes, key: bytes) -> bool:
        return bool(sign_open(null, null, signed, len(signed), key) == 0)

    return open_signed


_sign_open = _load_sign_open()


class TrustAnchors(frozenset[str]):
    """A verifier's trust anchors (root did:keys), with each key decoded once, when configured.

    A set of did strings like any other (chain caches key on it); ``public_keys`` spares
    verification the decoding of the root issuer's did, as a verifier configured with raw keys
    would. Configuration, not a cache: it never holds anything the verifier was not given.
    """

    public_keys: dict[str, bytes]

    def __new__(cls, public_keys: dict[str, bytes]) -> TrustAnchors:
        anchors = super().__new__(cls, public_keys)
        anchors.public_keys = public_keys
        return anchors


def _not_an_anchor(value: object) -> str:
    if isinstance(value, SigningKey):
        return "trust anchor: a private key (SigningKey); a verifier trusts its public key (key.public)"
    return f"trust anchors are public keys or did:key strings (one, or a list), got {type(value).__name__}"


def _anchors(trusted: PublicKey | str | Iterable[PublicKey | str]) -> TrustAnchors:
    """The trust anchors, each did checked strictly; raises ``TokenFormatError`` naming a bad one,
    and for what is neither an anchor nor a collection of them (``None``; a lone ``SigningKey``,
    which is not iterable: a verifier is configured with public keys, though a list's members
    may be signing keys, whose public halves are taken)."""
    items: Iterable[PublicKey | str]
    if isinstance(trusted, PublicKey | str):
        items = [trusted]
    elif isinstance(trusted, Iterable) and not isinstance(trusted, bytes | bytearray | SigningKey):
        items = trusted
    else:
        raise TokenFormatError(_not_an_anchor(trusted))
    public_keys: dict[str, bytes] = {}
    for item in items:
        if isinstance(item, PublicKey | SigningKey):
            key = item if isinstance(item, PublicKey) else item.public
            public_keys[key.did] = key.raw
            continue
        try:
            public_keys[item] = did_public_key(item)
        except TokenFormatError as exc:
            raise TokenFormatError(f"trust anchor: {exc}") from None
    return TrustAnchors(public_keys)
