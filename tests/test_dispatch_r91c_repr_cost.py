"""Regression review of R91b: the prompt is written as ``repr`` writes it only where a failure's
text may hold it so, and only as far as the text read could hold.

R91b looked for the prompt and the key also as ``repr`` writes them in a transport failure's
text (a parser's refusal quotes the line it refused as ``bytearray(b'...')``), and wrote those
forms of every whole message, a character at a time, on every transport failure: a refused
connection with a conversation of 2 MB past ASCII held the event loop 2.6 s (0.03 s before), a
parser's refusal with 100,000 short messages 12 s. The forms are now written only where the
text read holds a backslash (every escape starts with one) and a quote (``b'`` for the forms of
bytes), from each text cut to the length read (1,024 characters and 16 past them). Sizes and
calls are compared here, not times.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Iterator

import _http
import aiohttp
import httpx
import pytest

from agentgate.dispatch import _redaction, inventory_from_mapping
from agentgate.dispatch._redaction import _SEEN_PAST_THE_CUT
from agentgate.dispatch.backends import _QUOTED, BackendClient, _failure_text
from agentgate.errors import BackendFailed

PROMPT = "Пароль пользователя: don't send C:\\Users\\ann\\card 4111 1111 1111 1111. " * 700
"""A message of 50,000 characters past ASCII, holding a quote and backslashes: every form differs."""
PAYLOAD = {
    "model": "m",
    "max_tokens": 8,
    "messages": [{"role": "user", "content": f"{n} {PROMPT}"} for n in range(4)],
}


@pytest.fixture
def written(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The length of each text ``_repr_written`` is given."""
    lengths: list[int] = []
    original = _redaction._repr_written

    def measured(text: str, of_bytes: bool) -> list[str]:
        lengths.append(len(text))
        return original(text, of_bytes)

    monkeypatch.setattr(_redaction, "_repr_written", measured)
    return lengths


@pytest.fixture
def refusing_port() -> Iterator[int]:
    """A loopback port bound but not listening: a connection to it is refused."""
    with socket.socket() as bound:
        bound.bind(("127.0.0.1", 0))
        yield int(bound.getsockname()[1])


@pytest.mark.parametrize("path", ["httpx", "aiohttp"])
async def test_a_refused_connection_writes_no_form_of_the_prompt(
    written: list[int], refusing_port: int, path: str
) -> None:
    backend = {"name": "b0", "url": f"http://127.0.0.1:{refusing_port}", "engine": "vllm", "models": ["m"]}
    async with _http.AsyncClient() as http, aiohttp.ClientSession() as session, asyncio.timeout(10):
        client = BackendClient(
            inventory_from_mapping({"backends": [backend]}).backends[0],
            http,
            session=session if path == "aiohttp" else None,
        )
        with pytest.raises(BackendFailed) as raised:
            await client.chat(PAYLOAD)
    assert "b0: Client" in str(raised.value) or "b0: ConnectError" in str(raised.value), raised.value
    assert written == []


@pytest.mark.parametrize(
    "said",
    [
        "All connection attempts failed",
        "Cannot connect to host 127.0.0.1:9 ssl:default [Connect call failed ('127.0.0.1', 9)]",
        "illegal header line: bytearray(b'x-echo plain words')",
    ],
    ids=["httpx-refused", "aiohttp-refused", "a-refused-line-without-escapes"],
)
def test_a_failure_text_without_an_escape_writes_no_form(written: list[int], said: str) -> None:
    assert _failure_text(httpx.ConnectError(said), PAYLOAD) == f"ConnectError: {said}"
    assert written == []


def test_the_forms_are_written_from_as_much_of_each_text_as_is_read(written: list[int]) -> None:
    line = bytearray(b"x-echo " + f"3 {PROMPT}".encode())
    said = _failure_text(httpx.RemoteProtocolError(f"illegal header line: {line!r}"), PAYLOAD)
    assert said.startswith('RemoteProtocolError: illegal header line: bytearray(b"x-echo [redacted]'), said[
        :200
    ]
    assert "4111" not in said and "\\xd0" not in said, said[:200]
    assert written and max(written) <= _QUOTED + _SEEN_PAST_THE_CUT, max(written)
