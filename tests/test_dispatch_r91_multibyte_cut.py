"""Review R91: an error body cut at the read inside a character quotes no start of the prompt.

R90 left out the end of a body cut at the read (its first 1,024 bytes) where a prompt's start
stood there, too short to be found. The bytes were decoded with ``errors="replace"`` first, so a
cut inside a character of two bytes or more ended the text with U+FFFD, which no prompt starts
with: the prompt's start before it was quoted (``HTTP 400: <pre> Паро�``), for half of the cuts
of a Cyrillic prompt, on every client path. A body cut at the read is now decoded less the
bytes of a character cut in two at its end (``_excerpt``).

Since a regression review of R91 a body longer than 1,024 bytes is read and scrubbed a little
past them, so an echo across that cut is redacted whole; the body here comes in two writes, its
first 1,024 bytes alone, so it is cut at the read.
"""

from __future__ import annotations

from typing import Any

import pytest
from test_dispatch_r90b_first_piece_cut import _refused, _server

PROMPT = "Пароль от банка: 4111 1111 1111 1111"
"""Every letter of its first word two bytes long in UTF-8."""


def _body(cut_in_letter: bool) -> bytes:
    """A 400 page whose first 1,024 bytes end after the prompt's first four letters, and one byte
    of the fifth where ``cut_in_letter``; white space before them folds to one space."""
    start = PROMPT[:4].encode() + (PROMPT[4].encode()[:1] if cut_in_letter else b"")
    head = b"<pre>\n"
    return head + b"\n" * (1024 - len(head) - len(start)) + PROMPT.encode() + b"</pre>" + b" " * 1000


@pytest.mark.parametrize("cut_in_letter", [False, True], ids=["between-letters", "inside-a-letter"])
@pytest.mark.parametrize("path", ["httpx", "aiohttp", "pool"])
async def test_a_prompt_start_cut_inside_a_character_is_not_quoted(path: str, cut_in_letter: bool) -> None:
    payload: dict[str, Any] = {
        "model": "m",
        "messages": [{"role": "user", "content": PROMPT}],
        "max_tokens": 8,
    }
    body = _body(cut_in_letter)
    async with _server(body[:1024], body[1024:]) as url:
        message = await _refused(url, path, False, payload)
    assert message.endswith("rejected the request: HTTP 400: <pre>"), message
    assert "Пар" not in message and "\ufffd" not in message, message
