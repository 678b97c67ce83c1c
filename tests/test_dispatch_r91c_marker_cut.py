"""Regression review of R91b: a refused ``Content-Encoding`` keeps the encoding's name after a
long echo, and no quote ends in half a marker.

R91b scrubbed a refused ``Content-Encoding`` from its first 40 characters (and 16 past them), so
where an echo of the prompt before the encoding's name shrank to one marker, the name was lost
(``[redacted]``, where before it read ``[redacted], gzip``). Its first 640 characters are now
scrubbed (with 16 past them) and 40 characters of what that writes quoted. And each quote was cut
after the scrub, so an echo begun just before the cut ended the message in half a marker
(``...xxx[red``): a marker standing across a cut is now kept whole.
"""

from __future__ import annotations

import httpx
import pytest

from agentgate.dispatch import inventory_from_mapping
from agentgate.dispatch._answers import _reject_error
from agentgate.dispatch._sse import _line_shown
from agentgate.dispatch._transport import WholeBody
from agentgate.dispatch.backends import _QUOTED, BackendClient, _encoding_shown, _failure_text
from agentgate.errors import BackendFailed

PROMPT = "Summarise the quarterly report for the board, all of it please."
PAYLOAD = {"model": "m", "messages": [{"role": "user", "content": PROMPT}], "max_tokens": 8}
KEY = "Zq7Vw3XkP9mR2tLs8YbN4cHd"


@pytest.mark.parametrize(
    "echo", [PROMPT * 2, PROMPT * 9, PROMPT + KEY], ids=["twice", "nine-times", "and-the-key"]
)
def test_a_refused_encoding_after_a_long_echo_keeps_its_name(echo: str) -> None:
    assert _encoding_shown(f"{echo}, gzip", PAYLOAD, KEY) == "[redacted], gzip"


def test_a_refused_encoding_is_still_quoted_40_characters() -> None:
    assert _encoding_shown("gzip, " + "x" * 100, PAYLOAD, KEY) == "gzip, " + "x" * 34


@pytest.mark.parametrize("before_cut", [1, 4, 9])
def test_a_failure_text_never_ends_in_half_a_marker(before_cut: int) -> None:
    refusal = httpx.RemoteProtocolError("illegal header line: " + "x" * (_QUOTED - 21 - before_cut) + PROMPT)
    said = _failure_text(refusal, PAYLOAD)
    assert said.endswith("xxx[redacted]"), said[-30:]


@pytest.mark.parametrize("before_cut", [1, 4, 9])
def test_an_error_body_never_ends_in_half_a_marker(before_cut: int) -> None:
    backend = {"name": "b0", "url": "http://127.0.0.1:9", "engine": "vllm", "models": ["m"]}
    client = BackendClient(inventory_from_mapping({"backends": [backend]}).backends[0], httpx.AsyncClient())
    body = WholeBody(b"<pre>" + b"x" * (200 - 5 - before_cut) + PROMPT.encode() + b"</pre>")
    assert client._excerpt(body, PAYLOAD).endswith("xxx[redacted]")


@pytest.mark.parametrize("before_cut", [1, 4, 9])
def test_an_error_event_and_a_line_not_sse_never_end_in_half_a_marker(before_cut: int) -> None:
    with pytest.raises(BackendFailed) as raised:
        _reject_error("b0", {"error": {"message": "x" * (200 - before_cut) + PROMPT}}, None, PAYLOAD)
    assert str(raised.value).endswith("xxx[redacted]'"), str(raised.value)[-30:]
    assert _line_shown("x" * (80 - before_cut) + PROMPT, None, [PROMPT]).endswith("xxx[redacted]'")
