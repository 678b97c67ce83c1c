"""Ed25519 keys, did:key identities and key files."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from agentgate.errors import InvalidSignature, KeyFileError
from agentgate.keys import (
    Keyring,
    PublicKey,
    SigningKey,
    load_public_key,
    load_signing_key,
    public_key_from_did,
    save_key,
)


def test_did_key_round_trips_and_matches_the_spec_prefix() -> None:
    key = SigningKey.generate()
    assert key.did.startswith("did:key:z6Mk")  # Ed25519 multicodec 0xed01 in base58btc
    assert public_key_from_did(key.did) == key.public.raw


def test_sign_verify_and_reject_other_keys_and_tampering() -> None:
    a, b = SigningKey.generate(), SigningKey.generate()
    sig = a.sign(b"msg")
    a.public.verify(b"msg", sig)
    with pytest.raises(InvalidSignature):
        b.public.verify(b"msg", sig)
    with pytest.raises(InvalidSignature):
        a.public.verify(b"msg!", sig)
    for bad in (b"", sig[:63], sig + b"\x00", bytes(64)):
        assert not a.public.is_valid(b"msg", bad)


def test_non_canonical_s_is_rejected() -> None:
    """S + L verifies in lax implementations; libsodium must refuse it."""
    key = SigningKey.generate()
    sig = key.sign(b"msg")
    order = 2**252 + 27742317777372353535851937790883648493
    s = int.from_bytes(sig[32:], "little") + order
    forged = sig[:32] + s.to_bytes(32, "little")
    assert not key.public.is_valid(b"msg", forged)


def test_key_files_are_private_and_loaded_back(tmp_path: Path) -> None:
    key = SigningKey.generate()
    key_path, pub_path = save_key(key, tmp_path, "alice")
    assert (key_path.stat().st_mode & 0o777) == 0o600
    assert load_signing_key(key_path).did == key.did
    assert load_public_key(pub_path).did == key.did
    assert load_public_key(key.did).did == key.did
    with pytest.raises(KeyFileError):
        save_key(key, tmp_path, "alice")  # never overwrites


def test_a_key_readable_by_others_is_refused(tmp_path: Path) -> None:
    key_path, _ = save_key(SigningKey.generate(), tmp_path, "bob")
    os.chmod(key_path, 0o644)
    with pytest.raises(KeyFileError, match="chmod 600"):
        load_signing_key(key_path)


@pytest.mark.parametrize(
    "content", [b"", b"garbage", b"-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n"]
)
def test_malformed_key_files_are_typed_errors(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "k.key"
    path.write_bytes(content)
    os.chmod(path, 0o600)
    with pytest.raises(KeyFileError):
        load_signing_key(path)
    with pytest.raises(KeyFileError):
        load_signing_key(tmp_path / "missing.key")


@pytest.mark.parametrize(
    "did", ["did:key:zzz", "did:web:example.com", "did:key:z6Mk" + "1" * 44, "did:key:z" + "0OIl" * 5]
)
def test_malformed_dids_are_refused(did: str) -> None:
    with pytest.raises(KeyFileError):
        PublicKey.from_did(did)


def test_keyring_resolves_known_and_self_describing_ids() -> None:
    known, other = SigningKey.generate(), SigningKey.generate()
    ring = Keyring([known.public])
    assert known.did in ring
    assert ring.get(other.did).raw == other.public.raw


def test_a_private_key_owned_by_another_user_is_refused(tmp_path: Path) -> None:
    # Mode 0600 but another user's: readable here only by root's right to read any file, and its
    # owner may rewrite it. Refused, naming the owner; the process's own (or root's) is loaded.
    import os

    from agentgate.errors import KeyFileError
    from agentgate.keys import SigningKey, load_signing_key, save_key

    if os.geteuid() != 0:
        pytest.skip("only root can read a 0600 file of another user, or chown one")
    private, _public = save_key(SigningKey.generate(), tmp_path, "agent")
    assert load_signing_key(private).did
    os.chown(private, 4242, 4242)
    with pytest.raises(KeyFileError, match=r"owned by another user \(uid 4242\).*chown 0"):
        load_signing_key(private)
    os.chown(private, 0, 0)
    assert load_signing_key(private).did
