"""Review R86c: a did that is not text skipped ``keys.did_refusal``. ``verify_chain`` given a seed
or a PEM as bytes among its trust anchors quoted up to 80 characters of it, an anchor of
``10**5000`` was a bare ``ValueError``, and ``public_key_from_did``, ``Keyring.get`` and a
hand-built invocation's signer (``decide``) quoted their own ``repr`` of it. Rule: one refusal for
every did reader, naming what is not text by its type (a number by its size), never its value."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import replace

import pytest

from agentgate.authority import Authority, GrantRepository, Invocation, issue, verify_chain
from agentgate.capabilities import Call
from agentgate.errors import AgentGateError, KeyFileError, TokenFormatError
from agentgate.keys import Keyring, SigningKey, public_key_from_did
from agentgate.store import SQLiteStore

ROOT, HOLDER = SigningKey(bytes([61]) * 32), SigningKey(bytes([62]) * 32)
NOW = 1_800_000_000
SEED = ("9f3a" * 16).encode()
PEM = (
    b"-----BEGIN PRIVATE KEY-----\nMC4CAQAwBQYDK2VwBCIEIJ+fn5+fn5+fn5+fn5+fn5+fn5+fn5+fn5+fn5+fn5+f\n"
    b"-----END PRIVATE KEY-----\n"
)
NOT_TEXT: list[tuple[object, str]] = [
    (SEED, "got a bytes"),
    (PEM, "got a bytes"),
    (bytearray(SEED), "got a bytearray"),
    (10**5000, "got an integer of 16610 bits"),
    (None, "got None"),
]


def _readers() -> Iterator[tuple[type[AgentGateError], str, Callable[[object], object]]]:
    chain = issue(ROOT, HOLDER.public, ["tool:x"], ttl=60)
    yield TokenFormatError, "trust anchor: ", lambda did: verify_chain(chain, [ROOT.public, did])  # type: ignore[list-item]
    yield KeyFileError, "", lambda did: public_key_from_did(did)  # type: ignore[arg-type]
    yield KeyFileError, "", lambda did: Keyring().get(did)  # type: ignore[arg-type]


@pytest.mark.parametrize(("did", "named"), NOT_TEXT, ids=["seed", "pem", "bytearray", "huge-int", "none"])
def test_a_did_that_is_not_text_is_named_by_its_type_by_every_reader(did: object, named: str) -> None:
    for error, prefix, read in _readers():
        with pytest.raises(error) as refused:
            read(did)
        message = str(refused.value)
        assert message == f"{prefix}not an Ed25519 did:key: {named}", message


def test_an_unhashable_did_is_named_by_its_type_by_the_keyring() -> None:
    with pytest.raises(KeyFileError) as refused:
        Keyring().get([SEED])  # type: ignore[arg-type]
    assert str(refused.value) == "not an Ed25519 did:key: got a list"


def test_a_hand_built_invocations_signer_that_is_not_text_is_named_by_its_type(
    sqlite_store: SQLiteStore,
) -> None:
    """``decide`` never raises for bad input: the signer of 10**5000 was a bare ``ValueError``."""
    chain = issue(ROOT, HOLDER.did, ["tool:x#*"], ttl=600, now=NOW)
    signed = Invocation.sign(HOLDER, chain, Call("tool:x", "invoke", {}), now=NOW)
    authority = Authority(GrantRepository(sqlite_store), ROOT.did)
    for did, named in NOT_TEXT:
        decision = authority.decide(replace(signed, issuer=did), now=NOW)  # type: ignore[arg-type]
        [finding] = decision.findings
        assert finding.code == "wrong_holder"
        assert finding.message.startswith(f"invocation signed by {named.removeprefix('got ')}, "), (
            finding.message
        )
