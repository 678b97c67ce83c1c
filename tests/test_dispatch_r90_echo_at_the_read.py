"""Review R90: the start of a prompt standing at the end of what is read of a backend's words
(the first 1,024 bytes of an error body) is not quoted.

Only the start of the backend's words is scrubbed of the prompt, and a prompt's start of fewer
than 8 characters at its end is too short to be found. R89 made sure that such a start is never
quoted at the 200-character cut of the message, but an error body's runs of white space are
folded after the scrub: a 400 whose HTML body held 1,012 line breaks and then the prompt was
quoted as ``HTTP 400: <pre> 078-05-``. The same stood at the end of what is read of an error
event's message, a line that is not SSE, a value quoted and a refused ``Content-Encoding``, once
an echo before it had shrunk to one ``[redacted]``. What is not redacted of the last 7 characters
of words cut at the read is now left out where a prompt's or the key's start could stand there
(``_scrub``'s ``cut``).
"""

from __future__ import annotations

import json
from typing import Any

import _http
import pytest
from hypothesis import given
from hypothesis import strategies as st
from test_dispatch_backends import Raw, _client, raw  # noqa: F401 (the fixture)
from test_dispatch_r89_redaction_linear import _ALPHABET

from agentgate.dispatch._redaction import _FRAGMENT, _scrub
from agentgate.errors import BackendFailed, DispatchError

SECRET = "078-05-1120"
SHORT = f"{SECRET} is my SSN, keep it"
LONG = f"{SECRET} is my SSN, " + "and keep it to yourself " * 80
"""A prompt longer than what is read of any of the backend's words (1,920 characters)."""


def _payload(prompt: str) -> dict[str, Any]:
    return {"model": "m", "messages": [{"role": "user", "content": prompt}], "max_tokens": 8}


def _then_its_start(read: int) -> str:
    """``LONG`` echoed up to 14 characters before the end of ``read``, then 7 other characters,
    then ``LONG`` again: its start stands in the last 7 characters read."""
    return LONG[: read - 14] + "!" * 7 + LONG


async def _failure(server: Raw, prompt: str, *, stream: bool) -> str:
    async with _http.AsyncClient() as http:
        client = _client(server, http)
        with pytest.raises((BackendFailed, DispatchError)) as raised:
            if stream:
                async for _ in client.stream(_payload(prompt)):
                    pass
            else:
                await client.chat(_payload(prompt))
    return str(raised.value)


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
async def test_a_prompt_after_white_space_at_the_end_of_the_read_is_not_quoted(
    raw: Raw,  # noqa: F811 (the fixture)
    stream: bool,
) -> None:
    """The reviewer's body: 1,012 line breaks fold to one space, and what stood at the end of the
    1,024 bytes quoted is next to ``<pre>``. Since a regression review of R91 the body is
    scrubbed a little past those 1,024 bytes, so the echo standing across them is redacted whole."""
    raw.chat(b"<pre>" + b"\n" * 1012 + SHORT.encode() + b"</pre>", status=400)
    message = await _failure(raw, SHORT, stream=stream)
    assert message.endswith("rejected the request: HTTP 400: <pre> [redacted]"), message
    assert SECRET[:3] not in message, message


def _error_body(server: Raw) -> None:
    server.chat(_then_its_start(1024).encode(), status=400)


def _error_event(server: Raw) -> None:
    server.chat(json.dumps({"object": "error", "message": _then_its_start(1024)}).encode())


def _line_not_sse(server: Raw) -> None:
    server.sse(_then_its_start(1024), "data: [DONE]")


def _finish_reason(server: Raw) -> None:
    choice = {"message": {"content": "x"}, "finish_reason": _then_its_start(1280)}
    server.chat(json.dumps({"choices": [choice]}).encode())


def _content_encoding(server: Raw) -> None:
    # 40 characters are quoted, scrubbed with a few past them (a regression review of R91).
    server.chat(b"{}", **{"content-encoding": _then_its_start(40)})


WORDS = {  # what answers (each read to its own length), and whether the call streams
    "error-body": (_error_body, False),
    "error-event": (_error_event, False),
    "line-not-sse": (_line_not_sse, True),
    "finish-reason": (_finish_reason, False),
    "content-encoding": (_content_encoding, False),
}


@pytest.mark.parametrize(("answer", "stream"), WORDS.values(), ids=WORDS.keys())
async def test_a_prompt_starting_in_the_last_characters_read_is_not_quoted(
    raw: Raw,  # noqa: F811 (the fixture)
    answer: Any,
    stream: bool,
) -> None:
    """An echo of the prompt shrinks to one ``[redacted]``, which brings what follows it, up to
    the end of what is read, into the quote: the prompt's start standing there is not quoted
    (redacted whole since a regression review of R91, which scrubs a little past the cut)."""
    answer(raw)
    message = await _failure(raw, LONG, stream=stream)
    assert "[redacted]!!!!!!!" in message, message
    assert SECRET[:5] not in message, message


def _covered(text: str, key: str | None, prompts: list[str]) -> list[bool]:
    """Which characters of ``text`` a start of ``key`` or of a prompt ``_FRAGMENT`` long or more,
    or a piece of ``key`` twice that long, covers (the rule, read plainly)."""
    covered = [False] * len(text)
    for i in range(len(text)):
        for secret in [p for p in [*prompts, key or ""] if len(p) >= _FRAGMENT]:
            alike = 0
            while i + alike < len(text) and alike < len(secret) and text[i + alike] == secret[alike]:
                alike += 1
            if alike >= _FRAGMENT:
                covered[i : i + alike] = [True] * alike
        size = min(2 * _FRAGMENT, len(key or ""))
        if key and len(key) >= _FRAGMENT and i + size <= len(text) and text[i : i + size] in key:
            covered[i : i + size] = [True] * size
    return covered


@given(
    text=st.text(alphabet=_ALPHABET, max_size=40),
    prompts=st.lists(st.text(alphabet=_ALPHABET, min_size=1, max_size=16), max_size=4),
    key=st.none() | st.text(alphabet="ab", min_size=1, max_size=16),
)
def test_words_cut_lose_what_is_not_redacted_of_their_last_characters(
    text: str, prompts: list[str], key: str | None
) -> None:
    """``cut``: the scrub of the whole, less the longest end of the last ``_FRAGMENT - 1``
    characters that nothing covers and that a prompt or the key ``_FRAGMENT`` long or more starts
    with (a regression review of R90b: until then all of them were left out, the backend's own
    words too)."""
    covered = _covered(text, key, prompts)
    uncovered = 0
    while uncovered < min(len(text), _FRAGMENT - 1) and not covered[len(text) - 1 - uncovered]:
        uncovered += 1
    secrets = [p for p in [*prompts, key or ""] if len(p) >= _FRAGMENT]
    left_out = max(
        (n for n in range(1, uncovered + 1) if any(p.startswith(text[len(text) - n :]) for p in secrets)),
        default=0,
    )
    whole = _scrub(text, key, prompts)
    assert _scrub(text, key, prompts, cut=True) == whole[: len(whole) - left_out]
