"""Review R90: a transport failure's text is scrubbed of the prompt and quoted from its first
1,024 characters only, as an error body is.

An answer the HTTP parser refuses is reported in the parser's words, which quote the line the
backend sent; that text was scrubbed of the prompt whole. Searching it costs up to its length
times the longest echo in it, so a backend answering with one header line of 60,000 characters
that echoed a prompt of one character repeated held the event loop for 1.2 to 2.2 s per attempt
(the reviewer's scratch script), and the whole line was quoted in the failure. Only the start of
the text is scrubbed and quoted now. Sizes are compared here, not times.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from test_dispatch_backends import _client_on, _read_request

from agentgate.dispatch import backends
from agentgate.dispatch.backends import _QUOTED
from agentgate.errors import BackendFailed

ECHO = 60_000


async def _header_echoing_the_prompt(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """A backend answering with one header line of ``ECHO`` ``a``: the prompt, echoed."""
    await _read_request(reader)
    writer.write(b"HTTP/1.1 200 OK\r\n" + b"a" * ECHO + b"\r\n\r\n")
    await writer.drain()
    writer.close()


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
@pytest.mark.parametrize("path", ["httpx", "aiohttp"])
async def test_a_long_refusal_echoing_the_prompt_is_scrubbed_from_its_start_only(
    path: str, stream: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    searched: list[int] = []
    scrub = backends._scrub

    def measured(text: str, key: str | None, prompts: Any = (), *, cut: bool = False) -> str:
        searched.append(len(text))
        return scrub(text, key, prompts, cut=cut)

    monkeypatch.setattr(backends, "_scrub", measured)
    payload = {"model": "m", "messages": [{"role": "user", "content": "a" * ECHO}], "max_tokens": 8}
    async with _client_on(path, _header_echoing_the_prompt) as client, asyncio.timeout(10):
        with pytest.raises(BackendFailed) as raised:
            if stream:
                async for _ in client.stream(payload):
                    pass
            else:
                await client.chat(payload)
    message = str(raised.value)
    assert searched and max(searched) <= _QUOTED, searched
    assert len(message) <= _QUOTED, len(message)
    assert "a" * 8 not in message, message[:300]


def test_a_long_transport_failure_is_quoted_from_its_start() -> None:
    """No prompt: the text is still cut, so that a failure quotes no 60,000 characters."""
    failure = OSError("refused: " + "x" * ECHO)
    said = backends._failure_text(failure, {"model": "m", "messages": []})
    assert said.startswith("OSError: refused: xxx")
    assert len(said) <= _QUOTED + len("OSError: "), len(said)
