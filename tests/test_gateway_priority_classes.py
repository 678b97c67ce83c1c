"""A gateway call carries the caller's priority class (docs/gateway.md).

``agentgate serve --policy policies/gpu_platform.yaml`` (what docs/gateway.md prints) let no caller
through: every model rule and grant of that policy constrains the call argument ``priority``, and a
gateway call had only ``max_tokens`` and ``body_sha256``. The body's optional top-level
``priority`` (a class name) is now one of the call's arguments, signed by the invocation; the
backend never gets the string (vLLM's ``priority`` is an integer), the dispatcher gets the class's
rank.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import _http
import httpx
import openai
import pytest
from starlette.requests import Request
from starlette.responses import Response

from agentgate.audit.entry import argument_digest
from agentgate.authority import Invocation, args_digest
from agentgate.dispatch import inventory_from_mapping
from agentgate.dispatch._policy import AllowedBackend, RoutePlan, RouteRequest
from agentgate.dispatch.gateway import (
    INVOCATION_HEADER,
    Gateway,
    GatewayGate,
    GatewayServer,
    InvocationSigner,
    chat_call,
    invocation_headers,
)
from agentgate.dispatch.router import Router
from agentgate.errors import InputError
from agentgate.keys import SigningKey
from agentgate.policy import parse_policy
from agentgate.sim import SimServer
from agentgate.store import SQLiteStore

POLICY = Path(__file__).resolve().parents[1] / "policies" / "gpu_platform.yaml"
MODEL = "llama-3.1-8b"


class _RecordingSim(SimServer):
    """The simulated vLLM backend, keeping every chat body it received."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.bodies: list[dict[str, Any]] = []

    async def _chat(self, request: Request) -> Response:
        self.bodies.append(json.loads(await request.body()))
        return await super()._chat(request)


class _RecordingRouter(Router):
    """The gateway's router, keeping the priority of every request it routes."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.priorities: list[int] = []

    def route(self, request: RouteRequest, now: float, allowed: AllowedBackend | None = None) -> RoutePlan:
        self.priorities.append(request.priority)
        return super().route(request, now, allowed)


@dataclass
class Env:
    gate: GatewayGate
    server: GatewayServer
    backend: _RecordingSim
    router: _RecordingRouter
    agent: SigningKey
    chain: Any

    def post(self, body: dict[str, Any]) -> httpx.Response:
        return _http.post(
            f"{self.server.url}/chat/completions",
            content=json.dumps(body).encode(),
            headers={"content-type": "application/json", **invocation_headers(self.agent, self.chain, body)},
            timeout=10,
        )

    def calls(self) -> list[Any]:
        self.gate.flush()
        return [e for e in self.gate.audit.entries() if (e.resource or "") == f"model:{MODEL}"]


@pytest.fixture
def env(tmp_path: Path) -> Iterator[Env]:
    """policies/gpu_platform.yaml as shipped (its DIDs swapped for keys held here), served."""
    root, agent = SigningKey.generate(), SigningKey.generate()
    text = POLICY.read_text()
    text = text.replace("did:key:z6MknBTMWCphRqDKgJQicT4niH5g2oV2e5ReK1JPBBf9L5ji", root.did)
    text = text.replace("did:key:z6MkogAsrL7rK73M5JZ4QihtKZBLeekc5bsW95SHHb8ZFCyo", agent.did)
    gate = GatewayGate(parse_policy(text, source="gpu_platform.yaml"), SQLiteStore(tmp_path / "a.db"))
    backend = _RecordingSim(model_name=MODEL, time_scale=0.01).start()
    inventory = inventory_from_mapping(
        {"backends": [{"name": "sim", "url": backend.url, "engine": "vllm", "models": [MODEL]}]}
    )
    router = _RecordingRouter(inventory)
    server = GatewayServer(Gateway(gate, inventory, router=router), port=0).start()
    try:
        identity = gate.issue(root, name="agent-a", key=agent, role="team-a-agent")
        yield Env(gate, server, backend, router, agent, identity.chain)
    finally:
        server.stop()
        backend.stop()
        gate.close()


def _body(**extra: Any) -> dict[str, Any]:
    return {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 8, **extra}


def test_the_policy_docs_gateway_md_serves_lets_its_agent_through_in_its_class(env: Env) -> None:
    """team-a-agent's grant says priority eq interactive: an interactive call is served (200) and
    audited as an allow over the arguments that carry the class."""
    body = _body(priority="interactive")
    answer = env.post(body)
    assert answer.status_code == 200, answer.text
    [entry] = [e for e in env.calls() if e.kind == "allow"]
    assert entry.index == int(answer.headers["x-agentgate-audit-index"])
    args = {"max_tokens": 8, "body_sha256": args_digest(body), "priority": "interactive"}
    assert chat_call(body).args == args
    assert entry.args_digest == argument_digest(args)


def test_a_class_the_grant_does_not_allow_and_no_class_are_refused(env: Env) -> None:
    batch = env.post(_body(priority="batch"))
    assert batch.status_code == 403, batch.text
    none = env.post(_body())
    assert none.status_code == 403, none.text
    assert none.json()["error"]["code"] == "call_not_covered"
    assert "priority" in none.json()["error"]["message"]
    unknown = env.post(_body(priority="urgent"))  # not a class of the policy: the grant refuses it
    assert unknown.status_code == 403, unknown.text
    assert [e.kind for e in env.calls()] == ["deny", "deny", "deny"]
    assert env.backend.bodies == []


@pytest.mark.parametrize("stream", [False, True])
def test_the_backend_never_gets_the_class_name_and_the_dispatcher_gets_its_rank(
    env: Env, stream: bool
) -> None:
    body = _body(priority="interactive", stream=stream)
    answer = env.post(body)
    assert answer.status_code == 200, answer.text
    [sent] = env.backend.bodies
    assert "priority" not in sent
    assert sent["messages"] == body["messages"]
    rank = env.gate.policy.document.priority_classes["interactive"].rank
    assert env.router.priorities == [rank] == [0]  # the dispatcher's default would have been 1


@pytest.mark.parametrize("bad", [5, True, "", "not a class!", ["interactive"], {"c": 1}])
def test_a_priority_that_is_not_a_class_name_is_a_bad_request(env: Env, bad: Any) -> None:
    """vLLM's own integer ``priority`` included: 400, audited, nothing sent."""
    body = _body(priority=bad)
    with pytest.raises(InputError, match="priority"):
        chat_call(body)
    answer = _http.post(
        f"{env.server.url}/chat/completions",
        content=json.dumps(body).encode(),
        headers={"content-type": "application/json"},
        timeout=10,
    )
    assert answer.status_code == 400, answer.text
    assert "priority" in answer.json()["error"]["message"]
    assert env.backend.bodies == []


def test_invocation_headers_sign_the_priority(env: Env) -> None:
    """The invocation's signed argument digest is over max_tokens, body_sha256 and priority; one
    signed without the class (or with another) does not authorize the call."""
    body = _body(priority="interactive")
    header = invocation_headers(env.agent, env.chain, body)[INVOCATION_HEADER]
    invocation = Invocation.decode(header, env.chain, chat_call(body))
    assert invocation.args_digest == args_digest(
        {"max_tokens": 8, "body_sha256": args_digest(body), "priority": "interactive"}
    )
    assert invocation.args_digest != args_digest({"max_tokens": 8, "body_sha256": args_digest(body)})
    # The same body with another class signed: the digests differ, so it cannot stand in.
    other = invocation_headers(env.agent, env.chain, _body(priority="batch"))[INVOCATION_HEADER]
    answer = _http.post(
        f"{env.server.url}/chat/completions",
        content=json.dumps(body).encode(),
        headers={
            "content-type": "application/json",
            "Authorization": f"Bearer {env.chain.token}",
            INVOCATION_HEADER: other,
        },
        timeout=10,
    )
    assert answer.status_code in (401, 403), answer.text
    assert env.backend.bodies == []


def test_the_openai_client_names_the_class_with_extra_body(env: Env) -> None:
    """docs/gateway.md: ``extra_body={"priority": ...}``; the signer signs the bytes sent."""
    signer = InvocationSigner(env.agent, env.chain)
    with openai.OpenAI(
        base_url=env.server.url,
        api_key=env.chain.token,
        http_client=signer.client(verify=_http.TLS),
        max_retries=0,
    ) as client:
        answer = client.chat.completions.create(
            model=MODEL,
            messages=[{"role": "user", "content": "hi"}],
            max_tokens=8,
            extra_body={"priority": "interactive"},
        )
        assert answer.choices[0].message.content
        with pytest.raises(openai.PermissionDeniedError):
            client.chat.completions.create(
                model=MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=8
            )
    assert [e.kind for e in env.calls()][-1] == "deny"
    assert len(env.backend.bodies) == 1
