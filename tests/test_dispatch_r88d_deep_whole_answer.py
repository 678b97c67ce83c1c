"""Review R88d: a whole (non-streamed) answer nested 1,000 deep, which orjson reads (it reads
1,024 levels), escaped ``BackendClient.chat`` as a bare ``RecursionError``: its finish reason,
usage or choice index was quoted with ``repr`` in the refusal, and the whole answer had no depth
check like a stream event's. It is refused past ``MAX_DEPTH`` as a stream event is, a
``BackendFailed`` naming the backend, and the readers quote what they refuse with ``quoted``,
which writes a value too deep for ``repr`` by its type."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import orjson
import pytest

from agentgate.dispatch import inventory_from_mapping
from agentgate.dispatch._answers import _finish_reason, _usage
from agentgate.dispatch._sse import _checked_choices
from agentgate.dispatch.backends import BackendClient, ChatResult
from agentgate.errors import BackendFailed

BACKEND = inventory_from_mapping({"backends": [{"name": "b0", "url": "http://127.0.0.1:9", "models": ["m"]}]})
DEEP = "[" * 1000 + "]" * 1000
MESSAGE = '{"role":"assistant","content":"ok"}'
ANSWERS = {  # each with one value nested 1,000 deep (DEEP) where the readers quote what they refuse
    "finish_reason": '{"choices":[{"index":0,"message":MESSAGE,"finish_reason":DEEP}]}',
    "usage": '{"choices":[{"index":0,"message":MESSAGE,"finish_reason":"stop"}],'
    '"usage":{"prompt_tokens":DEEP,"completion_tokens":1}}',
    "choice index": '{"choices":[{"index":DEEP,"message":MESSAGE,"finish_reason":"stop"}]}',
}


class _Whole:
    """A ``ChatTransport`` answering with ``body``, its ``MESSAGE`` and ``DEEP`` written out."""

    def __init__(self, body: str) -> None:
        self.body = body.replace("MESSAGE", MESSAGE).replace("DEEP", DEEP)

    async def post(self, url: str, body: bytes, authorization: str | None = None) -> tuple[int, bytes]:
        return 200, self.body.encode()


def _chat(body: str) -> ChatResult:
    async def run() -> ChatResult:
        async with httpx.AsyncClient() as http:
            client = BackendClient(BACKEND.backends[0], http)
            client.transport = _Whole(body)
            return await client.chat({"model": "m", "messages": [{"role": "user", "content": "hi"}]})

    return asyncio.run(run())


def _nested(depth: int) -> list[Any]:
    value: list[Any] = []
    for _ in range(depth):
        value = [value]
    return value


@pytest.mark.parametrize("body", ANSWERS.values(), ids=ANSWERS.keys())
def test_whole_answer_nested_past_max_depth_is_backend_failed(body: str) -> None:
    orjson.loads(_Whole(body).body)  # orjson reads it: the refusal is agentgate's
    with pytest.raises(
        BackendFailed, match=r"^b0: malformed chat completion: it is nested more than 254 levels"
    ):
        _chat(body)


def test_whole_answer_within_max_depth_is_taken() -> None:
    nested = "[" * 200 + "]" * 200
    assert _chat('{"choices":[{"index":0,"message":MESSAGE}],"x":' + nested + "}").content == "ok"


def test_readers_quote_a_value_too_deep_to_write_by_its_type() -> None:
    deep = _nested(100_000)
    with pytest.raises(TypeError, match="finish_reason is not a string: a list nested too deep"):
        _finish_reason({"finish_reason": deep})
    with pytest.raises(ValueError, match="usage is not an object: a list nested too deep"):
        _usage(deep)
    with pytest.raises(ValueError, match="usage prompt_tokens is not a number: a list nested too deep"):
        _usage({"prompt_tokens": deep})
    with pytest.raises(ValueError, match="choice index a list nested too deep"):
        _checked_choices([{"index": deep}], "message", 1)
