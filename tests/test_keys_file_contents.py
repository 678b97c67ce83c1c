"""Key handling as a security reviewer audits it: what a key file may hold, and what an
error about one may say."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa, x25519
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
    assert "a public key, not a private key" in str(refused.value)


def _issue_with(tmp_path: Path, issuer: Path, audience: str) -> list[str]:
    return ["grant", "issue", "--issuer", str(issuer), "--to", audience, "--allow", "tool:t", "--ttl", "1h"]


def _private_pem(key: object, encryption: serialization.KeySerializationEncryption, fmt: str) -> bytes:
    private_format = {
        "pkcs8": serialization.PrivateFormat.PKCS8,
        "traditional": serialization.PrivateFormat.TraditionalOpenSSL,
    }[fmt]
    return key.private_bytes(serialization.Encoding.PEM, private_format, encryption)  # type: ignore[attr-defined, no-any-return]


@pytest.mark.parametrize(("kind", "fmt"), [("ed25519", "pkcs8"), ("ec", "pkcs8"), ("ec", "traditional")])
def test_an_encrypted_private_key_is_said_to_be_encrypted(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    kind: str,
    fmt: str,
) -> None:
    """Review R55: an encrypted PKCS#8 key (or a traditional one with Proc-Type ENCRYPTED) given
    as --issuer was said to be 'not a PKCS#8 PEM private key', which it is."""
    monkeypatch.setenv("AGENTGATE_STORE", str(tmp_path / "store.db"))
    key = Ed25519PrivateKey.generate() if kind == "ed25519" else ec.generate_private_key(ec.SECP256R1())
    path = tmp_path / "enc.key"
    path.write_bytes(_private_pem(key, serialization.BestAvailableEncryption(b"pass"), fmt))
    path.chmod(0o600)
    assert main(_issue_with(tmp_path, path, SigningKey.generate().did)) == 2
    assert capsys.readouterr().err == (
        f"agentgate: error: {path}: an encrypted private key; agentgate reads unencrypted PKCS#8 PEM "
        "keys only (as `agentgate keys new` writes them): decrypt it into a new file first "
        "(openssl pkey -in FILE -out NEW.key; chmod 600 NEW.key)\n"
    )


@pytest.mark.parametrize("kind", ["ed25519-pem", "rsa-pem", "did"])
def test_a_public_key_given_as_the_issuer_is_said_to_be_a_public_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], kind: str
) -> None:
    """Review R55: a public key (PEM of any algorithm, or NAME.pub's did:key) given as --issuer
    was said to be 'not a PKCS#8 PEM private key', not that it is the public half."""
    monkeypatch.setenv("AGENTGATE_STORE", str(tmp_path / "store.db"))
    key = SigningKey.generate()
    path = tmp_path / "k.pub"
    if kind == "did":
        path.write_text(key.did + "\n")
    else:
        public = (
            Ed25519PrivateKey.from_private_bytes(key.seed).public_key()
            if kind == "ed25519-pem"
            else rsa.generate_private_key(65537, 1024).public_key()
        )
        path.write_bytes(
            public.public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
        )
    path.chmod(0o600)
    assert main(_issue_with(tmp_path, path, key.did)) == 2
    assert capsys.readouterr().err == (
        f"agentgate: error: {path}: a public key, not a private key; give the private key "
        "(NAME.key, not NAME.pub)\n"
    )


@pytest.mark.parametrize(
    ("kind", "fmt", "named"),
    [
        ("rsa", "pkcs8", "an RSA"),
        ("rsa", "traditional", "an RSA"),
        ("ec", "pkcs8", "an EC (secp256r1)"),
        ("x25519", "pkcs8", "an X25519"),
    ],
)
def test_a_private_key_of_another_algorithm_is_named_by_its_kind(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    kind: str,
    fmt: str,
    named: str,
) -> None:
    """Review R55: an RSA, EC or X25519 private key given as --issuer was 'not an Ed25519 private
    key', without saying what it is."""
    monkeypatch.setenv("AGENTGATE_STORE", str(tmp_path / "store.db"))
    key = {
        "rsa": lambda: rsa.generate_private_key(65537, 1024),
        "ec": lambda: ec.generate_private_key(ec.SECP256R1()),
        "x25519": x25519.X25519PrivateKey.generate,
    }[kind]()
    path = tmp_path / "other.key"
    path.write_bytes(_private_pem(key, serialization.NoEncryption(), fmt))
    path.chmod(0o600)
    assert main(_issue_with(tmp_path, path, SigningKey.generate().did)) == 2
    assert capsys.readouterr().err == (
        f"agentgate: error: {path}: not an Ed25519 private key but {named} one; agentgate signs with "
        "Ed25519 keys only (`agentgate keys new` makes one)\n"
    )


@pytest.mark.parametrize("kind", ["rsa", "x25519"])
def test_a_public_key_of_another_algorithm_is_named_by_its_kind(tmp_path: Path, kind: str) -> None:
    """Review R55: an RSA or X25519 PEM public key was named by cryptography's class name."""
    private = rsa.generate_private_key(65537, 1024) if kind == "rsa" else x25519.X25519PrivateKey.generate()
    path = tmp_path / "other.pem"
    path.write_bytes(
        private.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    named = {"rsa": "an RSA", "x25519": "an X25519"}[kind]
    with pytest.raises(KeyFileError) as refused:
        load_public_key(path)
    assert str(refused.value) == f"{path}: not an Ed25519 public key but {named} one"


def test_a_private_key_given_as_the_audience_is_said_to_be_one_and_not_quoted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R55: a private key given where a public key belongs (--to) was 'neither a did:key
    nor a PEM public key'."""
    monkeypatch.setenv("AGENTGATE_STORE", str(tmp_path / "store.db"))
    issuer, _ = save_key(SigningKey.generate(), tmp_path / "keys", "root")
    holder, _ = save_key(SigningKey.generate(), tmp_path / "keys", "agent")
    out = tmp_path / "t.tok"
    assert main([*_issue_with(tmp_path, issuer, str(holder)), "--out", str(out)]) == 2
    assert capsys.readouterr().err == (
        f"agentgate: error: {holder}: a private key, where its public key belongs; give the public "
        "key (NAME.pub or its did:key), and keep the private key to its holder\n"
    )
    assert not out.exists()
