"""The public audit API refuses an argument of the wrong type with ``InputError`` naming it.

Until review R90 (R89's ``given_text`` covered only the note and bundle text): raw key bytes or
``None`` as ``public_key`` (``verify_bundle``, ``open_checkpoint``, ``verifier_key``) failed with a
bare ``AttributeError``; a ``str`` leaf, root or proof hash, or ``proof=None``, given to
``verify_inclusion`` or ``verify_consistency`` with a bare ``TypeError`` (or, for
``verify_consistency(proof=None)``, as an empty proof: tampering); and
``AuditLog.accept_repair(1, by=None, ...)`` with a bare ``AttributeError``. A hash of the wrong
length is still the proof's fault, ``TamperDetected``.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from agentgate.audit import (
    leaf_hash,
    open_checkpoint,
    sign_checkpoint,
    verifier_key,
    verify_bundle,
    verify_consistency,
    verify_inclusion,
)
from agentgate.audit.note import Checkpoint
from agentgate.errors import InputError, TamperDetected
from agentgate.keys import SigningKey
from agentgate.store import SQLiteStore
from agentgate.store.audit import AuditLog

KEY = SigningKey(b"\x07" * 32)
ORIGIN = "r90.example/audit"
H = b"h" * 32


@pytest.fixture(scope="module")
def signed(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    """A checkpoint note and a proof bundle of entry 1 of a log of three entries."""
    path: Path = tmp_path_factory.mktemp("r90") / "agentgate.db"
    with SQLiteStore(path) as store:
        log = AuditLog(store, KEY, ORIGIN)
        log.append_many([{"kind": "deny", "principal": "did:key:zAlice"}] * 3)
        return log.checkpoint(), log.prove(1).text()


@pytest.mark.parametrize(
    ("call", "said"),
    [
        (
            lambda note, bundle: verify_bundle(bundle, KEY.public.raw),  # type: ignore[arg-type]
            "public_key must be a PublicKey (agentgate.keys), got bytes: wrap the 32 raw key bytes as PublicKey(raw)",
        ),
        (
            lambda note, bundle: open_checkpoint(note, None),  # type: ignore[arg-type]
            "public_key must be a PublicKey (agentgate.keys), got NoneType",
        ),
        (
            lambda note, bundle: open_checkpoint(note, KEY.public, previous_keys=[KEY.public, "k"]),  # type: ignore[list-item]
            "previous_keys[1] must be a PublicKey (agentgate.keys), got str",
        ),
        (
            lambda note, bundle: verify_bundle(bundle, KEY.public, ORIGIN.encode()),  # type: ignore[arg-type]
            "origin must be a log origin as text (str), got bytes: decode the bytes (a file read in "
            "binary mode) as UTF-8",
        ),
        (
            lambda note, bundle: verifier_key(ORIGIN, None),  # type: ignore[arg-type]
            "public_key must be a PublicKey (agentgate.keys), got NoneType",
        ),
        (
            lambda note, bundle: sign_checkpoint(Checkpoint(ORIGIN, 1, H), KEY.public),  # type: ignore[arg-type]
            "key must be a SigningKey (agentgate.keys), got PublicKey",
        ),
    ],
    ids=[
        "raw-key-bytes",
        "no-key",
        "previous-key-text",
        "origin-bytes",
        "verifier-key-none",
        "public-key-signs",
    ],
)
def test_keys_and_origins_of_the_wrong_type_are_named(
    signed: tuple[str, str], call: Callable[[str, str], object], said: str
) -> None:
    with pytest.raises(InputError) as refused:
        call(*signed)
    assert str(refused.value) == said


@pytest.mark.parametrize(
    ("call", "said"),
    [
        (lambda: verify_inclusion("a" * 32, 0, 2, [H], H), "leaf must be a hash (bytes), got str"),  # type: ignore[arg-type]
        (
            lambda: verify_inclusion(H, 0, 2, None, H),
            "proof must be a sequence of hashes (bytes), got NoneType",
        ),  # type: ignore[arg-type]
        (lambda: verify_inclusion(H, 0, 2, ["x" * 32], H), "proof[0] must be a hash (bytes), got str"),
        (lambda: verify_inclusion(H, 0, 2, [H], "r" * 32), "root must be a hash (bytes), got str"),  # type: ignore[arg-type]
        (lambda: verify_inclusion(H, 0, 2, H, H), "proof must be a sequence of hashes (bytes), got bytes"),
        (lambda: verify_consistency(1, 2, ["x" * 32], H, H), "proof[0] must be a hash (bytes), got str"),
        (
            lambda: verify_consistency(1, 2, None, H, H),
            "proof must be a sequence of hashes (bytes), got NoneType",
        ),  # type: ignore[arg-type]
        (lambda: verify_consistency(1, 2, [H], None, H), "root1 must be a hash (bytes), got NoneType"),  # type: ignore[arg-type]
    ],
    ids=[
        "leaf-str",
        "proof-none",
        "proof-item-str",
        "root-str",
        "proof-bytes",
        "consistency-item-str",
        "consistency-proof-none",
        "consistency-root-none",
    ],
)
def test_merkle_hashes_of_the_wrong_type_are_named(call: Callable[[], object], said: str) -> None:
    with pytest.raises(InputError) as refused:
        call()
    assert str(refused.value) == f"Merkle proof check: {said}"


def test_leaf_hash_of_text_is_refused_and_a_short_hash_is_still_tampering() -> None:
    with pytest.raises(InputError, match="leaf_hash: entry must be bytes, got str"):
        leaf_hash("entry")  # type: ignore[arg-type]
    with pytest.raises(TamperDetected, match="proof hash 0 is 31 bytes"):
        verify_inclusion(H, 0, 2, [b"x" * 31], H)
    assert leaf_hash(bytearray(b"e")) == leaf_hash(b"e")


@pytest.mark.parametrize(
    ("repair", "by", "reason", "said"),
    [
        (1, None, "checked", "accepting a repair: by must be text (str), got NoneType"),
        (1, "ops", b"checked", "accepting a repair: reason must be text (str), got bytes"),
        (
            True,
            "ops",
            "checked",
            "repair must be a whole number from -9223372036854775808 to 9223372036854775807, got True",
        ),
    ],
    ids=["by-none", "reason-bytes", "repair-bool"],
)
def test_accept_repair_names_an_argument_of_the_wrong_type(
    tmp_path: Path, repair: object, by: object, reason: object, said: str
) -> None:
    with SQLiteStore(tmp_path / "agentgate.db") as store:
        log = AuditLog(store, KEY, ORIGIN)
        with pytest.raises(InputError) as refused:
            log.accept_repair(repair, by, reason)  # type: ignore[arg-type]
        assert str(refused.value) == said
