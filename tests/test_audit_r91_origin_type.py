"""An origin, a key name, a log's signer or its previous keys of the wrong type are ``InputError``.

Until review R91 only ``open_checkpoint`` refused an origin that is not text as docs/audit-format.md
section 3 says; ``Checkpoint.text`` (so ``sign_checkpoint``), ``verifier_key`` and ``AuditLog``
matched it against the key-name pattern and raised a bare ``TypeError``, and ``AuditLog`` did the
same for ``previous_keys=None``. ``AuditLog`` took ``None`` or raw key bytes as its ``signer``:
appends went on, and the first checkpoint failed naming ``public_key``, an argument never given.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from agentgate.audit import Checkpoint, sign_checkpoint, verifier_key
from agentgate.errors import InputError
from agentgate.keys import SigningKey
from agentgate.store import SQLiteStore
from agentgate.store.audit import AuditLog

KEY = SigningKey(b"\x07" * 32)
ROOT = bytes(32)


def _as_given(value: object) -> Any:
    """``value`` as a caller without type checks passes it."""
    return value


@pytest.mark.parametrize(
    ("call", "said"),
    [
        (
            lambda: sign_checkpoint(Checkpoint(_as_given(5), 1, ROOT), KEY),
            "origin must be a log origin as text (str), got int",
        ),
        (
            lambda: Checkpoint(_as_given(b"log"), 1, ROOT).text(),
            "origin must be a log origin as text (str), got bytes",
        ),
        (
            lambda: Checkpoint(_as_given(None), 1, ROOT).text(),
            "origin must be a log origin as text (str), got NoneType",
        ),
        (lambda: verifier_key(_as_given(5), KEY.public), "name must be a log origin as text (str), got int"),
        (
            lambda: verifier_key(_as_given(b"log"), KEY.public),
            "name must be a log origin as text (str), got bytes",
        ),
    ],
    ids=["sign_checkpoint-int", "text-bytes", "text-None", "verifier_key-int", "verifier_key-bytes"],
)
def test_a_name_that_is_not_text_is_input_error(call: Callable[[], object], said: str) -> None:
    with pytest.raises(InputError) as refused:
        call()
    assert str(refused.value).startswith(said)


@pytest.mark.parametrize(
    ("arguments", "said"),
    [
        ({"signer": KEY, "origin": 5}, "origin must be a log origin as text (str), got int"),
        (
            {"signer": KEY, "previous_keys": None},
            "previous_keys must be an iterable of PublicKey, got NoneType",
        ),
        (
            {"signer": KEY, "previous_keys": [b"\x07" * 32]},
            "previous_keys[0] must be a PublicKey (agentgate.keys)",
        ),
        ({"signer": None}, "signer must be a SigningKey or PublicKey (agentgate.keys), got NoneType"),
        (
            {"signer": b"\x07" * 32},
            "signer must be a SigningKey or PublicKey (agentgate.keys), got bytes: wrap",
        ),
    ],
    ids=["origin-int", "previous-keys-None", "previous-key-bytes", "signer-None", "signer-bytes"],
)
def test_audit_log_refuses_arguments_of_the_wrong_type_before_making_anything(
    tmp_path: Path, arguments: dict[str, object], said: str
) -> None:
    with SQLiteStore(tmp_path / "audit.db") as store:
        with pytest.raises(InputError) as refused:
            AuditLog(store, **_as_given(arguments))
        assert str(refused.value).startswith(said)
        assert store.query("SELECT name FROM sqlite_master WHERE name = 'audit_log'") == []


def test_audit_log_still_takes_a_public_key_and_a_set_of_previous_keys(tmp_path: Path) -> None:
    with SQLiteStore(tmp_path / "audit.db") as store:
        AuditLog(store, KEY).append({"kind": "deny", "principal": "did:key:zAlice", "resource": "tool:x"})
        reader = AuditLog(
            store, KEY.public, previous_keys=_as_given({SigningKey(b"\x08" * 32).public}), create=False
        )
        assert reader.size() == 1 and reader.signer is None
