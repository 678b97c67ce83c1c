"""A regression review of R89: the prompt is scrubbed from a backend's words only, never from
agentgate's own.

``BackendClient._shown`` scrubbed the prompt from the whole message of an error, so a prompt
starting with words agentgate writes redacted them: ``request 0: hello`` made a stream's failure
read ``no first token within 0.5s of the [redacted](first_token_s)``. The prompt is now scrubbed
where a backend's words enter a message (an error body, an error event, a line that is not SSE, a
value of its answer quoted, a line its parser refused), and the key still from all of it.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import _http
import pytest
from test_dispatch_backends import Raw, raw  # noqa: F401 (the fixture)
from test_dispatch_r61_backend_garbage import NAME, Garbage, dispatcher_of
from test_dispatch_r89_prompt_echo import SECRET, _failure, _leaks

from agentgate.dispatch.backends import BackendClient, Timeouts
from agentgate.dispatch.inventory import inventory_from_mapping
from agentgate.errors import BackendFailed

PROMPT = f"Summarize this for me, with care and at length. My SSN is {SECRET}"
"""A prompt longer than a finish reason may be (64 characters), ending in what must not leak."""


@pytest.fixture
def garbage() -> Iterator[Garbage]:
    made = Garbage()
    yield made
    made.close()


OWN_WORDS: dict[str, tuple[str, bool, str]] = {
    "not-json": ("malformed chat completion, explained at length", False, "b0: malformed chat completion: "),
    "no-done": ("stream ended early: tell me why", True, "b0: stream ended without [DONE]"),
    "http-500": ("HTTP 500 errors: what do they mean?", False, "b0: HTTP 500: oops"),
}
"""For each failure, a prompt starting as agentgate's words for it do, and those words."""


@pytest.mark.parametrize("case", sorted(OWN_WORDS))
async def test_agentgates_own_words_are_not_redacted_for_a_prompt_that_starts_as_they_do(
    raw: Raw,  # noqa: F811 (the fixture)
    case: str,
) -> None:
    prompt, stream, words = OWN_WORDS[case]
    if case == "no-done":
        raw.sse()
    elif case == "http-500":
        raw.chat(b"oops", status=500)
    else:
        raw.chat(b"not json")
    message = await _failure(raw, prompt, stream=stream, raises=BackendFailed)
    assert words in message and "[redacted]" not in message, message


def _whole(choice: dict[str, Any], usage: object) -> str:
    base = {"index": 0, "message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}
    return json.dumps({"choices": [{**base, **choice}], "usage": usage})


def _event(choice: dict[str, Any], usage: object) -> str:
    base = {"index": 0, "delta": {"content": "hi"}, "finish_reason": None}
    return json.dumps({"choices": [{**base, **choice}], "usage": usage})


COUNTS = {"prompt_tokens": 5, "completion_tokens": 2}
ECHOES: dict[str, tuple[dict[str, Any], object, str]] = {
    "finish-reason": ({"finish_reason": PROMPT}, COUNTS, "finish_reason is not a reason"),
    "usage-count": (
        {},
        {**COUNTS, "prompt_tokens": PROMPT},
        "usage prompt_tokens is not a number: '[redacted]'",
    ),
    "usage-list": ({}, [PROMPT], "usage is not an object: ['[redacted]']"),
    "choice-index": ({"index": PROMPT}, COUNTS, "choice index '[redacted]' for a call"),
}
"""Values of an answer that echo the prompt, each with the words its refusal says."""


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
@pytest.mark.parametrize("case", sorted(ECHOES))
async def test_a_quoted_value_echoing_the_prompt_is_scrubbed_of_it(
    raw: Raw,  # noqa: F811 (the fixture)
    case: str,
    stream: bool,
) -> None:
    choice, usage, words = ECHOES[case]
    if stream:
        raw.sse(f"data: {_event(choice, usage)}", "data: [DONE]")
    else:
        raw.chat(_whole(choice, usage).encode())
    message = await _failure(raw, PROMPT, stream=stream, raises=BackendFailed)
    assert words in message and "[redacted]" in message, message
    assert not _leaks(message), message


@pytest.mark.parametrize("client", ["aiohttp", "httpx"])
@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
async def test_a_line_the_parser_refuses_echoing_the_prompt_is_scrubbed_of_it(
    garbage: Garbage, client: str, stream: bool
) -> None:
    """An answer whose first line is the prompt, not a status line: the parser's refusal quotes
    it, and none of the prompt is passed on."""
    garbage.reply = PROMPT.encode() + b"\r\n\r\n"
    payload = {"model": "small", "messages": [{"role": "user", "content": PROMPT}], "max_tokens": 10}
    with pytest.raises(BackendFailed, match=f"{NAME}: ") as raised:
        if client == "aiohttp":
            async with dispatcher_of(garbage.url) as (dispatcher, _):
                if stream:
                    async for _ in dispatcher.stream({**payload, "stream": True}):
                        pass
                else:
                    await dispatcher.chat(payload)
        else:
            backend = inventory_from_mapping(
                {"backends": [{"name": NAME, "url": garbage.url, "engine": "vllm", "models": ["small"]}]}
            ).backends[0]
            async with _http.AsyncClient() as http:
                direct = BackendClient(backend, http, Timeouts(first_token_s=2, idle_s=0.5))
                if stream:
                    async for _ in direct.stream(payload):
                        pass
                else:
                    await direct.chat(payload)
    message = str(raised.value)
    assert "[redacted]" in message and not _leaks(message), message
