"""Regression review of R90: a prompt echoed as a JSON number inside the backend's answer (a
``usage`` count, a ``usage`` given as a list, a ``finish_reason``, a choice index) is not quoted.

R89 scrubbed the ``repr`` of a value that is no text. R90 scrubbed each text inside a value as it
came, but wrote a number as it stood, unscrubbed: a prompt starting with a card number, echoed as
``usage.prompt_tokens``, was quoted whole in the ``BackendFailed`` (``not a token count from 0 to
1000000000: 4111111111111111``), and from there went to logs and the audit outcome. The ``repr``
of a number, ``True`` or ``None`` is now scrubbed as a text is (``_echo_written``).
"""

from __future__ import annotations

import json
from typing import Any

import _http
import pytest
from test_dispatch_backends import Raw, _client, raw  # noqa: F401 (the fixture)

from agentgate.dispatch._redaction import _quoted_echo
from agentgate.errors import BackendFailed

CARD = 4111111111111111
PROMPT = f"{CARD} is my card, charge it"
STOP = {"index": 0, "message": {"content": "x"}, "finish_reason": "stop"}


def _request(prompt: str = PROMPT) -> dict[str, Any]:
    return {"model": "m", "messages": [{"role": "user", "content": prompt}], "max_tokens": 8}


ANSWERS = {
    "prompt-tokens": {"choices": [STOP], "usage": {"prompt_tokens": CARD}},
    "completion-tokens-fraction": {"choices": [STOP], "usage": {"completion_tokens": CARD + 0.5}},
    "usage-list": {"choices": [STOP], "usage": [CARD]},
    "finish-reason": {"choices": [{**STOP, "finish_reason": CARD}]},
    "finish-reason-list": {"choices": [{**STOP, "finish_reason": [1, CARD]}]},
    "choice-index": {"choices": [{**STOP, "index": CARD}]},
}


@pytest.mark.parametrize("answer", ANSWERS.values(), ids=ANSWERS.keys())
async def test_a_prompt_echoed_as_a_number_is_not_quoted(
    raw: Raw,  # noqa: F811 (the fixture)
    answer: dict[str, Any],
) -> None:
    raw.chat(json.dumps(answer).encode())
    async with _http.AsyncClient() as http:
        with pytest.raises(BackendFailed) as raised:
            await _client(raw, http).chat(_request())
    message = str(raised.value)
    assert "[redacted]" in message, message
    assert "41111111" not in message, message


def test_a_number_is_quoted_around_what_is_redacted() -> None:
    value = {"kept": [1, 2.5, None, True, 12345678], "echo": [CARD]}
    assert _quoted_echo(value, _request(), 200) == (
        "{'kept': [1, 2.5, None, True, 12345678], 'echo': [[redacted]]}"
    )
    assert _quoted_echo(CARD, _request()) == "[redacted]"


def test_a_number_that_is_no_echo_is_quoted_as_it_came() -> None:
    assert _quoted_echo(CARD, _request("charge my card")) == str(CARD)
