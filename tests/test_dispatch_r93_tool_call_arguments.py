"""Review R93: a backend's error echoing a tool call's arguments, a reasoning text or a refusal
of the conversation is scrubbed of them.

The prompt texts scrubbed from a backend's words (``_prompt_texts``) were each message's content
only: an assistant message's ``tool_calls[].function.arguments`` (model output built from the
user's data: a card number, an address, the values the policy keeps out of the audit log),
its ``reasoning`` / ``reasoning_content`` and its ``refusal``, and a deprecated
``function_call``'s arguments were quoted in full when a 400 or 422 echoed them,
into the ``DispatchError``, the gateway's log and the model call's audit outcome, while the same
echo of a tool message's content was redacted. They are now prompt texts like the content.
"""

from __future__ import annotations

import json
from typing import Any

import _http
import pytest
from test_dispatch_backends import Raw, _client, raw  # noqa: F401 (the fixture)

from agentgate.errors import DispatchError

SECRET = "078-05-1120 card 4111111111111111"
ARGUMENTS = json.dumps({"card": "4111111111111111", "ssn": "078-05-1120", "note": SECRET})


def _assistant(field: str) -> dict[str, Any]:
    """An assistant message holding ``SECRET`` in ``field`` only."""
    function = {"name": "pay", "arguments": ARGUMENTS}
    if field == "arguments":
        call = {"id": "c1", "type": "function", "function": function}
        return {"role": "assistant", "content": None, "tool_calls": [call]}
    if field == "function_call":  # deprecated, as tool_calls (a regression review of R93)
        return {"role": "assistant", "content": None, "function_call": function}
    return {"role": "assistant", "content": "ok", field: f"The user's record: {SECRET}"}


FIELDS = ["arguments", "function_call", "reasoning", "reasoning_content", "refusal"]


def _leaks(message: str) -> bool:
    """Whether ``message`` holds 5 characters or more of ``SECRET``."""
    return any(SECRET[i : i + 5] in message for i in range(len(SECRET) - 4))


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
@pytest.mark.parametrize("field", FIELDS)
async def test_an_echo_of_an_assistant_messages_texts_is_not_quoted(
    raw: Raw,  # noqa: F811 (the fixture)
    field: str,
    stream: bool,
) -> None:
    assistant = _assistant(field)
    echoed = ARGUMENTS if field in ("arguments", "function_call") else assistant[field]
    request = {
        "model": "m",
        "messages": [{"role": "user", "content": "pay my bill please"}, assistant],
        "max_tokens": 8,
    }
    raw.chat(
        json.dumps({"object": "error", "message": f"could not render {echoed}", "code": 400}).encode(), 400
    )
    async with _http.AsyncClient() as http:
        client = _client(raw, http)
        with pytest.raises(DispatchError) as raised:
            if stream:
                async for _ in client.stream(request):
                    pass
            else:
                await client.chat(request)
    message = str(raised.value)
    assert "could not render" in message and "[redacted]" in message, message
    assert not _leaks(message), message
