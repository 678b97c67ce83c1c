"""A call behind an approval gate that an internal error of the gateway stopped after its
decision, before anything was sent (answered 500 ``internal_error``), is settled as not started:
its approval request is pending again and the same approval runs the retry (review R90b: it was
settled as started, the approval spent on a call no backend got)."""

from __future__ import annotations

import json
from typing import Any

import openai
import pytest
import test_gateway_sdks
from test_gateway_sdks import TOOLY, Env, _messages

from agentgate.dispatch.gateway import APPROVAL_HEADER
from agentgate.gate import Approval

# Its fixtures, for this module only (a ``pytest_plugins`` entry would reach every module).
sim, backend, env = test_gateway_sdks.sim, test_gateway_sdks.backend, test_gateway_sdks.env

ASK = {"model": TOOLY, "messages": _messages("A long essay, please."), "max_tokens": 200}
"""A call behind the policy's approval gate (``long-answers``: more than 100 output tokens)."""


def _approved(client: openai.OpenAI, approval: str, *, stream: bool) -> str:
    """The answer's text to ``ASK`` sent with ``approval``."""
    headers = {APPROVAL_HEADER: approval}
    if not stream:
        answer = client.chat.completions.create(**ASK, extra_headers=headers, stream=False)  # type: ignore[call-overload]
        return str(answer.choices[0].message.content)
    chunks = client.chat.completions.create(**ASK, extra_headers=headers, stream=True)  # type: ignore[call-overload]
    return "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_a_call_an_internal_error_stopped_before_sending_keeps_its_approval(
    env: Env, monkeypatch: pytest.MonkeyPatch, stream: bool
) -> None:
    with pytest.raises(openai.PermissionDeniedError) as asked:
        env.client(max_retries=0).chat.completions.create(**ASK, stream=stream)  # type: ignore[call-overload]
    approval = json.dumps(
        Approval.sign(asked.value.response.json(), env.keys["lead"]).to_dict(), separators=(",", ":")
    )
    tenant_of = env.gate.tenant_of

    def failing(identity: Any) -> str:  # once: after the decision, before the call is sent
        monkeypatch.setattr(env.gate, "tenant_of", tenant_of)
        raise RuntimeError("a bug")

    monkeypatch.setattr(env.gate, "tenant_of", failing)
    with pytest.raises(openai.InternalServerError) as failed:
        _approved(env.client(max_retries=0), approval, stream=stream)
    assert failed.value.code == "internal_error"
    (outcome,) = [e for e in env.entries() if e.kind == "outcome"]
    request = json.loads(approval)["request"]
    assert outcome.status == "error"
    assert outcome.reasons[-1] == f"not started: approval request {request} is pending again", outcome.reasons
    assert env.held() == 0 and env.spent() == 0 and env.backend.bodies == []
    assert _approved(env.client(max_retries=0), approval, stream=stream) == "xyz"
    assert len(env.backend.bodies) == 1
    env.check_log()
