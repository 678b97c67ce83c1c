"""Regression review of R91: no inner piece of the API key is quoted where a quote of the
backend's words is cut.

Every quote of the backend's words cut them to a bound first (1,024 characters of a transport
failure's text, an error event's message or a line that is not SSE, 1,280 of a value quoted, 40
of a refused ``Content-Encoding`` once an echo before them shrank, 1,024 bytes of an error body)
and scrubbed the cut text as cut (``_scrub``'s ``cut``), which hides only a start of the key or a
prompt at the cut: a piece of the key that is not its start is redacted only where it is 16
characters long, so an echo of the key less its first 4 characters, begun up to 15 characters
before the cut, had them quoted. The scrub now reads a little past the cut and writes only what
stands before it (``_scrub_start``, ``_excerpt``): an echo across the cut is redacted whole.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import httpx
import pytest
from test_dispatch_backends import _read_request
from test_dispatch_r91_encoding_key_cut import _client_answered

from agentgate.dispatch._redaction import _quoted_echo, _scrub_start
from agentgate.dispatch.backends import _QUOTED, BackendClient, _encoding_shown, _failure_text
from agentgate.errors import DispatchError

KEY = "Zq7Vw3XkP9mR2tLs8YbN4cHd"
ECHOES = {"the-key": KEY, "the-key-less-its-start": KEY[4:]}
BEFORE_CUT = [1, 3, 7, 8, 12, 15]
"""How many characters of the echo stand before the cut."""
PROMPT = "Summarise the quarterly report for the board, " * 30
"""A prompt of 1,380 characters: its echo shrinks to one ``[redacted]``."""
PAYLOAD = {"model": "m", "messages": [{"role": "user", "content": PROMPT}], "max_tokens": 8}


def _pieces(text: str, shortest: int = 3) -> list[str]:
    """Every piece of ``KEY`` of ``shortest`` (3) characters or more found in ``text`` (also
    tests/test_dispatch_r91b_failure_text_key.py's and tests/test_dispatch_r91c_key_piece_at_the_read.py's)."""
    return [
        KEY[i : i + n]
        for n in range(shortest, len(KEY) + 1)
        for i in range(len(KEY) - n + 1)
        if KEY[i : i + n] in text
    ]


@pytest.mark.parametrize("before_cut", BEFORE_CUT)
@pytest.mark.parametrize("echo", ECHOES.values(), ids=ECHOES.keys())
def test_a_parser_refusal_quotes_no_piece_of_the_key_at_its_cut(echo: str, before_cut: int) -> None:
    refusal = httpx.RemoteProtocolError("illegal header line: " + "x" * (_QUOTED - 21 - before_cut) + echo)
    said = _failure_text(refusal, PAYLOAD, KEY)
    assert said.startswith("RemoteProtocolError: illegal header line: xxx"), said
    assert not _pieces(said), said


@pytest.mark.parametrize("before_cut", BEFORE_CUT)
@pytest.mark.parametrize("echo", ECHOES.values(), ids=ECHOES.keys())
def test_a_quote_cut_after_an_echo_of_the_prompt_shrank_shows_no_piece_of_the_key(
    echo: str, before_cut: int
) -> None:
    """The prompt's echo becomes one marker, which brings the cut within what a message quotes
    (an error event's 200 characters, a line's 80)."""
    words = PROMPT[: 1024 - before_cut] + echo + " and more"
    said = _scrub_start(words, KEY, [PROMPT], 1024)
    assert said.startswith("[redacted]"), said
    assert not _pieces(said[:200]), said


@pytest.mark.parametrize("before_cut", BEFORE_CUT)
@pytest.mark.parametrize("echo", ECHOES.values(), ids=ECHOES.keys())
def test_a_value_quoted_shows_no_piece_of_the_key_at_its_cut(echo: str, before_cut: int) -> None:
    value = [PROMPT[: 16 * 80 - before_cut] + echo]
    said = _quoted_echo(value, PAYLOAD, key=KEY)
    assert said.startswith("['[redacted]"), said
    assert not _pieces(said), said


@pytest.mark.parametrize("before_cut", BEFORE_CUT)
@pytest.mark.parametrize("echo", ECHOES.values(), ids=ECHOES.keys())
def test_a_refused_encoding_shows_no_piece_of_the_key_past_a_long_echo(echo: str, before_cut: int) -> None:
    said = _encoding_shown(PROMPT[: 640 - before_cut] + echo + "-gzip", PAYLOAD, KEY)
    assert said.startswith("[redacted]"), said
    assert not _pieces(said), said


@contextlib.asynccontextmanager
async def _keyed_client(
    path: str, body: bytes, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[BackendClient]:
    """A ``BackendClient`` with the API key ``KEY``, over ``path``, of a loopback backend
    answering 503 with ``body``, whole in one write."""

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _read_request(reader)
        writer.write(
            b"HTTP/1.1 503 Busy\r\ncontent-length: %d\r\nconnection: close\r\n\r\n%s" % (len(body), body)
        )
        await writer.drain()
        writer.close()

    monkeypatch.setenv("R91B_KEY", KEY)
    async with _client_answered(path, answer, "R91B_KEY") as client:
        yield client


@pytest.mark.parametrize("stream", [False, True], ids=["chat", "stream"])
@pytest.mark.parametrize("path", ["httpx", "aiohttp", "gateway-pool"])
@pytest.mark.parametrize("before_cut", [3, 15])
@pytest.mark.parametrize("echo", ECHOES.values(), ids=ECHOES.keys())
async def test_an_error_body_quotes_no_piece_of_the_key_at_its_cut(
    monkeypatch: pytest.MonkeyPatch, echo: str, before_cut: int, path: str, stream: bool
) -> None:
    """White space before the cut folds to one space, which brings the cut within the 200
    characters quoted."""
    body = b"<pre>" + b"\n" * (_QUOTED - 5 - before_cut) + echo.encode() + b"</pre>" + b" " * 200
    async with _keyed_client(path, body, monkeypatch) as client, asyncio.timeout(10):
        with pytest.raises(DispatchError) as raised:
            if stream:
                async for _ in client.stream({"model": "m", "messages": [{"role": "user", "content": "hi"}]}):
                    pass
            else:
                await client.chat({"model": "m", "messages": [{"role": "user", "content": "hi"}]})
    message = str(raised.value)
    assert message.endswith("HTTP 503: <pre> [redacted]"), message
    assert not _pieces(message), message


def test_what_is_not_the_key_at_the_cut_is_still_quoted() -> None:
    """Words past the cut are read, never quoted: a quote of 1,024 characters stays 1,024."""
    words = "x" * 1020 + "abcdefgh" * 10
    assert _scrub_start(words, KEY, [PROMPT], 1024) == "x" * 1020 + "abcd"
