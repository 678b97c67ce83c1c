"""Review R84: a key file holds one key (docs/cli.md, Files): a PEM key with a did:key (another
key's) below it, or any other text before or after its PEM block, is refused, never read as the
PEM key. ``cryptography`` skips the text around a block, and only a second PEM block was counted."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from agentgate.errors import KeyFileError
from agentgate.keys import SigningKey, load_public_key, load_signing_key, save_key

A, B = SigningKey(bytes(range(32))), SigningKey(bytes(range(1, 33)))
PUBLIC_PEM = Ed25519PublicKey.from_public_bytes(A.public.raw).public_bytes(
    serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
)
AROUND = {
    "a did:key below": (b"", f"{B.did}\n".encode()),
    "a note above": (b"# the agent's key\n", b""),
    "bytes below": (b"", b"\x00\xff" * 10),
    "a second END line below": (b"", f"{B.did}\n-----END PRIVATE KEY-----\n".encode()),
}


def _write(path: Path, data: bytes) -> Path:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    os.write(fd, data)
    os.close(fd)
    return path


@pytest.mark.parametrize("around", AROUND.values(), ids=AROUND.keys())
def test_a_public_pem_key_with_text_beside_it_is_refused(tmp_path: Path, around: tuple[bytes, bytes]) -> None:
    path = _write(tmp_path / "a.pub", around[0] + PUBLIC_PEM + around[1])
    with pytest.raises(KeyFileError, match="holds text outside its PEM block") as refused:
        load_public_key(path)
    assert str(path) in str(refused.value) and B.did not in str(refused.value)


@pytest.mark.parametrize("around", AROUND.values(), ids=AROUND.keys())
def test_a_private_pem_key_with_text_beside_it_is_refused(
    tmp_path: Path, around: tuple[bytes, bytes]
) -> None:
    private, _ = save_key(A, tmp_path / "keys", "a")
    path = _write(tmp_path / "keys" / "both.key", around[0] + private.read_bytes() + around[1])
    with pytest.raises(KeyFileError, match="holds text outside its PEM block"):
        load_signing_key(path)


@pytest.mark.parametrize(
    "wrap",
    [
        lambda pem: pem,
        lambda pem: b"\xef\xbb\xbf" + pem,  # an editor's byte order mark
        lambda pem: pem.replace(b"\n", b"\r\n"),
        lambda pem: b"\n\n  " + pem + b"\n\t\n",
    ],
    ids=["as written", "BOM", "CRLF", "blank lines"],
)
def test_a_pem_key_alone_with_blanks_around_it_is_read(
    tmp_path: Path, wrap: Callable[[bytes], bytes]
) -> None:
    private, _ = save_key(A, tmp_path / "keys", "a")
    assert load_signing_key(_write(tmp_path / "keys" / "w.key", wrap(private.read_bytes()))).did == A.did
    assert load_public_key(_write(tmp_path / "w.pub", wrap(PUBLIC_PEM))).did == A.did
