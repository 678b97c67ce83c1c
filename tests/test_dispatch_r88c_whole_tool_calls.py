"""Review R88c: a whole answer's ``message.tool_calls`` was not checked by ``BackendClient.chat``:
``{}``, ``0``, ``false``, ``5`` or ``{"a": 1}`` was taken and passed on in the body (the gateway
forwarded it), where the same value in a stream's delta was ``BackendFailed``. It must be a list
or absent or ``null`` now, in every choice; what the list holds is the caller's to parse
(``DispatchedChatModel`` keeps a call that is not an object as an ``invalid_tool_calls`` entry,
as documented)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import pytest

from agentgate.dispatch import inventory_from_mapping
from agentgate.dispatch.backends import BackendClient, ChatResult
from agentgate.errors import BackendFailed

BACKEND = inventory_from_mapping({"backends": [{"name": "b0", "url": "http://127.0.0.1:9", "models": ["m"]}]})
USAGE = {"prompt_tokens": 1, "completion_tokens": 4}
_ABSENT = object()


class _Whole:
    """A ``ChatTransport`` answering with ``n`` choices whose last message carries ``calls``."""

    def __init__(self, calls: object, n: int) -> None:
        self.calls, self.n = calls, n

    async def post(self, url: str, body: bytes, authorization: str | None = None) -> tuple[int, bytes]:
        choices: list[dict[str, Any]] = []
        for index in range(self.n):
            message: dict[str, Any] = {"role": "assistant", "content": "ok"}
            if index == self.n - 1 and self.calls is not _ABSENT:
                message["tool_calls"] = self.calls
            choices.append({"index": index, "message": message, "finish_reason": "stop"})
        return 200, json.dumps({"choices": choices, "usage": USAGE}).encode()


def _chat(calls: object, n: int = 1) -> ChatResult:
    async def run() -> ChatResult:
        async with httpx.AsyncClient() as http:
            client = BackendClient(BACKEND.backends[0], http)
            client.transport = _Whole(calls, n)
            payload = {
                "model": "m",
                "messages": [{"role": "user", "content": "hi"}],
                "max_tokens": 50,
                "n": n,
            }
            return await client.chat(payload)

    return asyncio.run(run())


@pytest.mark.parametrize("n", [1, 2], ids=["first-choice", "second-choice"])
@pytest.mark.parametrize(
    "calls", [{}, 0, False, "", 5, {"a": 1}], ids=["object", "zero", "false", "text", "five", "truthy"]
)
def test_whole_tool_calls_that_are_not_a_list_are_malformed(calls: object, n: int) -> None:
    with pytest.raises(BackendFailed, match=r"^b0: malformed chat completion: tool_calls is not a list$"):
        _chat(calls, n)


@pytest.mark.parametrize(
    "calls", [_ABSENT, None, [], ["x"]], ids=["absent", "null", "empty", "non-object-call"]
)
def test_whole_tool_calls_absent_null_or_a_list_pass_as_sent(calls: object) -> None:
    result = _chat(calls)
    message = result.body["choices"][0]["message"]
    assert result.content == "ok"
    assert message.get("tool_calls", _ABSENT) == calls
