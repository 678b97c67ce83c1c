"""Review R89: a backend's words that echo the prompt are scrubbed of it as they came, before they
are cut or changed for the message.

An error body was folded (each run of white space one space), escaped (each character that is
not printable written as its escape) and cut to 200 characters before the prompt was scrubbed
from the message, and an error event's message, and a line that is not SSE, were cut and written
with ``repr`` first: an echoed prompt holding two spaces in a row, a zero-width space, a quote or
a backslash was redacted up to that character only, the rest of it quoted, into the gateway's
log and the call's audit outcome; one whose start stood at the cut left up to 7 characters.
docs/dispatch.md: each message text of the request, as sent and as JSON escapes it, is redacted
wherever it or any start of it (8 characters or more) stands in the quoted text.
"""

from __future__ import annotations

import json
from typing import Any

import _http
import pytest
from test_dispatch_backends import Raw, _client, raw  # noqa: F401 (the fixture)

from agentgate.errors import BackendFailed, DispatchError

SECRET = "078-05-1120 and card 4111111111111111"
PROMPTS = {
    "two-spaces": f"Summarize this.  My SSN is {SECRET}",
    "zero-width-space": f"Summarize this.\u200bMy SSN is {SECRET}",
    "both-quotes": f"Summarize \"this\" and 'that': my SSN is {SECRET}",
    "backslash": f"Summarize C:\\notes\\ssn.txt: my SSN is {SECRET}",
    "line-break": f"Summarize this.\nMy SSN is {SECRET}",
}


def _payload(prompt: str) -> dict[str, Any]:
    return {"model": "m", "messages": [{"role": "user", "content": prompt}], "max_tokens": 8}


async def _failure(
    server: Raw,
    prompt: str,
    *,
    stream: bool,
    raises: type[Exception] | tuple[type[Exception], ...] = (BackendFailed, DispatchError),
) -> str:
    """The message of the error (one of ``raises``) a call with ``prompt`` raises (it must raise one)."""
    async with _http.AsyncClient() as http:
        client = _client(server, http)
        with pytest.raises(raises) as raised:
            if stream:
                async for _ in client.stream(_payload(prompt)):
                    pass
            else:
                await client.chat(_payload(prompt))
    return str(raised.value)


def _leaks(message: str) -> bool:
    """Whether ``message`` holds 5 characters or more of ``SECRET``, each prompt's end (here and in
    test_dispatch_r89b_own_words)."""
    return any(SECRET[i : i + 5] in message for i in range(len(SECRET) - 4))


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
@pytest.mark.parametrize("ascii_only", [False, True], ids=["utf8-json", "ascii-json"])
@pytest.mark.parametrize("prompt", PROMPTS.values(), ids=PROMPTS.keys())
async def test_an_error_body_echoing_the_prompt_is_scrubbed_of_all_of_it(
    raw: Raw,  # noqa: F811 (the fixture)
    prompt: str,
    ascii_only: bool,
    stream: bool,
) -> None:
    """A 400 whose JSON body echoes the prompt (FastAPI's validation error, vLLM's), written with
    characters past ASCII as they are or escaped: none of the prompt is quoted."""
    body = {"object": "error", "message": f"Input should be valid: {prompt}", "code": 400}
    raw.chat(json.dumps(body, ensure_ascii=ascii_only).encode(), status=400)
    message = await _failure(raw, prompt, stream=stream)
    assert "rejected the request: HTTP 400" in message and "[redacted]" in message
    assert not _leaks(message), message


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
@pytest.mark.parametrize("prompt", PROMPTS.values(), ids=PROMPTS.keys())
async def test_an_error_reported_with_200_echoing_the_prompt_is_scrubbed_of_all_of_it(
    raw: Raw,  # noqa: F811 (the fixture)
    prompt: str,
    stream: bool,
) -> None:
    """An error vLLM reports with HTTP 200 (an answer, or a stream's event) quoting the prompt:
    none of it is quoted, however ``repr`` writes it."""
    error = json.dumps({"object": "error", "message": f"cannot render the prompt {prompt}"})
    if stream:
        raw.sse(f"data: {error}", "data: [DONE]")
    else:
        raw.chat(error.encode())
    message = await _failure(raw, prompt, stream=stream)
    assert "the backend reported an error" in message and "[redacted]" in message
    assert not _leaks(message), message


@pytest.mark.parametrize("detail", ["message", "no-message"])
async def test_an_error_detail_that_is_no_text_is_scrubbed_of_the_prompt(
    raw: Raw,  # noqa: F811 (the fixture)
    detail: str,
) -> None:
    """An error object without a message is quoted as JSON writes it, so that the prompt in it
    is found as JSON escapes it (Python's ``str`` of it escaped it otherwise)."""
    prompt = PROMPTS["both-quotes"]
    error = {"message": {"input": prompt}} if detail == "message" else {"input": prompt, "code": 1}
    raw.chat(json.dumps({"error": error}).encode())
    message = await _failure(raw, prompt, stream=False)
    assert "[redacted]" in message and not _leaks(message), message


@pytest.mark.parametrize(
    ("where", "stream"),
    [("body", False), ("body", True), ("event", False), ("event", True), ("line", True)],
)
async def test_a_prompt_whose_start_stands_at_the_cut_leaves_none_of_it(
    raw: Raw,  # noqa: F811 (the fixture)
    where: str,
    stream: bool,
) -> None:
    """An echo whose prompt starts 5 characters before the quote is cut (200 characters of a
    body or an error's message, 80 of a line that is not SSE): that start is scrubbed too,
    found before the cut, not left as too short to recognise after it."""
    prompt = SECRET + " is my SSN, keep it"
    if where == "body":
        raw.chat(("x" * 195 + prompt).encode(), status=400)
    elif where == "event":
        error = json.dumps({"object": "error", "message": "y" * 195 + prompt})
        raw.sse(f"data: {error}", "data: [DONE]") if stream else raw.chat(error.encode())
    else:
        raw.sse("z" * 75 + prompt, "data: [DONE]")
    message = await _failure(raw, prompt, stream=stream)
    assert "xxxxx" in message or "yyyyy" in message or "zzzzz" in message  # the quote is there
    assert SECRET[:5] not in message, message
