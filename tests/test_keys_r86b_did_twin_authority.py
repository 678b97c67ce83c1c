"""Review R86b: ``keys.public_key_from_did`` refused a private key pasted after ``did:`` without
quoting it (R86), but the token library's own did reader, ``did_public_key``, which ``issue`` and
``delegate`` (the audience) and ``verify_chain`` (a trust anchor) pass, still quoted up to 80
characters of it. Rule: one refusal for both (``keys.did_refusal``), keeping ``TokenFormatError``
and the prefix naming the field; a did that is merely wrong is still quoted."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from agentgate.authority import delegate, issue, verify_chain
from agentgate.errors import TokenFormatError
from agentgate.keys import SigningKey

ROOT = SigningKey.generate()
AGENT = SigningKey.generate()


def _readers() -> list[tuple[str, Callable[[str], object]]]:
    parent = issue(ROOT, AGENT.public, ["tool:x"], ttl=60)
    return [
        ("audience: ", lambda did: issue(ROOT, did, ["tool:x"], ttl=60)),
        ("audience: ", lambda did: delegate(parent, AGENT, did, ["tool:x"], ttl=30)),
        ("trust anchor: ", lambda did: verify_chain(parent, trusted=did)),
        ("trust anchor: ", lambda did: verify_chain(parent, trusted=[ROOT.public, did])),
    ]


def test_a_private_key_after_did_is_not_quoted_as_an_audience_or_a_trust_anchor() -> None:
    seed = SigningKey.generate().seed.hex()
    for pasted in ("did:" + seed, "did:key:z" + seed, "did:key:" + seed):
        for prefix, read in _readers():
            with pytest.raises(TokenFormatError) as refused:
                read(pasted)
            message = str(refused.value)
            assert message.startswith(prefix), message
            assert "looks like a key itself" in message and seed[:16] not in message, message


def test_a_did_that_is_merely_wrong_is_still_quoted_naming_the_field() -> None:
    did = AGENT.did
    for wrong in ("did:web:example.com", did[:-1] + ("0" if did[-1] != "0" else "O"), did[:-2]):
        for prefix, read in _readers():
            with pytest.raises(TokenFormatError) as refused:
                read(wrong)
            message = str(refused.value)
            assert message.startswith(prefix) and repr(wrong) in message, message
