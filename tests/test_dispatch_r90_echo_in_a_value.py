"""Review R90: a prompt echoed inside a value of the answer that is no text (a ``finish_reason``,
a ``usage``, a token count given as a list or an object) is scrubbed of all of it.

R89 scrubbed a text value as it came, before ``repr`` escaped it, but a value that is no text
was written with ``repr`` first and scrubbed after. ``repr`` writes a no-break space as ``\\xa0``
(JSON as ``\\u00a0``), a control character as ``\\x01``, and a quote as ``\\'`` beside the other
kind: none of the forms of the prompt looked for, so only the part before that character was
redacted, and the rest (an SSN, a card number) went into the ``BackendFailed`` or
``UsageUnreadable``, and from there to logs and the model call's audit outcome. Each text inside
the value is now scrubbed as it came (``_quoted_echo``).
"""

from __future__ import annotations

import json
from typing import Any

import _http
import pytest
from test_dispatch_backends import Raw, _client, raw  # noqa: F401 (the fixture)

from agentgate.dispatch import _redaction
from agentgate.dispatch._redaction import _quoted_echo, _scrub
from agentgate.errors import BackendFailed

SECRET = "078-05-1120 card 4111111111111111"
PROMPTS = {
    "no-break-space": f"Summarize my record.\u00a0My SSN is {SECRET}",
    "control-character": f"Summarize my record.\x01My SSN is {SECRET}",
    "both-quotes": f"Summarize \"this\" and 'that': my SSN is {SECRET}",
}
STOP = {"index": 0, "message": {"content": "x"}, "finish_reason": "stop"}


def _leaks(message: str) -> bool:
    """Whether ``message`` holds 5 characters or more of ``SECRET``."""
    return any(SECRET[i : i + 5] in message for i in range(len(SECRET) - 4))


def _request(prompt: str) -> dict[str, Any]:
    return {"model": "m", "messages": [{"role": "user", "content": prompt}], "max_tokens": 8}


def _answers(prompt: str) -> dict[str, dict[str, Any]]:
    """Whole answers holding ``prompt`` in a value that is no text."""
    return {
        "finish-reason-list": {"choices": [{**STOP, "finish_reason": [prompt]}]},
        "usage-list": {"choices": [STOP], "usage": [prompt]},
        "prompt-tokens-list": {"choices": [STOP], "usage": {"prompt_tokens": [prompt]}},
        "prompt-tokens-object": {"choices": [STOP], "usage": {"prompt_tokens": {prompt: prompt}}},
    }


@pytest.mark.parametrize("answer", list(_answers("")), ids=list(_answers("")))
@pytest.mark.parametrize("prompt", PROMPTS.values(), ids=PROMPTS.keys())
async def test_a_prompt_echoed_in_a_value_that_is_no_text_is_not_quoted(
    raw: Raw,  # noqa: F811 (the fixture)
    prompt: str,
    answer: str,
) -> None:
    raw.chat(json.dumps(_answers(prompt)[answer]).encode())
    async with _http.AsyncClient() as http:
        with pytest.raises(BackendFailed) as raised:
            await _client(raw, http).chat(_request(prompt))
    message = str(raised.value)
    assert "malformed chat completion" in message and "[redacted]" in message, message
    assert not _leaks(message), message


@pytest.mark.parametrize("prompt", PROMPTS.values(), ids=PROMPTS.keys())
async def test_a_prompt_echoed_in_a_streamed_usage_that_is_no_object_is_not_quoted(
    raw: Raw,  # noqa: F811 (the fixture)
    prompt: str,
) -> None:
    event = {"choices": [{"index": 0, "delta": {"content": "x"}, "finish_reason": None}], "usage": [prompt]}
    raw.sse(f"data: {json.dumps(event)}", "data: [DONE]")
    async with _http.AsyncClient() as http:
        with pytest.raises(BackendFailed) as raised:
            async for _ in _client(raw, http).stream(_request(prompt)):
                pass
    message = str(raised.value)
    assert "[redacted]" in message and not _leaks(message), message


def test_a_value_is_quoted_as_repr_writes_it_around_what_is_redacted() -> None:
    prompt = PROMPTS["no-break-space"]
    value = {"kept": ["short", 1, None, True, 2.5], "echo": f"input: {prompt}"}
    assert _quoted_echo(value, _request(prompt), 200) == (
        "{'kept': ['short', 1, None, True, 2.5], 'echo': 'input: [redacted]'}"
    )


def test_a_long_value_is_written_only_as_far_as_it_is_quoted(monkeypatch: pytest.MonkeyPatch) -> None:
    """A list of a million texts: cut at 80 characters, as ``quoted`` cuts it, and written no
    further than that: its first few texts are searched, not a million."""
    searched: list[str] = []

    def counted(text: str, key: str | None, prompts: Any = (), **how: Any) -> str:
        searched.append(text)
        return _scrub(text, key, prompts, **how)

    monkeypatch.setattr(_redaction, "_scrub", counted)
    prompt = PROMPTS["control-character"]
    quoted = _quoted_echo([prompt] * 1_000_000, _request(prompt))
    assert quoted == "[" + ", ".join(["'[redacted]'"] * 5) + ", '[redacted]..."  # a marker kept whole
    assert len(searched) <= 8, len(searched)
