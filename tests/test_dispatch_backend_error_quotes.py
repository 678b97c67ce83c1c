"""What a backend client's error message may quote (it reaches the gateway's log, the
dispatcher's "(after: ...)" list and, cut to 200 characters, a model call's audit ``outcome``).

The rule, from docs/dispatch.md ("Backend credentials", "Backend client and metrics"),
docs/gateway.md (the prompt is never stored in the audit log), docs/audit-format.md (an outcome
keeps "up to 200 characters of why ... with no backend key") and docs/operations.md (a span holds
an exception's class, never its message): a short excerpt of a backend's own error text is
quoted (an operator needs "CUDA out of memory"); the API key, the prompt and the answer's text
are not. Real components only: ``BackendClient`` and ``Dispatcher`` against a tiny real HTTP
server on loopback answering exactly the bytes a test gives it, a real ``Gate`` on a SQLite file.

Redacted like the key: the starts of the request's message texts (8 characters or longer, as sent
and as JSON escapes them), and any run of 8 or more of the key's characters; a field of the wrong
kind (``finish_reason``, a usage count) is quoted cut at 80 characters, never whole.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import _http
import pytest
from test_dispatch_backends import Raw as LoopbackRaw
from test_observability import Sweep

from agentgate.capabilities import Call
from agentgate.dispatch import Dispatcher, Router, inventory_from_mapping
from agentgate.dispatch.backends import BackendClient, Timeouts
from agentgate.errors import BackendFailed, DispatchError, NoBackend

KEY = "sk-live-0123456789abcdefghijKLMNOPQRSTUV"
ENV = "R47_BACKEND_ERRORS_KEY"
PROMPT = "my card number is 4111-1111-1111-1111, please check it"
ANSWER = "the vault combination is 31-17-42"
MODEL = "scripted"  # the Sweep policy's model
PAYLOAD = {"model": MODEL, "messages": [{"role": "user", "content": PROMPT}], "max_tokens": 8}


class Raw(LoopbackRaw):
    """``test_dispatch_backends.Raw`` that also answers ``/health`` (200), as the dispatcher's
    probes ask."""

    def __init__(self) -> None:
        super().__init__()
        self.routes["/health"] = (200, {}, b"")


@pytest.fixture
def raw() -> Iterator[Raw]:
    server = Raw()
    yield server
    server.stop()


def _inventory(server: Raw, *, key: bool = True) -> Any:
    backend: dict[str, Any] = {"name": "b0", "url": server.url, "engine": "vllm", "models": [MODEL]}
    if key:
        backend["api_key_env"] = ENV
    return inventory_from_mapping({"backends": [backend]})


async def _failure(server: Raw, *, stream: bool, key: bool = True) -> str:
    """The message of the error a call to ``server`` raises (it must raise one)."""
    async with _http.AsyncClient() as http:
        client = BackendClient(
            _inventory(server, key=key).backends[0], http, Timeouts(first_token_s=10, idle_s=10, probe_s=10)
        )
        with pytest.raises((BackendFailed, DispatchError)) as raised:
            if stream:
                async for _ in client.stream(PAYLOAD):
                    pass
            else:
                await client.chat(PAYLOAD)
    assert raised.value.__cause__ is None and raised.value.__context__ is None
    return str(raised.value)


@pytest.fixture(autouse=True)
def _key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV, KEY)


def _delta(**delta: object) -> str:
    return "data: " + json.dumps({"choices": [{"delta": delta, "finish_reason": None}]})


# --- the answer's text: a malformed event or answer is refused without quoting it --------------


@pytest.mark.parametrize(
    ("stream", "answer"),
    [
        pytest.param(True, ['data: {"choices":[{"delta":{"content":"' + ANSWER], id="event-cut-mid-content"),
        pytest.param(True, [_delta(content="ok"), _delta(content=[ANSWER])], id="event-content-a-list"),
        pytest.param(True, [_delta(content="", tool_calls=[ANSWER])], id="event-tool-calls-not-objects"),
        pytest.param(True, ["data: " + json.dumps([{"delta": {"content": ANSWER}}])], id="event-a-list"),
        pytest.param(
            True, ['data: {"choices":[{"delta":{"content":"' + ANSWER + '\\x"}}]}'], id="bad-escape"
        ),
        pytest.param(False, ['{"choices":[{"message":{"content":"' + ANSWER], id="answer-cut-mid-content"),
        pytest.param(
            False, [json.dumps({"choices": [{"message": {"content": {"text": ANSWER}}}]})], id="non-str"
        ),
        pytest.param(
            False, [json.dumps({"choices": {"message": {"content": ANSWER}}})], id="choices-an-object"
        ),
    ],
)
async def test_a_malformed_event_or_answer_is_refused_without_quoting_the_answer_text(
    raw: Raw, stream: bool, answer: list[str]
) -> None:
    """An event or answer that is not the JSON promised is ``BackendFailed`` saying what is wrong
    with it (the parser's position, the field of the wrong kind), never quoting the text the
    model generated: it would go into the log and the signed audit log for good."""
    if stream:
        raw.sse(*answer, "data: [DONE]")
    else:
        raw.chat(answer[0].encode())
    message = await _failure(raw, stream=stream)
    assert "malformed" in message, message
    assert "vault combination" not in message and "31-17-42" not in message, message


@pytest.mark.parametrize(
    "chunk",
    [
        pytest.param(
            {"choices": [{"delta": {"content": "x"}, "finish_reason": ["y" * 100_000]}]}, id="finish"
        ),
        pytest.param({"choices": [], "usage": {"completion_tokens": "y" * 100_000}}, id="usage-count"),
    ],
)
async def test_a_field_of_the_wrong_kind_is_quoted_cut_short(raw: Raw, chunk: dict[str, Any]) -> None:
    """A value of the wrong kind is quoted to say what was wrong, but cut short, as ``usage is
    not an object`` is (80 characters): the backend's bytes are not the log's."""
    raw.sse("data: " + json.dumps(chunk), "data: [DONE]")
    message = await _failure(raw, stream=True)
    assert "malformed stream event" in message
    assert len(message) < 1_000, len(message)


async def test_a_line_that_is_not_sse_is_quoted_short_and_scrubbed(raw: Raw) -> None:
    """What the ``not an SSE event`` message quotes of a line (a proxy's words, or the first
    line of a server that does not speak SSE) is at most 80 characters of it, the key redacted."""
    raw.sse(f"upstream proxy error for Bearer {KEY}: " + "z" * 500, "data: [DONE]")
    message = await _failure(raw, stream=True)
    assert "not an SSE event" in message and "upstream proxy error" in message
    assert KEY[:8] not in message and len(message) < 80 + 40, message


async def test_a_json_line_that_is_not_sse_is_shown_by_its_keys_not_its_generated_text(raw: Raw) -> None:
    """An NDJSON stream (Ollama's native API) answers a line per chunk whose values are generated
    text: the message names the object's first keys and quotes none of its values (review R48: it
    quoted 80 characters of the line, which reached the log and the call's audit outcome)."""
    said = "the patient's record shows a positive test for"
    raw.sse(json.dumps({"model": "llama3", "message": {"role": "assistant", "content": said}, "done": False}))
    message = await _failure(raw, stream=True)
    assert "not an SSE event: a JSON object with keys 'model', 'message', 'done'" in message, message
    assert "patient" not in message and "assistant" not in message and "llama3" not in message


# --- the backend's own error words: quoted, short, without the key ------------------------------


@pytest.mark.parametrize(
    ("stream", "status"),
    [(False, 500), (False, 200), (True, 500), (True, 200)],
    ids=["500", "200", "s500", "s200"],
)
async def test_a_backends_own_error_words_are_quoted_short(raw: Raw, stream: bool, status: int) -> None:
    """A backend's error (an HTTP 5xx body, or ``{"error": ...}`` sent with 200, as a body or a
    stream event) is quoted: the operator reads why the backend failed; at most 200 characters
    of it, so a backend's megabyte traceback is not the log's."""
    words = "CUDA out of memory. Tried to allocate 2.00 GiB " + "t" * 5_000
    body = json.dumps({"error": {"message": words}})
    if stream and status == 200:
        raw.sse(_delta(content=""), "data: " + body, "data: [DONE]")
    elif stream:
        raw.routes["/v1/chat/completions"] = (status, {"content-type": "application/json"}, body.encode())
    else:
        raw.chat(body.encode(), status=status)
    message = await _failure(raw, stream=stream)
    assert "CUDA out of memory" in message, message
    assert len(message) < 300, len(message)


# --- the key: whole, or any piece of it long enough to matter -----------------------------------


@pytest.mark.parametrize("stream", [False, True], ids=["chat", "stream"])
async def test_a_hosted_style_masked_key_keeps_only_its_public_prefix_and_last_four(
    raw: Raw, stream: bool
) -> None:
    """What hosted APIs say of a wrong key ("Incorrect API key provided: sk-live-0123****STUV")
    and short pieces (4 to 7 characters) of it: the start of 8 or more characters is redacted; a
    piece under 8 characters (the key's public prefix, its last four) may stay, as the docs say."""
    shown = f"Incorrect API key provided: {KEY[:12]}****{KEY[-4:]}; prefix {KEY[:7]}"
    raw.routes["/v1/chat/completions"] = (500, {}, shown.encode())
    message = await _failure(raw, stream=stream)
    assert "Incorrect API key provided: [redacted]****" in message, message
    assert KEY[:8] not in message
    assert not any(KEY[i : i + 8] in message for i in range(len(KEY) - 7)), message


@pytest.mark.parametrize("stream", [False, True], ids=["chat", "stream"])
async def test_a_long_piece_of_the_key_without_its_start_is_redacted(raw: Raw, stream: bool) -> None:
    """A backend that quotes our key with its front cut off (a proxy's "token ...<tail>", a log
    line cut at a column) must not get most of the key into our error: no 8 characters of it in a
    row."""
    raw.routes["/v1/chat/completions"] = (500, {}, f"bad token ...{KEY[8:]} for tenant".encode())
    message = await _failure(raw, stream=stream)
    assert "for tenant" in message
    assert not any(KEY[i : i + 8] in message for i in range(len(KEY) - 7)), message


# --- the prompt: an error body that echoes the request ------------------------------------------


def _echo() -> bytes:
    """A backend echoing the request in its error (as FastAPI/pydantic validation errors do)."""
    return json.dumps({"error": {"message": f"could not process input {PROMPT!r}"}}).encode()


@pytest.mark.parametrize("status", [500, 200], ids=["http-500", "error-with-200"])
async def test_an_error_body_echoing_the_prompt_does_not_put_it_in_the_error(raw: Raw, status: int) -> None:
    """The backend's words are quoted, the caller's prompt is not: docs/gateway.md, the prompt is
    never stored in the audit log, where a ``BackendFailed``'s message goes."""
    raw.chat(_echo(), status=status)
    message = await _failure(raw, stream=False)
    assert "could not process input" in message
    assert "4111" not in message, message


def test_a_prompt_echoed_by_a_failing_backend_reaches_no_audit_entry_or_span(
    raw: Raw, tmp_path: Path
) -> None:
    """End to end through a real Gate and Dispatcher: the model call fails (the backend answers
    500 echoing the prompt); its audit outcome says why (the HTTP status) and the spans carry the
    error's class, neither holds the prompt."""
    raw.chat(_echo(), status=500)
    sweep = Sweep(tmp_path)
    try:
        gate = sweep.gate
        gate.attach_dispatcher(Dispatcher(_inventory(raw), Router(_inventory(raw)), recovery_wait_s=0))
        auth = gate.authorize(sweep.boss, Call.model(MODEL, {"max_tokens": 8}), tokens=(20, 8))
        with pytest.raises((NoBackend, BackendFailed)):
            gate.run(auth, lambda: gate.dispatch(PAYLOAD))
        gate.flush()
        (outcome,) = [e for e in gate.audit.entries() if e.kind == "outcome"]
        spans = "\n".join(s.to_json() for s in sweep.exporter.get_finished_spans())
    finally:
        sweep.gate.close()
    reasons = " ".join(outcome.reasons)
    assert outcome.status == "error" and "HTTP 500" in reasons, reasons
    # The card number, not "4111" alone: the spans' random trace and span ids (hex) hold "4111"
    # now and then (review R68).
    assert "4111-1111" not in spans
    assert "4111" not in reasons, reasons


def test_a_request_refused_as_invalid_keeps_the_echoed_prompt_out_of_the_audit(
    raw: Raw, tmp_path: Path
) -> None:
    """A 400 echoing the prompt is ``RequestRejected`` (a ``DispatchError``; its class name in
    the outcome since review R93): its words go back to the caller (their own request), and the
    audit outcome keeps its class only, never its message."""
    raw.chat(_echo(), status=400)
    sweep = Sweep(tmp_path)
    try:
        gate = sweep.gate
        gate.attach_dispatcher(Dispatcher(_inventory(raw), Router(_inventory(raw)), recovery_wait_s=0))
        auth = gate.authorize(sweep.boss, Call.model(MODEL, {"max_tokens": 8}), tokens=(20, 8))
        with pytest.raises(DispatchError) as raised:
            gate.run(auth, lambda: gate.dispatch(PAYLOAD))
        gate.flush()
        (outcome,) = [e for e in gate.audit.entries() if e.kind == "outcome"]
    finally:
        sweep.gate.close()
    assert "could not process input" in str(raised.value)
    assert outcome.status == "error" and list(outcome.reasons) == ["RequestRejected"], outcome.reasons
