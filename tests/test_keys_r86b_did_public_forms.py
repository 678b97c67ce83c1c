"""Review R86b: R86 refused text that looks like a key after ``did:`` without quoting it, and
with it public DIDs of other methods whose ids look like key text (``did:ethr:0x`` and 40 hex
digits, ``did:pkh:eip155:1:0x...``, a ``did:jwk`` of a public JWK): they were told to replace a
key. Rule: a DID of another method, as W3C DID syntax writes it, whose id looks like a key is
said to be no Ed25519 did:key, named by its method, its id not shown (an id may be a private key
put in that form: a seed, a did:jwk of a private JWK); other text that looks like a key is still
not quoted, and a DID that does not look like a key is quoted."""

from __future__ import annotations

import base64
import json

import pytest

from agentgate.authority import issue
from agentgate.errors import KeyFileError, TokenFormatError
from agentgate.keys import SigningKey, public_key_from_did

ADDRESS = "0xb9c5714089478a327f09197987f16f9e5d936e8a"


def _jwk(**fields: str) -> str:
    text = json.dumps({"kty": "OKP", "crv": "Ed25519", **fields}).encode()
    return base64.urlsafe_b64encode(text).decode().rstrip("=")


PUBLIC_X = "11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo"


@pytest.mark.parametrize(
    "did",
    [
        f"did:ethr:{ADDRESS}",
        f"did:pkh:eip155:1:{ADDRESS}",
        f"did:ethr:0x5:{ADDRESS}",
        "did:jwk:" + _jwk(x=PUBLIC_X),
    ],
)
def test_a_did_of_another_method_is_named_by_its_method_as_no_ed25519_did_key(did: str) -> None:
    method = did.split(":")[1]
    said = (
        f"not an Ed25519 did:key: a did:{method} DID (its id looks like a key and is not shown); agentgate reads Ed25519 "
        "did:key DIDs only (NAME.pub holds one)"
    )
    with pytest.raises(KeyFileError) as refused:
        public_key_from_did(did)
    assert str(refused.value) == said
    with pytest.raises(TokenFormatError) as refused_token:
        issue(SigningKey.generate(), did, ["tool:x"], ttl=60)
    assert str(refused_token.value) == f"audience: {said}"


def test_a_private_key_in_the_form_of_a_did_is_not_quoted() -> None:
    seed = SigningKey.generate().seed
    d = base64.urlsafe_b64encode(seed).decode().rstrip("=")
    for pasted, secret in (
        ("did:" + seed.hex(), seed.hex()[:16]),
        ("did:ed25519:" + seed.hex(), seed.hex()[:16]),
        ("did:ethr:0x" + seed.hex(), seed.hex()[:16]),
        ("did:jwk:" + _jwk(d=d, x=PUBLIC_X), _jwk(d=d, x=PUBLIC_X)[20:60]),
    ):
        with pytest.raises(KeyFileError) as refused:
            public_key_from_did(pasted)
        message = str(refused.value)
        assert secret not in message, message
        assert (
            "looks like a key itself"
            if pasted.count(":") == 1
            else "(its id looks like a key and is not shown)"
        ) in message


def test_a_long_did_of_another_method_is_refused_in_one_short_line() -> None:
    deep = base64.urlsafe_b64encode(b"[" * 100_000).decode().rstrip("=")
    with pytest.raises(KeyFileError) as refused:
        public_key_from_did("did:jwk:" + deep)
    assert str(refused.value).startswith("not an Ed25519 did:key: a did:jwk DID (its id looks like a key")
    assert len(str(refused.value)) < 200


def test_a_did_of_another_method_that_looks_like_no_key_is_quoted() -> None:
    did = "did:web:example.com%3A8443:users:alice"
    with pytest.raises(KeyFileError) as refused:
        public_key_from_did(did)
    assert str(refused.value) == f"not an Ed25519 did:key: {did!r}"
