"""docs/gateway.md, "Calls behind an approval gate": a call the gateway gave up before any backend
got it has its approval request pending again with no votes, so with a quorum above one every
approver's approval is sent again, one try each, and the call runs with the last (review R90b:
the page said the same approval ran the retry, which holds for a quorum of one only: the re-arm
clears the votes, ``ApprovalStore.rearm``)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
import test_gateway_sdks
from test_gateway_r90_unsent_approval import ASK, CLASS, _hold_the_only_slot, _until
from test_gateway_sdks import SIM, TOOLY, Env, _policy

from agentgate.dispatch import inventory_from_mapping
from agentgate.dispatch.gateway import APPROVAL_HEADER, Gateway, GatewayGate, GatewayServer
from agentgate.gate import Approval
from agentgate.keys import SigningKey
from agentgate.policy import parse_policy
from agentgate.sim import SimServer
from agentgate.store import SQLiteStore

# Its fixtures, for this module only (a ``pytest_plugins`` entry would reach every module).
sim, backend = test_gateway_sdks.sim, test_gateway_sdks.backend

DOCS = Path(__file__).resolve().parent.parent / "docs" / "gateway.md"


@pytest.fixture
def quorum_env(tmp_path: Path, sim: SimServer, backend: Any) -> Iterator[Env]:
    """The gateway of test_gateway_sdks with two approvers, ``lead`` and ``lead2``, a quorum of
    two, one slot for ``TOOLY`` and an SLO of 0.3 s."""
    backend.reset()
    keys = {n: SigningKey.generate() for n in ("root", "agent", "poor", "lead", "lead2")}
    text = _policy({n: k.did for n, k in keys.items()})
    text = text.replace("approvers: [lead]", "approvers: [lead, lead2]\n    quorum: 2")
    lead2 = f'  lead2: {{kind: human, did: "{keys["lead2"].did}", roles: [lead]}}\n'
    text = text.replace("  lead: {kind: human,", lead2 + "  lead: {kind: human,")
    gate = GatewayGate(parse_policy(text, source="quorum.yaml"), SQLiteStore(tmp_path / "agentgate.db"))
    inventory = inventory_from_mapping(
        {
            "backends": [
                {"name": "sim", "url": sim.url, "engine": "vllm", "models": [SIM]},
                {
                    "name": "scripted",
                    "url": backend.url,
                    "engine": "vllm",
                    "models": [TOOLY],
                    "max_concurrency": 1,
                },
            ]
        }
    )
    server = GatewayServer(Gateway(gate, inventory, slo_ttft_s=0.3), port=0, shutdown_grace_s=10).start()
    agent = gate.issue(keys["root"], name="agent", key=keys["agent"], role="chat")
    made = Env(gate, server, agent, agent, backend, sim, keys)
    try:
        yield made
    finally:
        backend.release.set()
        for closer in made.closers:
            closer.close()
        server.stop()
        gate.close()


def _send(env: Env, approval: str) -> str:
    """The answer's text to ``ASK`` sent with ``approval``."""
    answer = env.client(max_retries=0).chat.completions.create(
        **ASK, extra_body=CLASS, extra_headers={APPROVAL_HEADER: approval}
    )
    return str(answer.choices[0].message.content)


def test_the_docs_say_every_approver_sends_again_for_a_quorum_above_one() -> None:
    text = re.sub(r"\s+", " ", DOCS.read_text(encoding="utf-8"))
    assert "With a quorum above one the request pending again has no votes" in text
    assert "every approver's approval must be sent again, one try each" in text


def test_a_call_given_up_in_line_needs_every_approval_again(quorum_env: Env) -> None:
    env, backend = quorum_env, quorum_env.backend
    with pytest.raises(openai.PermissionDeniedError) as asked:
        env.client(max_retries=0).chat.completions.create(**ASK, extra_body=CLASS)
    payload = asked.value.response.json()
    lead, lead2 = (
        json.dumps(Approval.sign(payload, env.keys[who]).to_dict(), separators=(",", ":"))
        for who in ("lead", "lead2")
    )
    with pytest.raises(openai.PermissionDeniedError) as first:  # 1 of 2
        _send(env, lead)
    assert first.value.code == "approval_required"
    holder = _hold_the_only_slot(env, backend)
    with pytest.raises(openai.RateLimitError):  # 2 of 2: allowed, then shed in line
        _send(env, lead2)
    backend.release.set()
    holder.join(10)
    backend.holding = False
    _until(lambda: env.held() == 0, "a call was never settled")
    request = payload["request"]["id"]
    (given_up, _done) = [e for e in env.entries() if e.kind == "outcome"]
    assert given_up.reasons[-1] == f"not started: approval request {request} is pending again"
    # The votes went with the re-arm: the approval sent last counts one vote again, not two.
    with pytest.raises(openai.PermissionDeniedError) as again:
        _send(env, lead2)
    assert again.value.code == "approval_required"
    assert len(backend.bodies) == 1  # the other call's
    assert _send(env, lead) == "xyz"
    assert len(backend.bodies) == 2
    env.check_log()
