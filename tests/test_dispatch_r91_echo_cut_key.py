"""Review R91: a value of an answer quoted in a refusal quotes no piece of the API key at its cut.

A ``finish_reason``, a usage count or a choice index of the wrong kind is quoted, at most 80
characters (``_quoted_echo``). R90 scrubbed it of the prompt before the cut, but the key only
after, from the message (``BackendClient._shown``): a start of the key shorter than 8 characters
standing at the cut, or a piece shorter than 16 (an echo of 20 before the cut), was quoted,
where an echo 8 characters earlier was redacted. The value is now scrubbed of the key with the
prompt, before it is cut, in a whole answer and in a stream.
"""

from __future__ import annotations

import json
from typing import Any

import _http
import pytest
from test_dispatch_backends import PAYLOAD, Raw, _client, raw  # noqa: F401 (the fixture)

from agentgate.dispatch._redaction import _quoted_echo
from agentgate.errors import DispatchError

KEY = "Zq7Vw3XkP9mR2tLs8YbN4cHd"
ECHOES = {  # a list whose quote (``['`` and 77 characters) is cut in a piece of the key
    "start-at-the-cut": ["x" * 68 + KEY],
    "inner-piece-at-the-cut": ["x" * 60 + KEY[4:]],
}


def _finish_reason(echo: object, part: str) -> dict[str, Any]:
    return {"choices": [{"index": 0, part: {"content": "x"}, "finish_reason": echo}]}


def _usage(echo: object, part: str) -> dict[str, Any]:
    usage = {"prompt_tokens": echo, "completion_tokens": 1}
    return {**_finish_reason("stop", part), "usage": usage}


def _choice_index(echo: object, part: str) -> dict[str, Any]:
    return {"choices": [{"index": echo, part: {"content": "x"}, "finish_reason": None}]}


FIELDS = {"finish-reason": _finish_reason, "usage": _usage, "choice-index": _choice_index}


def _quotes_no_piece_of_the_key(message: str) -> None:
    assert "xxxxx" in message and "[redact" in message, message
    assert not any(KEY[i : i + 3] in message for i in range(len(KEY) - 2)), message


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
@pytest.mark.parametrize("field", FIELDS.values(), ids=FIELDS.keys())
@pytest.mark.parametrize("echo", ECHOES.values(), ids=ECHOES.keys())
async def test_a_value_quoted_from_the_answer_quotes_no_piece_of_the_key_at_its_cut(
    raw: Raw,  # noqa: F811 (the fixture)
    monkeypatch: pytest.MonkeyPatch,
    echo: object,
    field: Any,
    stream: bool,
) -> None:
    monkeypatch.setenv("R47_BACKEND_KEY", KEY)
    if stream:
        raw.sse("data: " + json.dumps(field(echo, "delta")), "data: [DONE]")
    else:
        raw.chat(json.dumps(field(echo, "message")).encode())
    async with _http.AsyncClient() as http:
        client = _client(raw, http, key=True)
        with pytest.raises(DispatchError) as raised:
            if stream:
                async for _ in client.stream(PAYLOAD):
                    pass
            else:
                await client.chat(PAYLOAD)
    _quotes_no_piece_of_the_key(str(raised.value))


def test_a_value_is_scrubbed_of_the_key_with_no_prompt_to_scrub() -> None:
    """Without a request (no prompt), the key is still scrubbed before the cut."""
    _quotes_no_piece_of_the_key(_quoted_echo(ECHOES["start-at-the-cut"], None, key=KEY))
