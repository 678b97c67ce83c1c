"""Key handling as a security reviewer audits it: what a key file may hold, and what an
error about one may say."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from agentgate.cli.main import main
from agentgate.errors import KeyFileError
from agentgate.keys import SigningKey, load_public_key, load_signing_key, save_key


def _pem_public(key: SigningKey) -> bytes:
    return (
        Ed25519PrivateKey.from_private_bytes(key.seed)
        .public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    )


def test_a_public_key_file_holding_two_pem_keys_is_refused_not_read_as_the_first(tmp_path: Path) -> None:
    first, second = SigningKey.generate(), SigningKey.generate()
    path = tmp_path / "anchors.pem"
    path.write_bytes(_pem_public(first) + _pem_public(second))
    with pytest.raises(KeyFileError, match="more than one"):
        load_public_key(path)


def test_a_public_key_file_with_a_private_key_after_the_public_one_is_refused(tmp_path: Path) -> None:
    key = SigningKey.generate()
    private, _ = save_key(key, tmp_path / "keys", "k")
    path = tmp_path / "k.pem"
    path.write_bytes(_pem_public(key) + private.read_bytes())
    with pytest.raises(KeyFileError, match="more than one") as refused:
        load_public_key(path)
    assert "PRIVATE" not in str(refused.value)


def test_a_private_key_file_holding_two_keys_is_refused_not_read_as_the_first(tmp_path: Path) -> None:
    one, _ = save_key(SigningKey.generate(), tmp_path, "one")
    two, _ = save_key(SigningKey.generate(), tmp_path, "two")
    both = tmp_path / "both.key"
    both.write_bytes(one.read_bytes() + two.read_bytes())
    both.chmod(0o600)
    with pytest.raises(KeyFileError, match="more than one"):
        load_signing_key(both)


def test_a_did_file_error_never_quotes_the_lines_after_the_did(tmp_path: Path) -> None:
    private, _ = save_key(SigningKey.generate(), tmp_path / "keys", "k")
    pem = private.read_text()
    secret_line = pem.splitlines()[1]  # the base64 body: header, then the seed
    path = tmp_path / "k.pub"
    path.write_text("did:web:a.example\n" + pem)
    with pytest.raises(KeyFileError) as refused:
        load_public_key(path)
    message = str(refused.value)
    assert str(path) in message
    assert "PRIVATE" not in message and secret_line[:24] not in message


def test_a_did_file_with_two_dids_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "two.pub"
    path.write_text(f"{SigningKey.generate().did}\n{SigningKey.generate().did}\n")
    with pytest.raises(KeyFileError, match="more than one line") as refused:
        load_public_key(path)
    assert str(path) in str(refused.value)


def test_grant_issue_to_a_file_of_two_keys_issues_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("AGENTGATE_STORE", str(tmp_path / "store.db"))
    issuer, _ = save_key(SigningKey.generate(), tmp_path / "keys", "root")
    audience = tmp_path / "two.pem"
    audience.write_bytes(_pem_public(SigningKey.generate()) + _pem_public(SigningKey.generate()))
    out = tmp_path / "t.tok"
    argv = ["grant", "issue", "--issuer", str(issuer), "--to", str(audience)]
    code = main([*argv, "--allow", "tool:search.web", "--ttl", "1h", "--out", str(out)])
    assert code == 2 and "more than one" in capsys.readouterr().err
    assert not out.exists()


@pytest.mark.parametrize("content", ["did", "pem"])
def test_a_public_key_given_as_the_issuer_is_not_called_a_private_key_to_chmod(
    tmp_path: Path, content: str, capsys: pytest.CaptureFixture[str]
) -> None:
    key = SigningKey.generate()
    _, pub = save_key(key, tmp_path / "keys", "root")  # NAME.pub is mode 0644, as it should be
    if content == "pem":
        pub.write_bytes(_pem_public(key))
    os.chmod(pub, 0o644)
    with pytest.raises(KeyFileError) as refused:
        load_signing_key(pub)
    assert "chmod 600" not in str(refused.value)
    assert "not a PKCS#8 PEM private key" in str(refused.value)
