"""Regression review of R89: a whole (not streamed) answer's body was quoted for a message
(``BackendClient._excerpt``: the prompt's message texts gathered and the body's first 1 KB
scrubbed of them) before its status was read, a success's too, whose quote was then thrown away:
up to a millisecond of the event loop for every ``Dispatcher.chat`` and non-streamed gateway call.
Only an error's body is quoted now, as a stream's head already was (docs/dispatch.md)."""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from typing import Any

import _http
import pytest
from test_dispatch_backends import Raw, _client

from agentgate.dispatch import backends
from agentgate.errors import BackendFailed

PROMPT = 'Summarize "this" for me, café naïve: my SSN is 078-05-1120'
PAYLOAD = {"model": "m", "messages": [{"role": "user", "content": PROMPT}], "max_tokens": 8}
ANSWER = {
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}],
    "usage": {"prompt_tokens": 3, "completion_tokens": 1},
}


@pytest.fixture
def raw() -> Iterator[Raw]:
    server = Raw()
    yield server
    server.stop()


@pytest.fixture
def redactions(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """How often the backend client gathered the prompt's texts and scrubbed a text of them."""
    counts = {"_prompt_texts": 0, "_scrub": 0}
    gather, scrub = backends._prompt_texts, backends._scrub

    def counted_gather(payload: Any) -> list[str]:
        counts["_prompt_texts"] += 1
        return gather(payload)

    def counted_scrub(text: str, key: str | None, prompts: Sequence[str] = (), **how: Any) -> str:
        counts["_scrub"] += 1
        return scrub(text, key, prompts, **how)

    monkeypatch.setattr(backends, "_prompt_texts", counted_gather)
    monkeypatch.setattr(backends, "_scrub", counted_scrub)
    return counts


async def test_a_successful_answer_is_not_scrubbed_of_the_prompt(
    raw: Raw, redactions: dict[str, int]
) -> None:
    raw.chat(json.dumps(ANSWER).encode())
    async with _http.AsyncClient() as http:
        result = await _client(raw, http).chat(PAYLOAD)
    assert result.content == "ok"
    assert redactions == {"_prompt_texts": 0, "_scrub": 0}  # until the review: 1 and 1


async def test_an_error_answer_is_still_scrubbed_of_the_prompt(raw: Raw, redactions: dict[str, int]) -> None:
    raw.chat(json.dumps({"message": f"engine overloaded on: {PROMPT}"}).encode(), status=500)
    async with _http.AsyncClient() as http:
        with pytest.raises(BackendFailed) as failed:
            await _client(raw, http).chat(PAYLOAD)
    assert "HTTP 500" in str(failed.value) and "[redacted]" in str(failed.value)
    assert "078-05" not in str(failed.value)
    assert redactions["_prompt_texts"] >= 1 and redactions["_scrub"] >= 1
