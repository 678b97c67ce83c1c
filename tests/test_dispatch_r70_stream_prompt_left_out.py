"""Review R70: a streamed usage that leaves out ``prompt_tokens`` (``{"completion_tokens": 2}``)
was read as 0 prompt tokens reported, while a JSON answer with the same usage is one that
reported no usage (``reports_usage``, review R68): the stream's charge said "the backend
reported 0 prompt tokens" (and its outcome "reported 0 prompt tokens for a prompt of at most
N") where the JSON answer's ``X-Agentgate-Charged`` says "no usage was reported", and the
caller that asked for usage was passed a usage block without its prompt count. Such a usage
is now none in a stream too, as one that leaves out ``completion_tokens`` already was. Real HTTP
on 127.0.0.1, real Gate, real SQLite store."""

from __future__ import annotations

import json
from pathlib import Path

from test_dispatch_r68_usage_garbage import Reporting
from test_dispatch_r70_stream_charged import NO_USAGE, Scripted, _allowed, _events, _tokens
from test_gateway_end_to_end import _body
from test_gateway_hostile_backends import _chunk, _gateway

LEFT_OUT = {"completion_tokens": 2}


def test_a_json_answer_whose_usage_leaves_out_its_prompt_says_no_usage(tmp_path: Path) -> None:
    """Review R70: the JSON side of the rule the stream now follows (unchanged): no usage."""
    backend = Reporting(LEFT_OUT)
    try:
        with _gateway(tmp_path, backend) as env:
            answer = env.post(_body())
            assert answer.status_code == 200, answer.text
            assert answer.headers["x-agentgate-charged"] == f"reserved; {NO_USAGE}"
    finally:
        backend.close()


def test_a_stream_whose_usage_leaves_out_its_prompt_says_no_usage_as_json_does(tmp_path: Path) -> None:
    """Review R70: the stream said "the backend reported 0 prompt tokens" of a usage without
    ``prompt_tokens`` and passed that usage on; it says "no usage was reported", as the JSON
    answer's header does, passes no usage it was not charged, counts no tokens, and is charged
    its reservation (as before)."""
    event = {"id": "c", "choices": [], "usage": LEFT_OUT}
    backend = Scripted(_chunk("hi") + b"data: " + json.dumps(event).encode() + b"\n\n")
    try:
        with _gateway(tmp_path, backend) as env:
            before, counted = env.spent(), _tokens(env)
            answer = env.post(_body(stream=True, stream_options={"include_usage": True}))
            assert answer.status_code == 200, answer.text
            assert answer.text.endswith(f": x-agentgate-charged: reserved; {NO_USAGE}\n\ndata: [DONE]\n\n")
            events = _events(answer.text)
            assert events[-1]["agentgate"] == {"charged": "reserved", "why": NO_USAGE}, events
            assert all("usage" not in e for e in events), events
            assert env.spent() - before == _allowed(env) > 2
            assert _tokens(env) == counted
            [outcome] = [e for e in env.gate.audit.entries() if e.kind == "outcome"]
            assert not any("0 prompt tokens" in r for r in outcome.reasons), outcome.reasons
    finally:
        backend.close()
