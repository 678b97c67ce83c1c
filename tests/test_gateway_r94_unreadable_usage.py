"""Review R94: a stream whose backend sent output and then a usage it cannot count (a negative
or boolean token count) broke with ``UsageUnreadable``. The call was audited and charged
correctly (charged as reserved, "its usage could not be read"), but the caller's comment before
the error event said ``: x-agentgate-charged: reserved; no usage was reported``: a usage was
reported, it could not be read. The comment now gives the reason docs/gateway.md gives for an
unreadable usage, "the usage reported cannot count the answer". Real HTTP on 127.0.0.1 (the
backend and the gateway), real Gate, real SQLite store."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_dispatch_r70_stream_charged import NO_USAGE, UNREAD, Scripted, _allowed
from test_gateway_end_to_end import _body
from test_gateway_hostile_backends import _chunk, _gateway, _settled

USAGES = {
    "negative": b'{"prompt_tokens": 5, "completion_tokens": -1}',
    "boolean": b'{"prompt_tokens": true, "completion_tokens": 1}',
}


@pytest.mark.parametrize("case", list(USAGES))
def test_an_unreadable_usage_after_output_is_said_so_to_the_caller(tmp_path: Path, case: str) -> None:
    usage = b'data: {"id": "c", "choices": [], "usage": ' + USAGES[case] + b"}\n\n"
    backend = Scripted(_chunk("hi") + usage)
    try:
        with _gateway(tmp_path, backend) as env:
            before, count = env.spent(), len(env.outcomes())
            answer = env.post(_body(stream=True, stream_options={"include_usage": True}))
            assert answer.status_code == 200, answer.text
            said, _, error = answer.text.rpartition(f": x-agentgate-charged: reserved; {UNREAD}\n\n")
            assert said, answer.text  # until R94: "no usage was reported"
            assert NO_USAGE not in answer.text
            assert json.loads(error.removeprefix("data: "))["error"]["code"] == "backend_failed"
            outcome = _settled(env, count + 1)[-1]
            assert outcome.status == "error"
            assert "the call ran but its usage could not be read; charged as reserved" in outcome.reasons
            assert env.spent() - before == _allowed(env) > 2
            assert env.held() == []
    finally:
        backend.close()
