"""Review R71: what the gateway counts and says of a call's charge where R70 left it open.

A stream that broke after output, whose backend had reported a usage covering that output, is
charged that usage (``GatewayGate._pump``) but ``agentgate_gateway_tokens_total`` counted nothing
for it: the error path of ``Gateway._events`` never reached the counter. And a JSON answer passed
a backend's own ``agentgate`` body field on unchanged, where a stream drops it (review R70) and
says the charge in agentgate's own field: a backend could make its caller read a charge that is
not the call's. Real HTTP on 127.0.0.1, real Gate, real SQLite store, the gateway's own registry.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from test_dispatch_r70_stream_charged import Scripted, _allowed, _tokens, _usage
from test_gateway_end_to_end import _body
from test_gateway_hostile_backends import Hostile, _chunk, _gateway, _json


def test_a_stream_broken_after_its_usage_counts_the_tokens_it_is_charged(tmp_path: Path) -> None:
    """Review R71: a stream whose backend reported its usage (5 prompt, 2 completion tokens,
    covering its output) and then closed without ``[DONE]`` ends with a ``backend_failed`` event
    and is charged that usage, but the token counter counted nothing for it; it counts those
    tokens, once."""
    backend = Scripted(_chunk("h") + _chunk("i") + _usage(5, 2), done=False)
    try:
        with _gateway(tmp_path, backend) as env:
            before, counted = env.spent(), _tokens(env)
            answer = env.post(_body(stream=True))
            assert answer.status_code == 200, answer.text
            assert '"backend_failed"' in answer.text and "[DONE]" not in answer.text, answer.text
            assert "x-agentgate-charged" not in answer.text  # charged its usage, not reserved
            assert env.spent() - before == 5 + 2 < _allowed(env)
            assert _tokens(env) == (counted[0] + 5, counted[1] + 2)
    finally:
        backend.close()


def test_a_stream_broken_after_a_stale_usage_counts_no_tokens(tmp_path: Path) -> None:
    """Review R71: a stream broken after a usage that more output followed is charged its
    reservation (the usage is not the call's) and counts no tokens, as a whole stream does."""
    backend = Scripted(_usage(5, 1) + _chunk("hi"), done=False)
    try:
        with _gateway(tmp_path, backend) as env:
            before, counted = env.spent(), _tokens(env)
            answer = env.post(_body(stream=True))
            assert '"backend_failed"' in answer.text, answer.text
            assert ": x-agentgate-charged: reserved;" in answer.text
            assert env.spent() - before == _allowed(env)
            assert _tokens(env) == counted
    finally:
        backend.close()


_CLAIM = {"charged": "nothing", "why": "the backend says so"}


class _Claiming(Hostile):
    """A backend whose JSON answer carries its own ``agentgate`` field, with ``usage`` as given."""

    def __init__(self, usage: dict[str, int]) -> None:
        super().__init__()
        self.usage = usage

    async def _answer(self, w: asyncio.StreamWriter, r: asyncio.StreamReader, stream: bool) -> bool:
        body = {
            "id": "c",
            "object": "chat.completion",
            "choices": [
                {"index": 0, "message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}
            ],
            "usage": self.usage,
            "agentgate": _CLAIM,
        }
        w.write(_json(json.dumps(body).encode()))
        await w.drain()
        return True


def test_a_json_answer_drops_the_backends_own_agentgate_field(tmp_path: Path) -> None:
    """Review R71: a JSON answer charged its usage passed on the backend's ``agentgate`` field
    (here claiming nothing was charged); it is dropped, as a stream drops it, the rest of the
    backend's answer kept."""
    backend = _Claiming({"prompt_tokens": 5, "completion_tokens": 2})
    try:
        with _gateway(tmp_path, backend) as env:
            answer = env.post(_body())
            assert answer.status_code == 200, answer.text
            assert "agentgate" not in answer.json(), answer.json()
            assert answer.json()["choices"][0]["message"]["content"] == "hi"
            assert answer.json()["usage"] == {"prompt_tokens": 5, "completion_tokens": 2}
            assert "x-agentgate-charged" not in answer.headers
    finally:
        backend.close()


def test_a_json_answer_charged_its_reservation_says_so_in_agentgates_own_field(tmp_path: Path) -> None:
    """Review R71: a JSON answer charged its reservation (0 prompt tokens reported) carried the
    backend's ``agentgate`` field beside agentgate's ``X-Agentgate-Charged`` header, two charges
    that disagree; the body's field is agentgate's own, the header's words, as a stream's last chunk."""
    backend = _Claiming({"prompt_tokens": 0, "completion_tokens": 2})
    try:
        with _gateway(tmp_path, backend) as env:
            answer = env.post(_body())
            assert answer.status_code == 200, answer.text
            why = "the backend reported 0 prompt tokens"
            assert answer.headers["x-agentgate-charged"] == f"reserved; {why}"
            assert answer.json()["agentgate"] == {"charged": "reserved", "why": why}, answer.json()
    finally:
        backend.close()
