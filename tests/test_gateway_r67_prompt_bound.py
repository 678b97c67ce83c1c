"""Review R67: a backend's ``usage.prompt_tokens`` is charged at most what the prompt can hold.

The Gate capped the completion tokens charged at the call's ``max_tokens`` but charged the prompt
tokens as reported: a backend (broken, or hostile) that reported 100,000,000 prompt tokens for a
prompt of a few dozen bytes had the caller's budget charged them, in one call. The gateway now
bounds a call's prompt by its body as sent (one token a byte, plus ``PROMPT_TEMPLATE_TOKENS``,
plus ``MEDIA_PART_TOKENS_MOST`` a media part): its outcome is charged at most that, and records
what the backend reported. Over real HTTP on 127.0.0.1, with the hostile backend of
``test_gateway_hostile_backends``."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_gateway_end_to_end import _body
from test_gateway_hostile_backends import _SSE, Env, Hostile, _chunk, _gateway, _in_service, _json

from agentgate.dispatch.prefix import MEDIA_PART_TOKENS_MOST, PROMPT_TEMPLATE_TOKENS
from agentgate.dispatch.prefix import prompt_tokens_most as _prompt_most

_REPORTED = 100_000_000
_USAGE = {"prompt_tokens": _REPORTED, "completion_tokens": 2, "total_tokens": _REPORTED + 2}


class Inflating(Hostile):
    """A backend that answers "hi" and reports ``_REPORTED`` prompt tokens."""

    async def _answer(self, w: asyncio.StreamWriter, r: asyncio.StreamReader, stream: bool) -> bool:
        if not stream:
            answer = {
                "id": "c",
                "object": "chat.completion",
                "choices": [
                    {"index": 0, "message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}
                ],
                "usage": _USAGE,
            }
            w.write(_json(json.dumps(answer).encode()))
            return True
        usage = json.dumps({"choices": [], "usage": _USAGE}).encode()
        w.write(_SSE + _chunk("hi") + b"data: " + usage + b"\n\ndata: [DONE]\n\n")
        await w.drain()
        return False


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    backend = Inflating()
    try:
        with _gateway(tmp_path_factory.mktemp("r67"), backend) as made:
            yield made
    finally:
        backend.close()


@pytest.mark.parametrize("stream", [False, True])
def test_a_reported_prompt_over_what_the_body_can_hold_is_charged_the_bound(env: Env, stream: bool) -> None:
    """Review R67: before, the caller's budget was charged the 100,000,002 tokens reported (it
    overran its 1,000,000); now at most the body's bytes plus the template allowance, plus the 2
    output tokens, and the outcome says what the backend reported and what was charged."""
    _in_service(env)
    body = _body(stream=stream)
    before = env.spent()
    answer = env.post(body)
    assert answer.status_code == 200, answer.text
    if stream:
        assert b"data: [DONE]" in answer.content
    charged = env.spent() - before
    most = len(json.dumps(body)) + PROMPT_TEMPLATE_TOKENS
    assert 0 < charged <= most + 2, charged
    (outcome,) = env.outcomes()[-1:]
    reason = next(r for r in outcome.reasons if "prompt tokens" in r)
    assert f"reported {_REPORTED} prompt tokens" in reason and f"charged {charged - 2}" in reason
    assert env.held() == []


def test_the_bound_counts_each_part_that_is_not_text() -> None:
    """Review R67: the bound's allowances: one token a byte of the body, ``PROMPT_TEMPLATE_TOKENS``, and
    ``MEDIA_PART_TOKENS_MOST`` for each content part that is not text (an image by URL is a few
    bytes of body and thousands of tokens)."""
    body = {
        "messages": [
            {"role": "system", "content": "be brief"},
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "what is this?"},
                    {"type": "image_url", "image_url": {"url": "https://example.com/a.png"}},
                    {"type": "video_url", "video_url": {"url": "https://example.com/a.mp4"}},
                ],
            },
        ]
    }
    assert _prompt_most(300, body) == 300 + PROMPT_TEMPLATE_TOKENS + 2 * MEDIA_PART_TOKENS_MOST


def test_a_reported_prompt_within_the_bound_is_charged_as_reported(tmp_path: Path) -> None:
    """Review R67, the rule's other side: the hostile backend's usual 5 prompt tokens are charged as
    reported, with no reason added."""
    backend = Hostile()
    try:
        with _gateway(tmp_path, backend) as env:
            before = env.spent()
            answer = env.post(_body())
            assert answer.status_code == 200, answer.text
            usage = answer.json()["usage"]
            assert env.spent() - before == usage["prompt_tokens"] + usage["completion_tokens"]
            assert not any("prompt tokens" in r for r in env.outcomes()[-1].reasons)
    finally:
        backend.close()
