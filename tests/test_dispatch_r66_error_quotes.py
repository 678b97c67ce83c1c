"""Review R66: the start of a backend's error answer is quoted with its unprintable characters
escaped. Real HTTP on 127.0.0.1, over the dispatcher's aiohttp session, streamed or not."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from test_dispatch_r61_backend_garbage import PAYLOAD, Garbage, dispatcher_of
from test_gateway_hostile_backends import _json

from agentgate.errors import BackendFailed, DispatchError

HOSTILE = "busy \x1b[2J\x1b]0;owned\x07 \u202eoverloaded\u2066 \x00end".encode()
"""An error body holding a terminal escape (clear the screen, set the window title), a bell, a
bidi override and isolate, and a NUL: none is white space, which the quote already folds."""


@pytest.fixture
def garbage() -> Iterator[Garbage]:
    made = Garbage()
    yield made
    made.close()


@pytest.mark.parametrize("streamed", [False, True])
@pytest.mark.parametrize(
    ("status", "error"), [("503 Service Unavailable", BackendFailed), ("400 Bad Request", DispatchError)]
)
async def test_an_error_body_is_quoted_with_its_unprintable_characters_escaped(
    garbage: Garbage, status: str, error: type[DispatchError], streamed: bool
) -> None:
    """Review R66: an error answer's body was quoted as it came, but for its white space: a
    backend answering ``503`` (or ``400``) with a terminal escape, a bidi override or a NUL in
    its body had them in the ``BackendFailed`` (``DispatchError``), which the gateway logs and
    the model call's audit outcome records (and a 400's words reach the caller): a log read in a
    terminal cleared the screen, retitled the window, or showed reordered text. Each is written
    as its escape now, as the escape in a ``finish_reason`` or an error event already was."""
    garbage.reply = _json(HOSTILE, status, "text/plain")
    async with dispatcher_of(garbage.url) as (dispatcher, _):
        with pytest.raises(error) as caught:
            if streamed:
                async for _ in dispatcher.stream({**PAYLOAD, "stream": True}):
                    pass
            else:
                await dispatcher.chat(PAYLOAD)
    message = str(caught.value)
    assert message.isprintable(), repr(message)
    assert "busy \\x1b[2J\\x1b]0;owned\\x07 \\u202eoverloaded\\u2066 \\x00end" in message, message


async def test_a_printable_error_body_is_quoted_as_it_came(garbage: Garbage) -> None:
    """The rule's other side: printable text (accents, CJK, a backslash) is quoted unchanged."""
    garbage.reply = _json("café 服务器 C:\\temp busy".encode(), "503 Service Unavailable", "text/plain")
    async with dispatcher_of(garbage.url) as (dispatcher, _):
        with pytest.raises(BackendFailed) as caught:
            await dispatcher.chat(PAYLOAD)
    assert "HTTP 503: café 服务器 C:\\temp busy" in str(caught.value), str(caught.value)
