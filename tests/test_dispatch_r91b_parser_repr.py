"""Regression review of R91: a line the HTTP parser refused, quoted with ``repr``, quotes no echo
of the prompt or the API key.

h11 quotes the line it refuses as ``bytearray(b'...')`` and aiohttp's parser as ``b'...'``: each
byte past ASCII is written as its escape (``\\xd0\\x9f``), a backslash doubled and a quote ``'``
escaped where the line holds both kinds of quote. ``_failure_text`` looked for the prompt and the
key as sent, so an echo of a prompt past ASCII, or of a prompt or key holding a backslash or a
quote, was quoted. They are now also looked for as ``repr`` writes them (``_repr_texts``).
"""

from __future__ import annotations

import asyncio
import os

import _http
import aiohttp
import httpx
import pytest
from _raw_server import RawServer
from test_dispatch_backends import _read_request

from agentgate.dispatch import inventory_from_mapping
from agentgate.dispatch.backends import BackendClient, _failure_text
from agentgate.errors import DispatchError

PROMPTS = {
    "past-ascii": "Пароль от банка: 4111 1111 1111 1111",
    "a-backslash": "C:\\Users\\ann\\card 4111 1111 1111 1111",
    "both-quotes": 'it\'s "4111 1111 1111 1111", my card',
    "a-tab": "card\t4111 1111 1111 1111 exp 09/29",
}
KEY = "Zq7Vw3Xk'P9mR2tLs\\8YbN4cHd"
"""A key holding a quote and a backslash."""


def _payload(prompt: str) -> dict[str, object]:
    return {"model": "m", "messages": [{"role": "user", "content": prompt}], "max_tokens": 8}


@pytest.mark.parametrize("prompt", PROMPTS.values(), ids=PROMPTS.keys())
def test_an_echo_of_the_prompt_in_a_refused_line_is_redacted(prompt: str) -> None:
    line = bytearray(b"x-echo " + prompt.encode())
    said = _failure_text(httpx.RemoteProtocolError(f"illegal header line: {line!r}"), _payload(prompt))
    assert (
        said.startswith("RemoteProtocolError: illegal header line: bytearray(b")
        and "x-echo [redacted]" in said
    ), said
    assert "4111" not in said, said


@pytest.mark.parametrize("quotes", ["", '"'], ids=["quoted-with-double", "quoted-with-single"])
def test_an_echo_of_the_key_in_a_refused_line_is_redacted(quotes: str) -> None:
    """A line with no ``"`` is quoted with ``"`` and its ``'`` left bare; else ``'`` is escaped."""
    line = bytearray(f"x-echo {quotes}{KEY}".encode())
    said = _failure_text(httpx.RemoteProtocolError(f"illegal header line: {line!r}"), _payload("hi"), KEY)
    assert "[redacted]" in said, said
    assert "P9mR" not in said and "YbN4" not in said, said


def test_an_echo_as_sent_is_still_redacted() -> None:
    prompt = PROMPTS["past-ascii"]
    said = _failure_text(httpx.RemoteProtocolError(f"bad line: x {prompt}"), _payload(prompt))
    assert said == "RemoteProtocolError: bad line: x [redacted]", said


@pytest.mark.parametrize("path", ["httpx", "aiohttp"])
@pytest.mark.parametrize("echo", ["prompt", "key"])
async def test_a_backend_echoing_into_a_refused_header_line_has_it_redacted(
    monkeypatch: pytest.MonkeyPatch, path: str, echo: str
) -> None:
    prompt = PROMPTS["past-ascii"]

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _read_request(reader)
        said = prompt if echo == "prompt" else os.environ["R91B_KEY"]
        writer.write(b"HTTP/1.1 200 OK\r\nx-echo " + said.encode() + b"\r\n\r\n")
        await writer.drain()
        writer.close()

    monkeypatch.setenv("R91B_KEY", KEY)
    server = RawServer(answer)
    url = f"http://127.0.0.1:{await server.start()}"
    backend = {"name": "b0", "url": url, "engine": "vllm", "models": ["m"], "api_key_env": "R91B_KEY"}
    try:
        async with _http.AsyncClient() as http, aiohttp.ClientSession() as session, asyncio.timeout(10):
            client = BackendClient(
                inventory_from_mapping({"backends": [backend]}).backends[0],
                http,
                session=session if path == "aiohttp" else None,
            )
            with pytest.raises(DispatchError) as raised:
                await client.chat(_payload(prompt))
    finally:
        await server.stop()
    message = str(raised.value)
    assert "x-echo [redacted]" in message, message
    assert "4111" not in message and "\\xd0" not in message, message
    assert "P9mR" not in message and "YbN4" not in message, message
