"""did:key identifiers (agentgate/keys.py): a did:key decodes only under the Ed25519 multicodec
and only in its one canonical spelling; anything else is refused, never read as the key."""

from __future__ import annotations

import base58
import pytest
from test_authority_grants import ALICE_KEY
from test_keys_files import KEY

from agentgate.errors import KeyFileError
from agentgate.keys import Keyring, PublicKey, public_key_from_did


def test_a_did_key_with_another_multicodec_second_byte_is_refused() -> None:
    """Mutant: the multicodec check compared only its first byte (0xed), so 0xed 0x00 passed.

    Rule: a did:key decodes to an Ed25519 key only under the exact prefix 0xed 0x01; any other
    codec (or a corrupted one) names no Ed25519 key and is refused, never read as one."""
    for prefix in (b"\xed\x00", b"\xed\x02", b"\xed\x81"):
        did = "did:key:z" + base58.b58encode(prefix + KEY.public.raw).decode()
        with pytest.raises(KeyFileError, match="does not hold an Ed25519 public key"):
            public_key_from_did(did)
        with pytest.raises(KeyFileError):
            Keyring([KEY.public]).get(did)


def test_a_did_key_with_trailing_blanks_is_not_another_spelling_of_the_key() -> None:
    """Mutant: the canonical-form check (re-encode and compare) was dropped; base58 strips
    trailing whitespace, so ``did + " "`` decoded to the same key.

    Rule: one key has one did:key; a principal id with trailing blanks is another string (a
    different id in a policy, a keyring or an audit record) and is refused, not mapped to the key."""
    did = KEY.did
    assert public_key_from_did(did) == KEY.public.raw
    for spelled in (did + " ", did + "\n", did + "\t"):
        with pytest.raises(KeyFileError, match="canonical"):
            public_key_from_did(spelled)
        with pytest.raises(KeyFileError):
            PublicKey.from_did(spelled)


@pytest.mark.parametrize("tail", ["\n", " ", "\t\r"])
def test_a_did_key_with_trailing_whitespace_is_refused(tail: str) -> None:
    """Mutant: ``public_key_from_did`` drops its re-encoding check (``did_from_public_key(key) !=
    did``). The base58 decoder strips trailing whitespace, so ``did + "\\n"`` decodes to the same
    key. Rule: one spelling of each did:key; a trust anchor or principal written with a stray
    newline is refused, never taken as a second name of the key."""
    assert public_key_from_did(ALICE_KEY.did) == ALICE_KEY.public.raw
    with pytest.raises(KeyFileError, match="canonical"):
        public_key_from_did(ALICE_KEY.did + tail)
    with pytest.raises(KeyFileError):
        PublicKey.from_did(ALICE_KEY.did + tail)
