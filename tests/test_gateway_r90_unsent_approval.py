"""A call behind an approval gate that the gateway cut before any backend got it is settled as not
started: its approval request is pending again, and the same body with the same approval then
runs (review R90).

Every "never sent" path of the gateway (the caller gone while the call was decided, JSON or
streamed; the shutdown's grace over while it was decided; the caller gone while it waited in line
for a backend's slot, JSON or streamed) went through ``Gate.arun`` as a call that started: the
gateway released its reservation and said nothing was sent, but the approval stayed used, and
the retry was refused 403 ``approval_not_usable`` ("Do not retry this call"). Now the gateway
raises ``CallerGone``/``GatewayStopped`` with ``sent=False`` there (a stream in line: its
``unsent``), which the Gate settles as not started."""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
import test_gateway_sdks
from starlette.requests import Request
from test_gateway_sdks import TOOLY, Env, _gateway, _messages

from agentgate._bounded_http import LOST
from agentgate.dispatch.gateway import APPROVAL_HEADER, Gateway, GatewayServer
from agentgate.gate import Approval
from agentgate.sim import SimServer

# Its fixtures, for this module only: a ``pytest_plugins`` entry would replace test_gateway's
# ``env`` in every module of the session.
sim, backend, env = test_gateway_sdks.sim, test_gateway_sdks.backend, test_gateway_sdks.env

ASK = {"model": TOOLY, "messages": _messages("A long essay, please."), "max_tokens": 200}
"""A call behind the policy's approval gate (``long-answers``: more than 100 output tokens)."""
CLASS = {"priority": "interactive"}
"""Rank 0: a call waits in line for a slot while its SLO lasts (``_gateway(slo_ttft_s=30)``)."""


def _approval(env: Env, *, stream: bool) -> str:
    """The lead's approval of ``ASK`` (streamed or not: the approval is bound to the body), asked
    for as a caller does (403 ``approval_required``)."""
    with pytest.raises(openai.PermissionDeniedError) as asked:
        env.client(max_retries=0).chat.completions.create(**ASK, extra_body=CLASS, stream=stream)  # type: ignore[call-overload]
    assert asked.value.code == "approval_required"
    approval = Approval.sign(asked.value.response.json(), env.keys["lead"])
    return json.dumps(approval.to_dict(), separators=(",", ":"))


def _approved(client: openai.OpenAI, approval: str, *, stream: bool) -> str:
    """The answer's text to ``ASK`` sent with ``approval``."""
    headers = {APPROVAL_HEADER: approval}
    if not stream:
        answer = client.chat.completions.create(**ASK, extra_body=CLASS, extra_headers=headers, stream=False)  # type: ignore[call-overload]
        return str(answer.choices[0].message.content)
    chunks = client.chat.completions.create(**ASK, extra_body=CLASS, extra_headers=headers, stream=True)  # type: ignore[call-overload]
    return "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)


def _until(done: Any, what: str) -> None:
    deadline = time.monotonic() + 5
    while not done():
        assert time.monotonic() < deadline, what
        time.sleep(0.01)


def _hold_the_only_slot(env: Env, backend: Any) -> threading.Thread:
    """Another call, started in a thread, holding the only slot at ``backend`` until
    ``backend.release`` is set."""
    backend.holding = True
    holder = threading.Thread(
        target=lambda: env.client(max_retries=0).chat.completions.create(
            model=TOOLY, messages=_messages(), max_tokens=8
        )
    )
    holder.start()
    _until(lambda: backend.bodies, "the other call never reached the backend")
    return holder


def _assert_pending_again_and_runs(env: Env, approval: str, stream: bool, sent_before: int) -> None:
    """The cut call's outcome re-armed its approval request; the same body with the same approval
    then runs, once."""
    _until(lambda: "outcome:error" in env.kinds(), "the cut call was never settled")
    assert len(env.backend.bodies) == sent_before, "the cut call reached the backend"
    (outcome,) = [e for e in env.entries() if e.kind == "outcome"]
    request = json.loads(approval)["request"]
    assert outcome.reasons[-1] == f"not started: approval request {request} is pending again", outcome.reasons
    assert env.held() == 0 and env.spent() == 0
    assert _approved(env.client(max_retries=0), approval, stream=stream) == "xyz"
    assert len(env.backend.bodies) == sent_before + 1
    env.check_log()


@contextlib.contextmanager
def _decision_held(env: Env, gateway: Gateway, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, Any]]:
    """The next decision, held in its worker thread until ``release`` is set; ``scope`` and
    ``task``: the request's ASGI scope and its handler's task, once ``begun`` is set."""
    held: dict[str, Any] = {"begun": threading.Event(), "release": threading.Event()}
    decide, answer = env.gate.authorize_invocation, gateway._answer

    def holding(*args: Any, **kwargs: Any) -> Any:
        if not held["begun"].is_set():
            held["begun"].set()
            held["release"].wait(10)
        return decide(*args, **kwargs)

    async def seen(request: Request) -> Any:
        held["scope"], held["task"] = request.scope, asyncio.current_task()
        return await answer(request)

    monkeypatch.setattr(env.gate, "authorize_invocation", holding)
    monkeypatch.setattr(gateway, "_answer", seen)
    try:
        yield held
    finally:
        held["release"].set()


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_a_call_whose_caller_left_while_it_was_decided_keeps_its_approval(
    env: Env, monkeypatch: pytest.MonkeyPatch, stream: bool
) -> None:
    approval = _approval(env, stream=stream)
    with _decision_held(env, env.server.gateway, monkeypatch) as held:
        with pytest.raises(openai.APITimeoutError):  # the caller hangs up while it is decided
            _approved(env.client(max_retries=0, timeout=0.3), approval, stream=stream)
        assert held["begun"].is_set()
        _until(lambda: held["scope"].get(LOST), "the gateway never saw the caller go")
    _assert_pending_again_and_runs(env, approval, stream, sent_before=0)


def _cut(client: openai.OpenAI, approval: str, answers: list[openai.APIStatusError]) -> None:
    """``ASK`` with ``approval`` sent to ``client``, the error it is answered kept in ``answers``."""
    try:
        _approved(client, approval, stream=False)
    except openai.APIStatusError as exc:
        answers.append(exc)


def test_a_call_the_shutdown_cut_while_it_was_decided_keeps_its_approval(
    env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A rolling restart: the approved call reached the gateway that stopped, and is sent again to
    # the one that serves (the fixture's, on the same store).
    approval = _approval(env, stream=False)
    stopping = GatewayServer(Gateway(env.gate, env.server.gateway.inventory), port=0, shutdown_grace_s=0)
    client = openai.OpenAI(
        base_url=stopping.start().url, api_key=env.agent.chain.token, http_client=env.http(), max_retries=0
    )
    answers: list[openai.APIStatusError] = []
    with _decision_held(env, stopping.gateway, monkeypatch) as held:
        caller = threading.Thread(target=lambda: _cut(client, approval, answers))
        caller.start()
        assert held["begun"].wait(5)
        stopper = threading.Thread(target=stopping.stop)
        stopper.start()
        _until(lambda: held["task"].cancelling() > 0, "the shutdown never cut the call")
    caller.join(10)
    stopper.join(15)
    (cut,) = answers
    assert (cut.status_code, cut.code) == (503, "shutting_down")
    assert "cut before it was sent" in cut.message
    _assert_pending_again_and_runs(env, approval, False, sent_before=0)


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_a_call_whose_caller_left_while_it_waited_in_line_keeps_its_approval(
    tmp_path: Path, sim: SimServer, backend: Any, stream: bool
) -> None:
    with _gateway(tmp_path, sim, backend, concurrency=1, slo_ttft_s=30.0) as env:
        approval = _approval(env, stream=stream)
        holder = _hold_the_only_slot(env, backend)
        with pytest.raises(openai.APITimeoutError):  # given up while it waits in line
            _approved(env.client(max_retries=0, timeout=0.5), approval, stream=stream)
        _until(lambda: "outcome:error" in env.kinds(), "the call given up in line was never settled")
        backend.release.set()
        holder.join(10)
        _until(lambda: env.held() == 0, "the other call was never settled")
        (gone, _done) = [e for e in env.entries() if e.kind == "outcome"]
        request = json.loads(approval)["request"]
        assert gone.status == "error" and gone.reasons[-1] == (
            f"not started: approval request {request} is pending again"
        ), gone.reasons
        assert _approved(env.client(max_retries=0), approval, stream=stream) == "xyz"
        assert len(backend.bodies) == 2  # the other call, then the retry: the cut one never
        env.check_log()
