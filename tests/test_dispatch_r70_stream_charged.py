"""Review R70: a streamed answer the gateway charged its whole reservation (its backend reported
0 prompt tokens, no usage, or a usage followed by more output) said nothing of it: its headers
go out before the usage is known (so no ``X-Agentgate-Charged``, as a JSON answer carries), and
the backend's usage event was passed on unchanged, so the caller read a usage it was not charged.
Such a stream now says it before ``[DONE]``: an SSE comment ``: x-agentgate-charged: reserved;
WHY`` for every caller, and, for a caller that asked for usage, ``"agentgate": {"charged":
"reserved", "why": WHY}`` on its last chunk. And ``agentgate_gateway_tokens_total`` counted
(0, n) for a call charged its reservation (0 prompt tokens reported): it counts the tokens of
calls charged their usage, nothing for a call charged its reservation (as for a stale usage,
review R57). Real HTTP on 127.0.0.1, real Gate, real SQLite store, the gateway's own registry."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import _http
import openai
import pytest
from test_dispatch_r68_usage_garbage import Reporting
from test_gateway_end_to_end import _body
from test_gateway_hostile_backends import _SSE, Env, Hostile, _chunk, _gateway

from agentgate.dispatch.dispatcher import MAX_HELD_CHUNKS
from agentgate.dispatch.gateway import invocation_headers

ZERO_PROMPT = "the backend reported 0 prompt tokens"
NO_USAGE = "no usage was reported"
UNREAD = "the usage reported cannot count the answer"


def _usage(prompt: int, completion: int) -> bytes:
    event = {"id": "c", "choices": [], "usage": {"prompt_tokens": prompt, "completion_tokens": completion}}
    return b"data: " + json.dumps(event).encode() + b"\n\n"


SCRIPTS = {
    "zero-prompt": (_chunk("hi") + _usage(0, 2), ZERO_PROMPT),
    "no-usage": (_chunk("hi"), NO_USAGE),
    "usage-then-output": (_usage(5, 1) + _chunk("hi"), UNREAD),
}


class Scripted(Hostile):
    """A backend that streams ``script`` (SSE events) then ``[DONE]`` for every call."""

    def __init__(self, script: bytes, done: bool = True) -> None:
        super().__init__()
        self.script = script
        self.done = done

    async def _answer(self, w: asyncio.StreamWriter, r: asyncio.StreamReader, stream: bool) -> bool:
        w.write(_SSE + self.script + (b"data: [DONE]\n\n" if self.done else b""))
        await w.drain()
        return False


def _events(text: str) -> list[dict[str, Any]]:
    """The JSON data events of a streamed answer, in order (``[DONE]`` left out)."""
    data = [line.removeprefix("data: ") for line in text.splitlines() if line.startswith("data: ")]
    assert data[-1] == "[DONE]", text
    return [json.loads(d) for d in data[:-1]]


def _tokens(env: Env) -> tuple[float, float]:
    registry = env.server.gateway.registry
    counts = [
        registry.get_sample_value("agentgate_gateway_tokens_total", {"kind": k})
        for k in ("prompt", "completion")
    ]
    return (counts[0] or 0.0, counts[1] or 0.0)


def _allowed(env: Env) -> int:
    [allow] = [e for e in env.gate.audit.entries() if e.kind == "allow" and e.resource.startswith("model:")]
    return int(allow.budget_delta)


@pytest.mark.parametrize("case", list(SCRIPTS))
def test_a_stream_charged_its_reservation_says_so_before_done(tmp_path: Path, case: str) -> None:
    """Review R70: the stream said nothing of the charge (the caller with usage read the
    backend's, 0 prompt tokens or none); it now ends with the comment and, on its last chunk,
    the ``agentgate`` field naming why, and is charged the reservation, counting no tokens."""
    script, why = SCRIPTS[case]
    backend = Scripted(script)
    try:
        with _gateway(tmp_path, backend) as env:
            before, counted = env.spent(), _tokens(env)
            answer = env.post(_body(stream=True, stream_options={"include_usage": True}))
            assert answer.status_code == 200, answer.text
            assert "x-agentgate-charged" not in answer.headers  # sent before the usage is known
            assert answer.text.endswith(f": x-agentgate-charged: reserved; {why}\n\ndata: [DONE]\n\n")
            events = _events(answer.text)
            assert events[-1]["agentgate"] == {"charged": "reserved", "why": why}, events
            assert all("agentgate" not in e for e in events[:-1]), events
            if case == "zero-prompt":  # the usage event itself, still the last chunk
                assert events[-1]["usage"]["prompt_tokens"] == 0 and events[-1]["choices"] == []
            assert env.spent() - before == _allowed(env) > 2
            assert _tokens(env) == counted
    finally:
        backend.close()


def test_a_stream_without_usage_asked_says_it_in_a_comment_alone(tmp_path: Path) -> None:
    """Review R70: a caller that did not ask for usage gets no chunk without choices (a client
    may read ``choices[0]`` of each), only the comment, which every SSE parser skips."""
    script, why = SCRIPTS["zero-prompt"]
    backend = Scripted(script)
    try:
        with _gateway(tmp_path, backend) as env:
            answer = env.post(_body(stream=True))
            assert answer.status_code == 200, answer.text
            assert answer.text.endswith(f": x-agentgate-charged: reserved; {why}\n\ndata: [DONE]\n\n")
            events = _events(answer.text)
            assert all(e["choices"] and "agentgate" not in e and "usage" not in e for e in events), events
    finally:
        backend.close()


def test_a_stream_broken_after_output_says_its_charge_before_its_error_event(tmp_path: Path) -> None:
    """Review R70: a stream the backend broke after output is charged its reservation (no usage
    was reported); its error event said only that the answer is incomplete. The comment now
    comes before the error event, which stays the stream's last."""
    backend = Scripted(_chunk("hi") + b'data: {"choices": [{"delta": {"cont', done=False)
    try:
        with _gateway(tmp_path, backend) as env:
            before = env.spent()
            answer = env.post(_body(stream=True, stream_options={"include_usage": True}))
            assert answer.status_code == 200, answer.text
            said, _, error = answer.text.rpartition(f": x-agentgate-charged: reserved; {NO_USAGE}\n\n")
            assert said and json.loads(error.removeprefix("data: "))["error"]["code"] == "backend_failed"
            assert env.spent() - before == _allowed(env) > 2
    finally:
        backend.close()


def test_a_stream_broken_before_any_output_is_released_and_says_no_charge(tmp_path: Path) -> None:
    """Review R70: the rule's other side: a stream the backend broke after chunks without output
    (the dispatcher passes them on once it holds ``MAX_HELD_CHUNKS``) is released, nothing
    charged, so it carries no such comment."""
    role = b'data: {"id": "c", "choices": [{"index": 0, "delta": {"role": "assistant"}}]}\n\n'
    backend = Scripted(role * MAX_HELD_CHUNKS + b'data: {"choices": [{"delta": {"cont', done=False)
    try:
        with _gateway(tmp_path, backend) as env:
            before = env.spent()
            answer = env.post(_body(stream=True))
            assert answer.status_code == 200, answer.text
            assert '"backend_failed"' in answer.text and "x-agentgate-charged" not in answer.text
            assert env.spent() == before
    finally:
        backend.close()


def test_a_stream_charged_its_usage_says_nothing(tmp_path: Path) -> None:
    """Review R70: a stream charged its reported usage carries neither, and counts its tokens."""
    backend = Scripted(_chunk("hi") + _usage(5, 2))
    try:
        with _gateway(tmp_path, backend) as env:
            counted = _tokens(env)
            answer = env.post(_body(stream=True, stream_options={"include_usage": True}))
            assert answer.status_code == 200, answer.text
            assert "x-agentgate-charged" not in answer.text
            assert all("agentgate" not in e for e in _events(answer.text))
            assert _tokens(env) == (counted[0] + 5, counted[1] + 2)
    finally:
        backend.close()


def test_a_json_answer_charged_its_reservation_counts_no_tokens(tmp_path: Path) -> None:
    """Review R70: the token counter added (0, 2) for a JSON call charged its reservation (0
    prompt tokens reported); it counts nothing for it now, as for a stream."""
    backend = Reporting({"prompt_tokens": 0, "completion_tokens": 2})
    try:
        with _gateway(tmp_path, backend) as env:
            counted = _tokens(env)
            answer = env.post(_body())
            assert answer.status_code == 200, answer.text
            assert answer.headers["x-agentgate-charged"] == f"reserved; {ZERO_PROMPT}"
            assert _tokens(env) == counted
    finally:
        backend.close()


@pytest.mark.parametrize("case", ["zero-prompt", "no-usage"])
def test_the_openai_sdk_reads_the_charge_and_skips_the_comment(tmp_path: Path, case: str) -> None:
    """Review R70: the SDK parses the stream as before (the comment is skipped), its usage on the
    last chunk where the backend sent one, and keeps the ``agentgate`` field (``model_extra``)."""
    script, why = SCRIPTS[case]
    backend = Scripted(script)
    try:
        with _gateway(tmp_path, backend) as env:
            client = openai.OpenAI(
                base_url=env.server.url,
                api_key="unused",
                max_retries=0,
                http_client=openai.DefaultHttpxClient(verify=_http.TLS),
            )
            body = _body(stream=True, stream_options={"include_usage": True})
            signed = invocation_headers(env.agent.key, env.agent.chain, body)
            with client:
                chunks = list(client.chat.completions.create(**body, extra_headers=signed))
            assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "hi"
            last = chunks[-1]
            assert last.choices == [] and (last.model_extra or {})["agentgate"]["why"] == why
            assert (last.usage is not None) == (case == "zero-prompt")
    finally:
        backend.close()


def test_a_backends_own_agentgate_field_is_not_passed_on(tmp_path: Path) -> None:
    """Review R70: the ``agentgate`` field is the gateway's word on this call's charge; one in a
    backend's events (another agentgate gateway's, or made up) was passed on whole, saying
    "reserved" of a call charged its usage."""
    usage = {"prompt_tokens": 5, "completion_tokens": 2}
    forged = {"id": "c", "choices": [], "usage": usage, "agentgate": {"charged": "reserved", "why": "x"}}
    backend = Scripted(_chunk("hi") + b"data: " + json.dumps(forged).encode() + b"\n\n")
    try:
        with _gateway(tmp_path, backend) as env:
            answer = env.post(_body(stream=True, stream_options={"include_usage": True}))
            assert answer.status_code == 200, answer.text
            events = _events(answer.text)
            assert events[-1]["usage"]["prompt_tokens"] == 5
            assert all("agentgate" not in e for e in events), events
    finally:
        backend.close()
