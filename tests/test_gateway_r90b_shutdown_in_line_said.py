"""A call the shutdown cut while it waited in line, before any backend got it, is answered 503
``shutting_down`` saying it was not sent and nothing was charged, streamed or not, and its
approval runs the retry (review R90b: a stream so cut was told "the call was cut before its
answer began", the words of one a backend had, charged its reservation, so its caller could not
tell that its approval was usable again)."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import openai
import pytest
import test_gateway_sdks
from test_gateway_r90_unsent_approval import _approval, _approved, _until
from test_gateway_sdks import TOOLY, _gateway, _messages

from agentgate.dispatch import inventory_from_mapping
from agentgate.dispatch.gateway import Gateway, GatewayServer
from agentgate.sim import SimServer

# Its fixtures, for this module only (a ``pytest_plugins`` entry would reach every module).
sim, backend = test_gateway_sdks.sim, test_gateway_sdks.backend


def _answered(client: openai.OpenAI, call: Any, answers: list[BaseException]) -> None:
    """``call(client)``, the error it is answered kept in ``answers``."""
    try:
        call(client)
    except openai.APIStatusError as exc:
        answers.append(exc)


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_a_call_the_shutdown_cut_in_line_is_told_nothing_was_charged(
    tmp_path: Path, sim: SimServer, backend: Any, stream: bool
) -> None:
    with _gateway(tmp_path, sim, backend) as env:
        approval = _approval(env, stream=stream)
        # A rolling restart: the gateway that stops has one slot, held by another call; the
        # approved call waits in line there, and is sent again to the one that serves.
        inventory = inventory_from_mapping(
            {
                "backends": [
                    {
                        "name": "scripted",
                        "url": backend.url,
                        "engine": "vllm",
                        "models": [TOOLY],
                        "max_concurrency": 1,
                    }
                ]
            }
        )
        stopping = GatewayServer(Gateway(env.gate, inventory, slo_ttft_s=30.0), port=0, shutdown_grace_s=0)
        client = openai.OpenAI(
            base_url=stopping.start().url,
            api_key=env.agent.chain.token,
            http_client=env.http(),
            max_retries=0,
        )
        backend.holding = True
        held: list[BaseException] = []
        holder = threading.Thread(
            target=_answered,
            args=(
                client,
                lambda c: c.chat.completions.create(model=TOOLY, messages=_messages(), max_tokens=8),
                held,
            ),
        )
        holder.start()
        _until(lambda: backend.bodies, "the other call never reached the backend")
        answers: list[BaseException] = []
        caller = threading.Thread(
            target=_answered, args=(client, lambda c: _approved(c, approval, stream=stream), answers)
        )
        caller.start()
        _until(lambda: stopping.gateway.dispatcher._waiting, "the approved call never waited in line")
        stopping.stop()
        caller.join(10)
        holder.join(10)
        backend.release.set()
        backend.holding = False
        (cut,) = answers
        assert isinstance(cut, openai.APIStatusError)
        assert (cut.status_code, cut.code) == (503, "shutting_down")
        assert "cut before it was sent; nothing was charged" in cut.message, cut.message
        assert len(backend.bodies) == 1  # the other call's: no backend got the cut one
        _until(lambda: env.held() == 0, "a cut call was never settled")
        request = json.loads(approval)["request"]
        (outcome,) = [
            e for e in env.entries() if e.kind == "outcome" and e.reasons[-1].startswith("not started")
        ]
        assert outcome.reasons == (
            "GatewayStopped",
            f"not started: approval request {request} is pending again",
        )
        assert _approved(env.client(max_retries=0), approval, stream=stream) == "xyz"
