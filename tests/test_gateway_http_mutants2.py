"""(Review R48, mutation testing of the gateway's HTTP layer, third pass) tests that kill
hand-made mutants of ``agentgate/dispatch/gateway/_app.py``, ``_http.py`` and ``_upstream.py``
that the suite (and ``test_gateway_http_mutants.py``) let live.

Real loopback HTTP throughout: the hand-written backend of ``test_gateway_http_mutants`` for the
lean pool, the gateway tests' ``env`` fixture (GatewayServer, simulated vLLM backends, SQLite).
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from test_gateway import Env, _assert_refused, _body, _post
from test_gateway_end_to_end import _body as _r16_body
from test_gateway_hostile_backends import RESERVED as R16_RESERVED
from test_gateway_hostile_backends import _gateway as _r16_gateway
from test_gateway_hostile_backends import _settled
from test_gateway_http_mutants import _Backend, _NoCompletionCount, _run

from agentgate.dispatch.gateway import INVOCATION_HEADER, invocation_headers
from agentgate.dispatch.gateway._upstream import UpstreamError, UpstreamPool
from agentgate.dispatch.prefix import estimate_tokens, prompt_text

pytest_plugins = ("test_gateway",)  # its ``backends`` and ``env`` fixtures


async def _ok(writer: asyncio.StreamWriter) -> bool:
    writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}")
    await writer.drain()
    return True


@pytest.mark.parametrize(
    "headers",
    [{"traceparent": "00-abc\r\nX-Injected: 1"}, {"X-Injected: 1\r\ntraceparent": "00-abc"}],
    ids=["value", "name"],
)
def test_a_trace_header_with_a_line_break_is_refused_before_anything_is_sent(headers: dict[str, str]) -> None:
    """Kills: ``_header_lines`` no longer checking a header value's characters.

    Rule: the call's extra headers (its trace context) are written as one line each; a name or
    value holding a line break (which would end the header and inject another, or end the head
    and smuggle a request) is an UpstreamError quoting neither, and no connection is opened."""

    async def scenario() -> None:
        backend = _Backend(_ok)
        async with backend as url:
            pool = UpstreamPool()
            with pytest.raises(UpstreamError) as raised:
                await pool.post(url, b"{}", headers=headers)
            assert "Injected" not in str(raised.value)
            assert backend.connections == 0
            # A clean trace header goes through on the same pool.
            assert await pool.post(url, b"{}", headers={"traceparent": "00-abc"}) == (200, b"{}")
            await pool.aclose()

    _run(scenario)


@pytest.mark.parametrize("scheme", ["Token", "Basic", ""])
def test_a_chain_under_another_scheme_than_bearer_is_refused(env: Env, scheme: str) -> None:
    """Kills: ``_bearer`` taking the token of any ``Authorization`` scheme (the ``bearer`` test
    dropped).

    Rule: the chain is read only from ``Authorization: Bearer <chain>`` (any case of the
    scheme); under any other scheme (or none) the call has no chain: 401, nothing charged, the
    refusal audited; the same headers with ``Bearer`` are allowed."""
    body = _body()
    headers = invocation_headers(env.agent.key, env.agent.chain, body)
    token = headers["Authorization"].removeprefix("Bearer ")
    headers["Authorization"] = f"{scheme} {token}".lstrip()
    before, count = env.ledger(), len(env.entries())
    error = _assert_refused(env, _post(env, body, headers), 401, before, count)
    assert error["type"] == "authentication_error"
    fresh = invocation_headers(env.agent.key, env.agent.chain, body)
    fresh["Authorization"] = "bEaReR " + token
    assert INVOCATION_HEADER in fresh
    assert _post(env, body, fresh).status_code == 200


def test_a_connection_whose_call_ends_after_the_pool_closed_is_closed_not_kept() -> None:
    """Kills: ``_release`` keeping a connection for reuse after ``aclose`` (the ``_closed`` test
    dropped).

    Rule: once the pool is closed (the gateway's lifespan ended), a call still in flight gives
    its connection back to no one: it is closed when the call ends, so the backend sees the
    connection end (no socket left open past the gateway's shutdown)."""
    answered = asyncio.Event()

    async def answer(writer: asyncio.StreamWriter) -> bool:
        await answered.wait()
        return await _ok(writer)

    async def scenario() -> None:
        backend = _Backend(answer)
        async with backend as url:
            pool = UpstreamPool()
            call = asyncio.create_task(pool.post(url, b"{}"))
            for _ in range(500):
                if backend.connections:
                    break
                await asyncio.sleep(0.01)
            await pool.aclose()
            answered.set()
            assert await call == (200, b"{}")  # the call in flight is answered
            done, _ = await asyncio.wait(backend.handlers, timeout=5)
            assert len(done) == 1  # and its connection closed: the backend read its end

    _run(scenario)


_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city, as a short sentence. " * 8,
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}


@pytest.mark.parametrize("field", ["tools", "functions"])
def test_a_calls_tool_definitions_are_reserved_as_prompt(tmp_path: Path, field: str) -> None:
    """Kills: ``_prompt_estimate`` leaving out the body's ``tools`` (or legacy ``functions``).

    Rule: a chat template renders the tool definitions into the prompt, so the prompt reserved
    (and charged, when the answer reports no completion count) counts them at four characters a
    token, as the messages; a call with 600 characters of tool definitions holds more than the
    same call without them."""
    definitions = [_TOOL if field == "tools" else _TOOL["function"]]
    body = _r16_body(**{field: definitions})
    tools_text = json.dumps(definitions, separators=(",", ":"), ensure_ascii=False)
    reserved = estimate_tokens(prompt_text(body["messages"])) + estimate_tokens(tools_text) + 8
    assert reserved > R16_RESERVED + 100
    backend = _NoCompletionCount()
    try:
        with _r16_gateway(tmp_path, backend) as env:
            backend.mode = "json_no_completion"
            spent = env.spent()
            answer = env.post(body)
            assert answer.status_code == 200, answer.text
            (outcome,) = _settled(env, 1)
            assert outcome.status == "ok"
            assert env.spent() == spent + reserved
    finally:
        backend.close()
