"""``InvocationSigner`` refuses a ``ttl`` the invocation format does not take when it is made,
with an ``InputError`` naming ``ttl`` (review R89).

Until R89 the signer stored any ``ttl``: ``InvocationSigner(key, chain, ttl=3600)`` built fine,
and every chat completion request made through ``signer.client()`` then raised
``TokenFormatError`` ("invocation ttl must be 1 to 300 seconds") out of httpx's request hook,
where the openai or ChatOpenAI caller saw it far from the bad value."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from agentgate.authority import Invocation, issue
from agentgate.dispatch.gateway import INVOCATION_HEADER, InvocationSigner, chat_call
from agentgate.errors import InputError
from agentgate.keys import SigningKey

MODEL = "llama-3.1-8b"


def _chain(agent: SigningKey) -> Any:
    return issue(SigningKey.generate(), agent.public, [f"model:{MODEL}"], ttl=600)


@pytest.mark.parametrize("ttl", [3600, 301, 0, -1, True, 1.5, "60", None])
def test_a_ttl_the_invocation_format_refuses_is_refused_when_the_signer_is_made(ttl: Any) -> None:
    agent = SigningKey.generate()
    with pytest.raises(InputError, match=r"^ttl must be a whole number of seconds from 1 to 300") as refused:
        InvocationSigner(agent, _chain(agent), ttl=ttl)
    assert repr(ttl) in str(refused.value)


@pytest.mark.parametrize("ttl", [1, 300])
def test_a_ttl_within_the_format_signs_invocations_that_live_that_long(ttl: int) -> None:
    agent = SigningKey.generate()
    chain = _chain(agent)
    body = {"model": MODEL, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 8}
    request = httpx.Request("POST", "http://gateway/v1/chat/completions", content=json.dumps(body).encode())
    InvocationSigner(agent, chain, ttl=ttl)(request)
    invocation = Invocation.decode(request.headers[INVOCATION_HEADER], chain, chat_call(body))
    assert invocation.expires - invocation.issued_at == ttl
