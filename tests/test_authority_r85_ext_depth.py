"""Review R85: a grant payload nested deeper than ``agentgate._json.MAX_DEPTH`` (254 levels, the
payload object counting as one) is refused as a ``TokenFormatError`` naming the link and the
limit, before Python's parser recurses into it. Until R85 the same signed token with an ``ext``
nested ~960 levels deep verified from a shallow caller and was refused ("maximum recursion
depth exceeded") from one 60 frames deeper: acceptance hung on the caller's stack. Within the
limit a payload verifies as before, the fast path and the reference path agreeing.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from agentgate._json import MAX_DEPTH
from agentgate.authority import verify_chain
from agentgate.authority._encoding import b64url_encode, canonical_json
from agentgate.authority._grant import GRANT_CONTEXT, TOKEN_PREFIX
from agentgate.errors import TokenFormatError
from agentgate.keys import SigningKey

ROOT, AGENT = SigningKey.generate(), SigningKey.generate()
NOW = 1_800_000_000
CAPS = [{"action": "invoke", "constraints": {}, "resource": "tool:pay"}]


def _token(ext: bytes) -> str:
    """A one-link chain from ROOT whose payload carries the JSON text ``ext`` as its ``ext``,
    signed (spliced in as bytes: Python's encoder recurses, as its parser does)."""
    body = {
        "v": 1,
        "iss": ROOT.public.did,
        "aud": AGENT.public.did,
        "caps": CAPS,
        "budget": None,
        "nbf": NOW - 10,
        "exp": NOW + 3600,
        "depth": 2,
        "nonce": "0" * 32,
        "purpose": "",
        "parent": None,
        "ext": "EXT",
    }
    payload = canonical_json(body).replace(b'"ext":"EXT"', b'"ext":' + ext)
    return f"{TOKEN_PREFIX}.{b64url_encode(payload)}.{b64url_encode(ROOT.sign(GRANT_CONTEXT + payload))}"


def _nested(levels: int, inner: bytes = b"") -> bytes:
    """``{"a":{"a":...{inner}}}``: ``levels`` objects, one inside another."""
    return b'{"a":' * (levels - 1) + b"{" + inner + b"}" + b"}" * (levels - 1)


def _answer(token: str) -> str:
    try:
        verify_chain(token, [ROOT.public], now=NOW)
    except TokenFormatError as exc:
        return f"TokenFormatError: {exc}"
    return "valid"


def _deeper(frames: int, call: Callable[[], str]) -> str:
    return call() if frames == 0 else _deeper(frames - 1, call)


def test_the_limit_is_the_one_of_canonical_json() -> None:
    assert MAX_DEPTH == 254


@pytest.mark.parametrize("payload_levels", [MAX_DEPTH + 1, 960, 1200])
def test_a_payload_nested_past_the_limit_is_refused_alike_from_any_caller_depth(payload_levels: int) -> None:
    token = _token(_nested(payload_levels - 1))  # the payload object is one level
    refused = f"TokenFormatError: link 0: JSON nested more than {MAX_DEPTH} levels deep"
    assert _answer(token) == refused
    assert _deeper(60, lambda: _answer(token)) == refused
    assert _deeper(300, lambda: _answer(token)) == refused


def test_a_payload_nested_to_the_limit_verifies() -> None:
    token = _token(_nested(MAX_DEPTH - 1))
    assert _answer(token) == "valid"
    assert _deeper(60, lambda: _answer(token)) == "valid"


def test_a_payload_within_the_limit_on_the_reference_path_verifies() -> None:
    """An integer beyond 64 bits sends the payload to Python's parser (orjson refuses it): at
    the limit's depth it is read there and verifies."""
    token = _token(_nested(MAX_DEPTH - 1, b'"a":' + str(2**70).encode()))
    assert _answer(token) == "valid"


def test_brackets_inside_strings_are_not_nesting() -> None:
    """Read by the reference path too (the integer beyond 64 bits), which counts the brackets."""
    big = str(2**70).encode()
    token = _token(b'{"n":' + big + b',"text":"' + b"[{" * 2000 + b'\\"[' * 300 + b'"}')
    assert _answer(token) == "valid"
