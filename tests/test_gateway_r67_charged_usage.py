"""Review R67: the usage the gateway passes on to its caller is the usage it charged.

Since R67 the gateway charges a backend's prompt tokens at most what the request body can hold
(and, since earlier, its completion tokens at most ``max_tokens``), but it passed the backend's
own figures on: a caller reading ``usage`` (its own accounting, the OpenAI SDK's
``response.usage``) saw 100,000,000 prompt tokens where its budget was charged some 4,000. The
usage passed on (a JSON answer's, a stream's usage event) now carries the figures charged, with
``total_tokens`` their sum; the backend's report is in the call's ``outcome`` entry. Over real
HTTP on 127.0.0.1, with the inflating backend of ``test_gateway_r67_prompt_bound``."""

from __future__ import annotations

import json

import pytest
from test_gateway_end_to_end import _body
from test_gateway_hostile_backends import Env, _in_service
from test_gateway_r67_prompt_bound import _REPORTED, env

__all__ = ["env"]  # the module's fixture, used here


def _usages(answer: bytes) -> list[dict[str, int]]:
    """The usage objects of a stream's events."""
    events = [line.removeprefix(b"data: ") for line in answer.split(b"\n") if line.startswith(b"data: {")]
    return [usage for event in events if (usage := json.loads(event).get("usage"))]


@pytest.mark.parametrize("stream", [False, True], ids=["answer", "stream"])
def test_the_usage_passed_on_is_the_usage_charged(env: Env, stream: bool) -> None:
    """Review R67: before, the caller read the backend's 100,000,000 prompt tokens; now the bound
    it was charged, the same figure its budget lost, and the outcome still records the report."""
    _in_service(env)
    body = _body(stream=stream, stream_options={"include_usage": True}) if stream else _body()
    before = env.spent()
    answer = env.post(body)
    assert answer.status_code == 200, answer.text
    charged = env.spent() - before
    [usage] = _usages(answer.content) if stream else [answer.json()["usage"]]
    assert usage["prompt_tokens"] + usage["completion_tokens"] == charged
    assert usage["total_tokens"] == charged
    (outcome,) = env.outcomes()[-1:]
    assert any(f"reported {_REPORTED} prompt tokens" in r for r in outcome.reasons)
