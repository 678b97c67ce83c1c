"""Review R68: hostile link and invocation payloads are refused naming where the problem is."""

from __future__ import annotations

import json

import pytest

from agentgate.authority import Invocation, delegate, issue, parse_chain, verify_chain
from agentgate.authority._encoding import b64url_encode
from agentgate.authority._grant import GRANT_CONTEXT
from agentgate.authority._invocation import INVOCATION_CONTEXT
from agentgate.capabilities import Call
from agentgate.errors import TokenFormatError
from agentgate.keys import SigningKey

ROOT, ALICE, BOB = SigningKey.generate(), SigningKey.generate(), SigningKey.generate()
NOW = 1_800_000_000


def _with_tip_payload(token: str, payload: bytes, key: SigningKey) -> str:
    """``token`` with its last link's payload replaced by ``payload``, validly signed by ``key``."""
    head = token.rsplit(".", 2)[0]
    return f"{head}.{b64url_encode(payload)}.{b64url_encode(key.sign(GRANT_CONTEXT + payload))}"


def _two_links() -> str:
    root = issue(ROOT, ALICE.public, ["tool:pay?amount<=500"], ttl=600, purpose="vector", now=NOW)
    return delegate(
        root, ALICE, BOB.public, ["tool:pay?amount<=100"], ttl=60, purpose="vector", now=NOW
    ).token


def test_a_lone_surrogate_escaped_in_a_link_is_refused_naming_the_link() -> None:
    """Review R68: a link whose JSON escapes a lone surrogate (``"\\ud800"``: valid JSON, no valid
    text) was refused ``value cannot be encoded canonically: 'utf-8' codec can't encode ...``,
    naming neither the link nor that it was reading a token; every other bad payload says
    ``link N: ...``."""
    token = _two_links()
    payload = parse_chain(token).tip.payload.replace(b'"purpose":"vector"', b'"purpose":"\\ud800"')
    hostile = _with_tip_payload(token, payload, ALICE)
    with pytest.raises(TokenFormatError, match=r"^link 1: .*not valid Unicode text"):
        verify_chain(hostile, ROOT.public, now=NOW)


def test_a_lone_surrogate_escaped_in_an_invocation_is_refused_naming_the_invocation() -> None:
    """Review R68: the same payload in an invocation was refused with the encoder's words only
    (``value cannot be encoded canonically``), not as the invocation's."""
    chain = issue(ROOT, ALICE.public, ["tool:pay"], ttl=600, now=NOW)
    signed = Invocation.sign(ALICE, chain, Call.tool("pay"), now=NOW)
    payload = signed.payload.replace(b'"res":"tool:pay"', b'"res":"\\ud800"')
    wire = f"agi1.{b64url_encode(payload)}.{b64url_encode(ALICE.sign(INVOCATION_CONTEXT + payload))}"
    with pytest.raises(TokenFormatError, match=r"^invocation: .*not valid Unicode text"):
        Invocation.decode(wire, chain, Call.tool("pay"))


@pytest.mark.parametrize(
    ("written", "named"),
    [
        (
            {"amount": {"in": [1, 1]}},
            r"constraints\.amount is written \{\"in\":\[1,1\]\}; its canonical form is \{\"eq\":1\}",
        ),
        (
            {"amount": {"in": [7]}},
            r"constraints\.amount is written \{\"in\":\[7\]\}; its canonical form is \{\"eq\":7\}",
        ),
        (
            {"amount": {"in": [1, 2, 1]}, "currency": {"eq": "EUR"}},
            r"constraints\.amount is written \{\"in\":\[1,2,1\]\}; its canonical form is \{\"in\":\[1,2\]\}",
        ),
        (None, r"the field 'constraints' is missing \(\{\} for none\)"),
    ],
)
def test_a_capability_not_in_canonical_form_is_refused_naming_the_argument(
    written: dict[str, object] | None, named: str
) -> None:
    """Review R68: a link whose capability spells a constraint otherwise than its canonical form
    (an ``in`` repeating a value, an ``in`` of one value, which is written ``eq``) or leaves out
    ``constraints`` was refused ``link 1 caps[0]: capability is not in canonical form``, naming
    neither the argument nor the spelling the format requires."""
    token = _two_links()
    cap: dict[str, object] = {"action": "invoke", "resource": "tool:pay"}
    if written is not None:
        cap["constraints"] = written
    tip = parse_chain(token).tip
    payload = tip.payload.replace(
        b'"caps":[{"action":"invoke","constraints":{"amount":{"le":100}},"resource":"tool:pay"}]',
        b'"caps":[' + json.dumps(cap, sort_keys=True, separators=(",", ":")).encode() + b"]",
    )
    assert payload != tip.payload
    with pytest.raises(TokenFormatError, match=r"^link 1 caps\[0\]: " + named):
        verify_chain(_with_tip_payload(token, payload, ALICE), ROOT.public, now=NOW)
