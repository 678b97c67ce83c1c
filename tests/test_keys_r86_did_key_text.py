"""Review R86: a value starting with ``did:`` went straight to ``PublicKey.from_did``, which quoted
up to 80 characters of it, so a private key pasted after ``did:`` (``AGENTGATE_LOG_PREVIOUS_KEYS``,
``--trust``, ``--to``, a policy's ``did:``, a ``.pub`` file's line) was printed. Every did path
passes ``public_key_from_did``, which now refuses such text without quoting it; a did that is
merely wrong is still quoted."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentgate.errors import KeyFileError, PolicyError
from agentgate.keys import PublicKey, SigningKey, load_public_key, public_key_from_did, save_key
from agentgate.policy import parse_policy
from agentgate.store.audit import previous_log_keys


def _private_pem(tmp_path: Path) -> str:
    key_path, _ = save_key(SigningKey.generate(), tmp_path / "made", "log")
    return key_path.read_text()


def _secret_piece(pem: str) -> str:
    """16 characters of the PEM's base64 line past the prefix every Ed25519 PKCS#8 key shares."""
    return pem.splitlines()[1][24:40]


def _pasted(pem: str) -> list[tuple[str, str]]:
    """Private keys pasted after ``did:``, each with a piece of its secret."""
    body, seed = pem.splitlines()[1], SigningKey.generate().seed.hex()
    return [
        ("did:key:" + pem.strip(), _secret_piece(pem)),
        ("did:" + body, _secret_piece(pem)),
        ("did:key:z" + body, _secret_piece(pem)),
        ("did:" + seed, seed[:16]),
    ]


def test_a_private_key_after_did_is_not_quoted_by_any_did_reader(tmp_path: Path) -> None:
    for value, secret in _pasted(_private_pem(tmp_path)):
        for read in (public_key_from_did, PublicKey.from_did, load_public_key):
            with pytest.raises(KeyFileError) as refused:
                read(value)
            message = str(refused.value)
            assert "looks like a key itself" in message and secret not in message, message


def test_a_private_key_after_did_in_the_previous_log_keys_or_a_policy_is_not_quoted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pem = _private_pem(tmp_path)
    body = pem.splitlines()[1]
    monkeypatch.setenv("AGENTGATE_LOG_PREVIOUS_KEYS", "did:key:" + pem.strip())
    with pytest.raises(KeyFileError) as refused:
        previous_log_keys()
    assert str(refused.value).startswith("AGENTGATE_LOG_PREVIOUS_KEYS: ")
    assert _secret_piece(pem) not in str(refused.value), str(refused.value)
    with pytest.raises(PolicyError) as refused_policy:
        parse_policy(f"version: 1\ntrust_anchors:\n  root:\n    did: 'did:{body}'\n", base_dir=tmp_path)
    assert _secret_piece(pem) not in str(refused_policy.value), str(refused_policy.value)
    pub = tmp_path / "anchor.pub"
    pub.write_text(f"did:{body}\n")
    with pytest.raises(KeyFileError) as refused_file:
        load_public_key(str(pub))
    assert str(pub) in str(refused_file.value) and _secret_piece(pem) not in str(refused_file.value)


def test_a_did_that_is_merely_wrong_is_still_quoted() -> None:
    did = SigningKey.generate().did
    for wrong in (did[:-1] + ("0" if did[-1] != "0" else "O"), did + "extra", "did:web:example.com"):
        with pytest.raises(KeyFileError) as refused:
            public_key_from_did(wrong)
        assert repr(wrong[:80]) in str(refused.value), str(refused.value)
