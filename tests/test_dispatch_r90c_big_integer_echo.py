"""Regression review of R90b: a prompt starting with a number too big for 64 bits, echoed as a JSON
number of the backend's answer, is not quoted.

R90b scrubbed the ``repr`` of a number as a text. orjson reads an integer past 64 bits as a float,
whose ``repr`` (``9.876543210987654e+19``) no longer reads as the digits written, so a prompt
``98765432109876543210 is my account number`` echoed as ``usage.prompt_tokens`` had 16 of its
digits quoted. A float of a whole number is now also scrubbed by its integer text, and redacted
whole where that holds a prompt's start.
"""

from __future__ import annotations

import json
from typing import Any

import _http
import orjson
import pytest
from test_dispatch_backends import Raw, _client, raw  # noqa: F401 (the fixture)

from agentgate.dispatch._redaction import _quoted_echo
from agentgate.errors import BackendFailed

DIGITS = "98765432109876543210"
PROMPT = f"{DIGITS} is my account number"
STOP = {"index": 0, "message": {"content": "x"}, "finish_reason": "stop"}


def _request(prompt: str = PROMPT) -> dict[str, Any]:
    return {"model": "m", "messages": [{"role": "user", "content": prompt}], "max_tokens": 8}


_STOP = json.dumps(STOP)
_ECHO_STOP = _STOP.replace('"stop"', DIGITS)
BODIES = {  # each echoing the prompt's number as a JSON integer
    "prompt-tokens": f'{{"choices": [{_STOP}], "usage": {{"prompt_tokens": {DIGITS}}}}}',
    "usage-list": f'{{"choices": [{_STOP}], "usage": [{DIGITS}]}}',
    "finish-reason": f'{{"choices": [{_ECHO_STOP}]}}',
}


@pytest.mark.parametrize("body", BODIES.values(), ids=BODIES.keys())
async def test_a_prompt_echoed_as_an_integer_past_64_bits_is_not_quoted(
    raw: Raw,  # noqa: F811 (the fixture)
    body: str,
) -> None:
    raw.chat(body.encode())
    async with _http.AsyncClient() as http:
        with pytest.raises(BackendFailed) as raised:
            await _client(raw, http).chat(_request())
    message = str(raised.value)
    assert "[redacted]" in message, message
    assert "98765432" not in message and "9.8765432" not in message, message


def test_a_float_read_from_a_long_integer_is_redacted_by_its_integer_text() -> None:
    value = orjson.loads(f'{{"n": {DIGITS}, "kept": [1e+20, 2.5]}}')
    assert isinstance(value["n"], float)
    assert _quoted_echo(value, _request(), 200) == "{'n': [redacted], 'kept': [1e+20, 2.5]}"
