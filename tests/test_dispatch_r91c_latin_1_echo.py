"""Regression review of R91b: an echo of the prompt in a refused header line written in Latin-1
is redacted.

A parser quotes the line it refused with ``repr`` of its bytes, and R91b looked for the prompt
there as ``repr`` writes its UTF-8 bytes only. Python's ``http.server`` writes header values in
Latin-1 (and httpx and aiohttp read a ``Content-Encoding`` so, ``_latin_1_where_not_utf_8``), so
a backend echoing ``Résumé: card 4111 ...`` into a header had h11 quote
``bytearray(b'x-echo R\\xe9sum\\xe9: card 4111 ...')`` and the card number was quoted. The
prompt is now also looked for as ``repr`` writes its Latin-1 bytes (of its start up to a
character Latin-1 has not).
"""

from __future__ import annotations

import asyncio

import httpx
import pytest
from test_dispatch_backends import _client_on, _read_request

from agentgate.dispatch.backends import _failure_text
from agentgate.errors import BackendFailed

PROMPTS = {
    "latin-1": "Résumé: card 4111 1111 1111 1111 exp 09/29",
    "latin-1-then-past-it": "Résumé: card 4111 1111 1111 1111 for Łukasz",
}


def _payload(prompt: str) -> dict[str, object]:
    return {"model": "m", "max_tokens": 8, "messages": [{"role": "user", "content": prompt}]}


@pytest.mark.parametrize("prompt", PROMPTS.values(), ids=PROMPTS.keys())
def test_a_latin_1_echo_in_a_refused_line_is_redacted(prompt: str) -> None:
    echoed = prompt.encode("latin-1", "ignore").split(b" for")[0]
    line = bytearray(b"x-echo " + echoed)
    said = _failure_text(httpx.RemoteProtocolError(f"illegal header line: {line!r}"), _payload(prompt))
    assert said == "RemoteProtocolError: illegal header line: bytearray(b'x-echo [redacted]')", said


@pytest.mark.parametrize("path", ["httpx", "aiohttp"])
async def test_a_backend_echoing_the_prompt_into_a_header_in_latin_1_has_it_redacted(path: str) -> None:
    prompt = PROMPTS["latin-1"]

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nx-echo " + prompt.encode("latin-1") + b"\r\n\r\n")
        await writer.drain()
        writer.close()

    async with _client_on(path, answer) as client, asyncio.timeout(10):
        with pytest.raises(BackendFailed) as raised:
            await client.chat(_payload(prompt))
    message = str(raised.value)
    assert "[redacted]" in message, message
    assert "4111" not in message and "sum\\xe9" not in message, message
