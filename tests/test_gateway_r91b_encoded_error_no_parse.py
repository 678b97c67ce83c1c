"""The gateway's pool finds the prompt an encoded error answer's ``Content-Encoding`` is scrubbed
of in the call's own body, as the gateway handed it to the dispatcher (``SendMark.request``),
never by parsing the whole request body again on the event loop (a regression review of R91).

R91 had the pool quote an error answer sent with a ``Content-Encoding`` as the httpx and aiohttp
paths do, scrubbed of the prompt; the pool is given only the bytes ``BackendClient`` wrote, so it
ran ``json.loads`` on the whole request body, on the loop, to find the prompt again: the same
cost, up to ``max_body_bytes``, that R91 had just moved off the loop for the body's reading (a
body of 150,000 messages stalled the loop 0.24 s more than on the httpx path). The message is the
same as before, and the same as the httpx path's."""

from __future__ import annotations

import asyncio
import json
import types
from collections.abc import Iterator
from typing import Any

import pytest
from test_dispatch_backends import _client_on
from test_gateway import Env, _body, _post
from test_gateway_r91_encoded_error import PROMPT, SECRET, _answering

from agentgate.dispatch.gateway import _upstream, invocation_headers
from agentgate.dispatch.gateway._upstream import SENDING, SendMark, UpstreamPool
from agentgate.errors import DispatchError

pytest_plugins = ("test_gateway",)  # its ``backends`` and ``env`` fixtures


def _on_a_loop() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


@pytest.fixture
def parsed(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[bool]]:
    """Every ``json.loads`` the pool's module runs: whether it ran on an event loop's thread."""
    seen: list[bool] = []

    def loads(raw: Any, **kwargs: Any) -> Any:
        seen.append(_on_a_loop())
        return json.loads(raw, **kwargs)

    monkeypatch.setattr(_upstream, "json", types.SimpleNamespace(loads=loads))
    yield seen


async def _rejection(path: str, stream: bool, mark: SendMark | None) -> str:
    payload = {"model": "m", "messages": [{"role": "user", "content": PROMPT}], "max_tokens": 8}
    if mark is not None:
        mark.request = payload
    echo = f"gzip, {PROMPT}".encode()
    sending = SENDING.set(mark)
    try:
        async with _client_on(path, _answering(echo)) as client, asyncio.timeout(10):
            with pytest.raises(DispatchError) as raised:
                if stream:
                    async for _ in client.stream(payload):
                        pass
                else:
                    await client.chat(payload)
    finally:
        SENDING.reset(sending)
    return str(raised.value)


@pytest.mark.parametrize("stream", [False, True], ids=["chat", "stream"])
def test_the_pool_scrubs_the_prompt_of_the_gateways_request_without_parsing_the_body(
    parsed: list[bool], stream: bool
) -> None:
    message = asyncio.run(_rejection("gateway-pool", stream, SendMark()))
    assert parsed == []  # the prompt came from the call's own request
    assert "[redacted]" in message and "not decoded" in message and SECRET[:5] not in message, message
    assert message == asyncio.run(_rejection("httpx", stream, None))


def test_the_pool_on_its_own_parses_the_body_off_the_event_loop(parsed: list[bool]) -> None:
    message = asyncio.run(_rejection("gateway-pool", False, None))
    assert parsed == [False]  # once, in a worker thread
    assert message == asyncio.run(_rejection("httpx", False, None))


@pytest.mark.parametrize("stream", [False, True], ids=["chat", "stream"])
def test_the_gateway_hands_the_pool_its_calls_request(
    env: Env, monkeypatch: pytest.MonkeyPatch, stream: bool
) -> None:
    requests: list[Any] = []
    send = UpstreamPool._send

    async def sending(self: UpstreamPool, *args: Any, **kwargs: Any) -> Any:
        mark = SENDING.get()
        requests.append(None if mark is None else mark.request)
        return await send(self, *args, **kwargs)

    monkeypatch.setattr(UpstreamPool, "_send", sending)
    body = _body(stream=stream, messages=[{"role": "user", "content": PROMPT}])
    answer = _post(env, body, invocation_headers(env.agent.key, env.agent.chain, body))
    assert answer.status_code == 200, answer.text
    assert len(requests) == 1 and requests[0] is not None
    assert requests[0]["messages"] == body["messages"]
