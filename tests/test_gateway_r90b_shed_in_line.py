"""A call behind an approval gate that the gateway gave up while it waited in line (its SLO over:
429 ``shed``, or 503 ``no_backend``), before any backend got it, is settled as not started: its
approval request is pending again, and the same body with the same approval runs when the
answer's ``Retry-After`` says to try again (review R90b).

R90 settled so a call in line cut by its caller leaving or by the shutdown, but a call the
router gave up in line still used its approval up: the retry its 429 asked for was refused 403
``approval_not_usable`` ("Do not retry this call"), JSON and stream alike."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import openai
import pytest
import test_gateway_sdks
from test_gateway_sdks import TOOLY, Env, _gateway, _messages

from agentgate.dispatch.gateway import APPROVAL_HEADER
from agentgate.gate import Approval
from agentgate.sim import SimServer

# Its fixtures, for this module only (a ``pytest_plugins`` entry would reach every module).
sim, backend = test_gateway_sdks.sim, test_gateway_sdks.backend

ASK = {"model": TOOLY, "messages": _messages("A long essay, please."), "max_tokens": 200}
"""A call behind the policy's approval gate (``long-answers``: more than 100 output tokens)."""
CLASS = {"priority": "interactive"}
"""Rank 0: a call waits in line for a slot while its SLO lasts, then is shed."""


def _until(done: Any, what: str) -> None:
    deadline = time.monotonic() + 5
    while not done():
        assert time.monotonic() < deadline, what
        time.sleep(0.01)


def _approved(client: openai.OpenAI, approval: str, *, stream: bool) -> str:
    """The answer's text to ``ASK`` sent with ``approval``."""
    headers = {APPROVAL_HEADER: approval}
    if not stream:
        answer = client.chat.completions.create(**ASK, extra_body=CLASS, extra_headers=headers, stream=False)  # type: ignore[call-overload]
        return str(answer.choices[0].message.content)
    chunks = client.chat.completions.create(**ASK, extra_body=CLASS, extra_headers=headers, stream=True)  # type: ignore[call-overload]
    return "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)


def _approval(env: Env, *, stream: bool) -> str:
    """The lead's approval of ``ASK``, asked for as a caller does (403 ``approval_required``)."""
    with pytest.raises(openai.PermissionDeniedError) as asked:
        env.client(max_retries=0).chat.completions.create(**ASK, extra_body=CLASS, stream=stream)  # type: ignore[call-overload]
    assert asked.value.code == "approval_required"
    approval = Approval.sign(asked.value.response.json(), env.keys["lead"])
    return json.dumps(approval.to_dict(), separators=(",", ":"))


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_a_call_shed_while_it_waited_in_line_keeps_its_approval(
    tmp_path: Path, sim: SimServer, backend: Any, stream: bool
) -> None:
    with _gateway(tmp_path, sim, backend, concurrency=1, slo_ttft_s=0.3) as env:
        approval = _approval(env, stream=stream)
        backend.holding = True  # the only slot is held by another call until released
        holder = threading.Thread(
            target=lambda: env.client(max_retries=0).chat.completions.create(
                model=TOOLY, messages=_messages(), max_tokens=8
            )
        )
        holder.start()
        _until(lambda: backend.bodies, "the other call never reached the backend")
        with pytest.raises(openai.RateLimitError) as shed:  # its SLO ran out in line
            _approved(env.client(max_retries=0), approval, stream=stream)
        assert shed.value.code == "shed" and "Retry-After" in shed.value.response.headers
        backend.release.set()
        holder.join(10)
        _until(lambda: env.held() == 0, "a call was never settled")
        assert len(backend.bodies) == 1  # the other call's: no backend got the shed one
        (given_up, _done) = [e for e in env.entries() if e.kind == "outcome"]
        request = json.loads(approval)["request"]
        assert given_up.status == "error" and given_up.reasons[0].startswith("Shed: ")
        assert given_up.reasons[-1] == f"not started: approval request {request} is pending again"
        # The retry the 429 asked for, with the same approval: it runs, once.
        assert _approved(env.client(max_retries=0), approval, stream=stream) == "xyz"
        assert len(backend.bodies) == 2
        env.check_log()
