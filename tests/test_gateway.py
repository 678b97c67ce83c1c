"""The OpenAI-compatible gateway over real HTTP on 127.0.0.1: the `openai` client and
`langchain_openai.ChatOpenAI` as callers, simulated vLLM backends behind it, a real SQLite store."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import _http
import httpx
import openai
import pytest
from langchain_openai import ChatOpenAI

from agentgate.authority import Budget, issue
from agentgate.dispatch import inventory_from_mapping
from agentgate.dispatch.gateway import (
    APPROVAL_HEADER,
    INVOCATION_HEADER,
    Gateway,
    GatewayGate,
    GatewayServer,
    InvocationSigner,
    invocation_headers,
)
from agentgate.dispatch.prefix import estimate_tokens, prompt_text
from agentgate.gate import AgentIdentity, Approval
from agentgate.keys import SigningKey
from agentgate.policy import parse_policy
from agentgate.sim import SimServer
from agentgate.store import SQLiteStore, Store

MODEL = "llama-3.1-8b"
OTHER = "qwen3-32b"
NAMES = ("root", "agent", "poor", "outsider", "lead")


def _policy_text(dids: dict[str, str]) -> str:
    # One micro-dollar per token in and out, so that a charge reads as a token count.
    return f"""
version: 1
trust_anchors:
  root: {{did: "{dids["root"]}"}}
tenants:
  lab: {{}}
principals:
  agent: {{kind: agent, did: "{dids["agent"]}", tenant: lab, roles: [chat]}}
  poor: {{kind: agent, did: "{dids["poor"]}", tenant: lab, roles: [thrifty]}}
  lead: {{kind: human, did: "{dids["lead"]}", roles: [lead]}}
models:
  {MODEL}: {{cost_per_mtok: {{input: 1000000, output: 1000000}}}}
  {OTHER}: {{cost_per_mtok: {{input: 1000000, output: 1000000}}}}
roles:
  chat:
    kind: agent
    capabilities:
      - resource: model:{MODEL}
        constraints: {{max_tokens: {{le: 512}}}}
      - resource: model:{OTHER}
    budget: {{limit: 1000000, unit: usd_micros}}
    ttl_s: 3600
    delegation:
      max_depth: 1
      max_ttl_s: 600
      capabilities:
        - resource: model:{MODEL}
        - resource: model:{OTHER}
  thrifty:
    kind: agent
    capabilities:
      - resource: model:{MODEL}
    budget: {{limit: 100, unit: usd_micros}}
    ttl_s: 3600
  lead:
    kind: human
    capabilities:
      - resource: model:{OTHER}
    ttl_s: 3600
approvals:
  long-answers:
    resource: model:{OTHER}
    when: {{max_tokens: {{gt: 100}}}}
    approvers: [lead]
"""


@dataclass
class Env:
    gate: GatewayGate
    server: GatewayServer
    keys: dict[str, SigningKey]
    agent: AgentIdentity
    poor: AgentIdentity
    backend: SimServer
    clients: list[openai.OpenAI | httpx.Client] = field(default_factory=list)

    @property
    def base_url(self) -> str:
        return self.server.url

    def openai(self, identity: AgentIdentity | None = None, **kwargs: Any) -> openai.OpenAI:
        who = identity or self.agent
        signer = InvocationSigner(who.key, who.chain)
        client = openai.OpenAI(
            base_url=self.base_url,
            api_key=who.chain.token,
            http_client=signer.client(verify=_http.TLS),
            max_retries=0,
            **kwargs,
        )
        self.clients.append(client)
        return client

    def close(self) -> None:
        for client in self.clients:
            client.close()

    def ledger(self) -> list[tuple[Any, ...]]:
        """Every budget row and reservation: what 'nothing charged' compares."""
        self.gate.flush()
        rows = self.gate.store.query("SELECT * FROM budget_ledger ORDER BY grant_id")
        rows += self.gate.store.query("SELECT * FROM budget_reservations ORDER BY id")
        return [tuple(r) for r in rows]

    def entries(self) -> list[Any]:
        """The entries of calls (the grants' own ``agent:NAME`` entries left out)."""
        self.gate.flush()
        return [e for e in self.gate.audit.entries() if not (e.resource or "").startswith("agent:")]

    def spent(self, identity: AgentIdentity | None = None) -> int:
        who = identity or self.agent
        return self.gate.budget_usage(who)[who.chain.root.id][0]


@pytest.fixture(scope="module")
def backends() -> Iterator[tuple[SimServer, SimServer]]:
    servers = (
        SimServer(model_name=MODEL, time_scale=0.01).start(),
        SimServer(model_name=OTHER, time_scale=0.01).start(),
    )
    yield servers
    for server in servers:
        server.stop()


@pytest.fixture
def env(tmp_path: Path, backends: tuple[SimServer, SimServer]) -> Iterator[Env]:
    keys = {name: SigningKey.generate() for name in NAMES}
    policy = parse_policy(_policy_text({n: k.did for n, k in keys.items()}), source="gateway.yaml")
    gate = GatewayGate(policy, SQLiteStore(tmp_path / "agentgate.db"))
    inventory = inventory_from_mapping(
        {
            "backends": [
                {"name": f"sim-{i}", "url": s.url, "engine": "vllm", "models": [s.model_name]}
                for i, s in enumerate(backends)
            ]
        }
    )
    server = GatewayServer(Gateway(gate, inventory), port=0).start()
    agent = gate.issue(keys["root"], name="agent", key=keys["agent"], role="chat")
    poor = gate.issue(keys["root"], name="poor", key=keys["poor"], role="thrifty")
    made = Env(gate, server, keys, agent, poor, backends[0])
    try:
        yield made
    finally:
        made.close()
        server.stop()
        gate.close()


def _messages(text: str = "Say something short.") -> list[dict[str, str]]:
    return [{"role": "user", "content": text}]


def _body(**extra: Any) -> dict[str, Any]:
    return {"model": MODEL, "messages": _messages(), "max_tokens": 8, **extra}


def _post(env: Env, body: Any, headers: dict[str, str] | None = None) -> httpx.Response:
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    return _http.post(
        f"{env.base_url}/chat/completions",
        content=content,
        headers={"content-type": "application/json", **(headers or {})},
        timeout=10,
    )


def _assert_refused(
    env: Env, response: httpx.Response, status: int, before: list[Any], count: int
) -> dict[str, Any]:
    """The refusal answers ``status`` with an OpenAI error body, charges nothing and is audited as a deny."""
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["message"]
    assert env.ledger() == before
    entries = env.entries()
    assert [e.kind for e in entries[count:]] == ["deny"]
    return dict(error)


# --- the happy paths, with the official clients ------------------------------------------------


def test_openai_client_gets_an_answer_and_the_reported_usage_is_charged(env: Env) -> None:
    client = env.openai()
    completion = client.chat.completions.create(model=MODEL, messages=_messages(), max_tokens=8)
    assert completion.choices[0].message.content
    usage = completion.usage
    assert usage is not None and usage.completion_tokens == 8
    assert env.spent() == usage.prompt_tokens + usage.completion_tokens
    kinds = [(e.kind, e.resource) for e in env.entries()]
    assert ("allow", f"model:{MODEL}") in kinds and ("outcome", f"model:{MODEL}") in kinds


def test_a_json_answer_is_the_backends_bytes_with_the_audit_index_and_server_timing(env: Env) -> None:
    body = _body()
    response = _post(env, body, invocation_headers(env.agent.key, env.agent.chain, body))
    assert response.status_code == 200, response.text
    assert response.json()["choices"][0]["message"]["content"]
    assert response.headers["x-agentgate-audit-index"] == str(env.entries()[0].index)
    timing = dict(part.strip().split(";dur=") for part in response.headers["server-timing"].split(","))
    assert list(timing) == ["read", "wait", "parse", "decide", "backend", "total"]
    assert all(float(ms) >= 0 for ms in timing.values())
    assert float(timing["total"]) >= float(timing["decide"]) + float(timing["backend"])


def test_openai_client_streams_and_the_streamed_usage_is_charged(env: Env) -> None:
    client = env.openai()
    stream = client.chat.completions.create(
        model=MODEL,
        messages=_messages(),
        max_tokens=6,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    usage = chunks[-1].usage
    assert text and usage is not None and usage.completion_tokens == 6
    assert chunks[0].choices[0].delta.role == "assistant"
    assert env.spent() == usage.prompt_tokens + usage.completion_tokens


def test_a_stream_without_usage_requested_is_still_charged_what_the_backend_reported(env: Env) -> None:
    client = env.openai()
    chunks = list(
        client.chat.completions.create(model=MODEL, messages=_messages(), max_tokens=5, stream=True)
    )
    assert all(c.usage is None for c in chunks)
    # The backend always reports usage to the gateway; 5 output tokens plus the prompt.
    assert 5 < env.spent() < 5 + 64


def test_chat_openai_invoke_stream_and_ainvoke(env: Env) -> None:
    signer = InvocationSigner(env.agent.key, env.agent.chain)
    sync_http, async_http = signer.client(verify=_http.TLS), signer.async_client(verify=_http.TLS)
    env.clients.append(sync_http)
    chat = ChatOpenAI(
        model=MODEL,
        base_url=env.base_url,
        api_key=env.agent.chain.token,
        max_tokens=7,
        max_retries=0,
        http_client=sync_http,
        http_async_client=async_http,
        stream_usage=True,
    )
    answer = chat.invoke("hello")
    assert answer.content and answer.usage_metadata is not None
    assert answer.usage_metadata["output_tokens"] == 7
    pieces = list(chat.stream("hello again"))
    assert "".join(str(p.content) for p in pieces)
    streamed = [p.usage_metadata for p in pieces if p.usage_metadata]
    assert streamed and streamed[-1]["output_tokens"] == 7

    async def ainvoke() -> Any:
        try:
            return await chat.ainvoke("and once more")
        finally:
            await async_http.aclose()  # on the loop that opened its connections

    later = asyncio.run(ainvoke())
    assert later.usage_metadata is not None
    charged = [answer.usage_metadata, streamed[-1], later.usage_metadata]
    assert env.spent() == sum(u["input_tokens"] + u["output_tokens"] for u in charged)
    assert sum(1 for e in env.entries() if e.kind == "allow") == 3


def test_models_health_and_metrics(env: Env) -> None:
    client = env.openai()
    assert sorted(m.id for m in client.models.list()) == sorted([MODEL, OTHER])
    assert _http.get(env.base_url.removesuffix("/v1") + "/healthz").json() == {"status": "ok"}
    client.chat.completions.create(model=MODEL, messages=_messages(), max_tokens=4)
    _post(env, _body())  # no invocation: 401
    metrics = _http.get(env.base_url.removesuffix("/v1") + "/metrics").text
    assert 'agentgate_gateway_requests_total{status="200"} 1.0' in metrics
    assert 'agentgate_gateway_requests_total{status="401"} 1.0' in metrics
    assert 'agentgate_gateway_tokens_total{kind="completion"} 4.0' in metrics


def test_a_second_model_is_routed_to_the_backend_that_serves_it(
    env: Env, backends: tuple[SimServer, SimServer]
) -> None:
    served = backends[1].served
    completion = env.openai().chat.completions.create(model=OTHER, messages=_messages(), max_tokens=3)
    assert completion.usage is not None and completion.usage.completion_tokens == 3
    assert backends[1].served == served + 1


# --- approvals over HTTP -------------------------------------------------------------------------


def _long(env: Env) -> Any:
    """A sender of one call behind the approval gate (200 tokens of OTHER), each time freshly signed."""
    body = {"model": OTHER, "messages": _messages(), "max_tokens": 200}
    return lambda extra=None: _post(
        env, body, {**invocation_headers(env.agent.key, env.agent.chain, body), **(extra or {})}
    )


def test_a_call_behind_an_approval_gate_asks_then_runs_once_with_a_signed_approval(env: Env) -> None:
    send = _long(env)
    before = env.ledger()
    asked = send()
    assert asked.status_code == 403 and asked.json()["error"]["code"] == "approval_required"
    payload = asked.json()
    assert payload["agentgate"] == "approval_required"
    assert payload["request"]["resource"] == f"model:{OTHER}" and payload["request"]["approvers"] == ["lead"]
    assert env.ledger() == before  # nothing reserved while it waits
    assert [e.kind for e in env.entries()][-1] == "approval_required"
    again = send()  # asked again before anyone answered: the same request, not a second one
    assert again.json()["request"]["id"] == payload["request"]["id"]

    approval = json.dumps(Approval.sign(payload, env.keys["lead"]).to_dict())
    answered = send({APPROVAL_HEADER: approval})
    assert answered.status_code == 200, answered.text
    assert answered.json()["usage"]["completion_tokens"] == 200
    assert env.spent() > 0
    allowed = [e for e in env.entries() if e.kind == "allow"][-1]
    assert allowed.approver == env.keys["lead"].did
    # single use: the same approval again is refused; without it, the call asks anew
    replay = send({APPROVAL_HEADER: approval})
    assert replay.status_code == 403 and replay.json()["error"]["code"] == "approval_not_usable"
    assert "already used" in replay.json()["error"]["message"]
    anew = send()
    assert anew.json()["error"]["code"] == "approval_required"
    assert anew.json()["request"]["id"] != payload["request"]["id"]


def test_an_approval_is_bound_to_the_body_and_to_an_allowed_approver(env: Env) -> None:
    send = _long(env)
    payload = send().json()
    other = {"model": OTHER, "messages": _messages("Something else."), "max_tokens": 200}
    approval = json.dumps(Approval.sign(payload, env.keys["lead"]).to_dict())
    moved = _post(
        env, other, {**invocation_headers(env.agent.key, env.agent.chain, other), APPROVAL_HEADER: approval}
    )
    assert moved.status_code == 403 and moved.json()["error"]["code"] == "approval_required"
    by_outsider = json.dumps(Approval.sign(payload, env.keys["outsider"]).to_dict())
    assert send({APPROVAL_HEADER: by_outsider}).json()["error"]["code"] == "approval_required"
    by_requester = json.dumps(Approval.sign(payload, env.keys["agent"]).to_dict())
    assert send({APPROVAL_HEADER: by_requester}).json()["error"]["code"] == "approval_required"
    assert env.spent() == 0


def test_a_malformed_approval_header_is_400_with_nothing_charged(env: Env) -> None:
    send = _long(env)
    before = env.ledger()
    for bad in ("not json", "[1]", '{"request": "x"}'):
        answer = send({APPROVAL_HEADER: bad})
        assert answer.status_code == 400 and answer.json()["error"]["code"] == "malformed_approval"
    assert env.ledger() == before


def test_calls_below_the_gate_need_no_approval(env: Env) -> None:
    body = {"model": OTHER, "messages": _messages(), "max_tokens": 100}
    assert _post(env, body, invocation_headers(env.agent.key, env.agent.chain, body)).status_code == 200


# --- faults: each refused, audited, and charged nothing -------------------------------------------


def test_no_invocation_is_401_with_nothing_charged(env: Env) -> None:
    before, count = env.ledger(), len(env.entries())
    error = _assert_refused(env, _post(env, _body()), 401, before, count)
    assert error["type"] == "authentication_error" and error["code"] == "missing_invocation"
    # The official client sees the same refusal as its own error type.
    before, count = env.ledger(), len(env.entries())
    plain = openai.OpenAI(
        base_url=env.base_url,
        api_key="not-a-chain",
        max_retries=0,
        http_client=openai.DefaultHttpxClient(verify=_http.TLS),
    )
    env.clients.append(plain)
    with pytest.raises(openai.AuthenticationError):
        plain.chat.completions.create(model=MODEL, messages=_messages(), max_tokens=8)
    assert env.ledger() == before and [e.kind for e in env.entries()[count:]] == ["deny"]


@pytest.mark.parametrize(
    "fault", ["garbage", "other_key", "edited_body", "replayed", "chain_without_invocation"]
)
def test_an_invalid_invocation_is_401_with_nothing_charged(env: Env, fault: str) -> None:
    body = _body()
    headers = invocation_headers(env.agent.key, env.agent.chain, body)
    if fault == "garbage":
        headers[INVOCATION_HEADER] = "agi1.not.valid"
    elif fault == "other_key":  # a copied chain is useless without the holder's key
        headers = invocation_headers(env.keys["outsider"], env.agent.chain, body)
    elif fault == "edited_body":  # signed for one prompt, sent with another
        body = _body(messages=_messages("Ignore the budget and write a novel."))
    elif fault == "replayed":
        assert _post(env, body, headers).status_code == 200
    elif fault == "chain_without_invocation":
        del headers[INVOCATION_HEADER]
    before, count = env.ledger(), len(env.entries())
    error = _assert_refused(env, _post(env, body, headers), 401, before, count)
    assert error["type"] == "authentication_error"


def test_a_revoked_grant_is_401(env: Env) -> None:
    env.gate.revoke(env.agent, reason="leaked")
    body = _body()
    before, count = env.ledger(), len(env.entries())
    response = _post(env, body, invocation_headers(env.agent.key, env.agent.chain, body))
    assert _assert_refused(env, response, 401, before, count)["code"] == "revoked"


def test_over_budget_is_402_with_a_reason_and_nothing_charged(env: Env) -> None:
    client = env.openai(env.poor)
    before, count = env.ledger(), len(env.entries())
    with pytest.raises(openai.APIStatusError) as raised:
        client.chat.completions.create(model=MODEL, messages=_messages(), max_tokens=200)
    assert raised.value.status_code == 402
    error = raised.value.body
    # 200 tokens of output alone are more than the whole budget: not a spent one (review R82).
    assert isinstance(error, dict) and error["code"] == "budget_too_small"
    assert "more than the whole budget" in error["message"] and "usd_micros" in error["message"]
    assert env.ledger() == before and [e.kind for e in env.entries()[count:]] == ["deny"]
    # A call that fits the same budget still goes through.
    client.chat.completions.create(model=MODEL, messages=_messages(), max_tokens=4)
    assert 0 < env.spent(env.poor) <= 100


def test_a_model_the_grant_does_not_cover_is_403(env: Env) -> None:
    # The policy lets `agent` use both models; a delegated grant narrows it to one. The
    # authority engine refuses the other model under that grant.
    narrow = env.gate.delegate(
        env.agent,
        name="helper",
        key=SigningKey.generate(),
        capabilities=[f"model:{MODEL}?max_tokens<=256"],
        ttl=timedelta(minutes=5),
        budget=1000,
    )
    body = {**_body(), "model": OTHER}
    before, count = env.ledger(), len(env.entries())
    response = _post(env, body, invocation_headers(narrow.key, narrow.chain, body))
    error = _assert_refused(env, response, 403, before, count)
    assert error["type"] == "permission_error" and error["code"] == "call_not_covered"
    # The same grant may call the model it covers.
    body = _body()
    assert _post(env, body, invocation_headers(narrow.key, narrow.chain, body)).status_code == 200


def test_a_model_the_policy_does_not_allow_and_arguments_outside_the_grant_are_403(env: Env) -> None:
    client = env.openai(env.poor)
    before, count = env.ledger(), len(env.entries())
    with pytest.raises(openai.PermissionDeniedError):
        client.chat.completions.create(model=OTHER, messages=_messages(), max_tokens=4)
    assert env.ledger() == before and [e.kind for e in env.entries()[count:]] == ["deny"]
    before, count = env.ledger(), len(env.entries())
    body = _body(max_tokens=4096)  # the grant caps max_tokens at 512
    response = _post(env, body, invocation_headers(env.agent.key, env.agent.chain, body))
    assert _assert_refused(env, response, 403, before, count)["type"] == "permission_error"


@pytest.mark.parametrize(
    "body",
    [
        b"{not json",
        b"[1, 2]",
        {"model": MODEL},
        {"model": MODEL, "messages": []},
        {"messages": _messages()},
        {"model": MODEL, "messages": _messages(), "max_tokens": -1},
        {"model": MODEL, "messages": _messages(), "stream": "yes"},
    ],
    ids=[
        "not_json",
        "not_object",
        "no_messages",
        "empty_messages",
        "no_model",
        "bad_max_tokens",
        "bad_stream",
    ],
)
def test_a_malformed_body_is_400_with_nothing_charged(env: Env, body: Any) -> None:
    headers = {"Authorization": f"Bearer {env.agent.chain.token}"}
    before, count = env.ledger(), len(env.entries())
    error = _assert_refused(env, _post(env, body, headers), 400, before, count)
    assert error["type"] == "invalid_request_error"


def test_openai_client_sees_400_as_bad_request(env: Env) -> None:
    client = env.openai()
    before = env.ledger()
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(model=MODEL, messages=[], max_tokens=4)
    assert env.ledger() == before


def test_a_backend_that_is_down_answers_503_and_releases_the_reservation(env: Env) -> None:
    env.backend.kill()
    try:
        client = env.openai()
        with pytest.raises(openai.APIStatusError) as raised:
            client.chat.completions.create(model=MODEL, messages=_messages(), max_tokens=4)
        assert raised.value.status_code in (502, 503)
    finally:
        env.backend.revive()
    env.gate.flush()
    assert env.spent() == 0
    outcomes = [e for e in env.entries() if e.kind == "outcome"]
    assert outcomes and outcomes[-1].status == "error"


# --- agentgate serve ------------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_until_serving(base: str, process: subprocess.Popen[Any]) -> None:
    """Return once `agentgate serve` at `base` answers /healthz 200; fail the test if the process
    exits first or it does not answer within 60 s (a start on a loaded machine took over 20)."""
    deadline = time.monotonic() + 60
    while True:
        try:
            if _http.get(base + "/healthz").status_code == 200:
                return
        except httpx.TransportError:
            pass
        assert process.poll() is None and time.monotonic() < deadline, "agentgate serve did not start"
        time.sleep(0.1)


def test_agentgate_serve_answers_models_health_and_chat(
    tmp_path: Path, backends: tuple[SimServer, SimServer]
) -> None:
    keys = {name: SigningKey.generate() for name in NAMES}
    policy = tmp_path / "policy.yaml"
    policy.write_text(_policy_text({n: k.did for n, k in keys.items()}))
    inventory = tmp_path / "inventory.yaml"
    inventory.write_text(
        "backends:\n"
        + "".join(
            f"  - {{name: sim-{i}, url: '{s.url}', engine: vllm, models: [{s.model_name}]}}\n"
            for i, s in enumerate(backends)
        )
    )
    store = tmp_path / "serve.db"
    init = [sys.executable, "-m", "agentgate.cli.main", "store", "init", "--store", str(store)]
    assert subprocess.run(init, capture_output=True, timeout=60).returncode == 0  # serve creates none
    port = _free_port()
    command = [sys.executable, "-m", "agentgate.cli.main", "serve", "--policy", str(policy)]
    command += ["--inventory", str(inventory), "--port", str(port), "--store", str(store)]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_until_serving(base, process)
        models = _http.get(base + "/v1/models").json()
        assert sorted(m["id"] for m in models["data"]) == sorted([MODEL, OTHER])
        # The grant is issued into the store the server uses; the server decides against it.
        issuer = GatewayGate(parse_policy(policy.read_text(), source=str(policy)), SQLiteStore(store))
        try:
            agent = issuer.issue(keys["root"], name="agent", key=keys["agent"], role="chat")
        finally:
            issuer.close()
        body = _body()
        response = _http.post(
            base + "/v1/chat/completions", json=body, headers=invocation_headers(agent.key, agent.chain, body)
        )
        assert response.status_code == 200 and response.json()["usage"]["completion_tokens"] == 8
        assert _http.post(base + "/v1/chat/completions", json=body).status_code == 401
    finally:
        process.terminate()
        process.communicate(timeout=20)


def test_agentgate_serve_refuses_a_missing_policy_in_one_line(tmp_path: Path) -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "agentgate.cli.main",
            "serve",
            "--policy",
            str(tmp_path / "nope.yaml"),
            "--inventory",
            str(tmp_path / "inv.yaml"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert done.stderr.startswith("agentgate: error:") and len(done.stderr.strip().splitlines()) == 1


def test_agentgate_serve_refuses_a_store_that_does_not_exist(tmp_path: Path) -> None:
    """``agentgate serve --store typo.db`` (or ``AGENTGATE_STORE`` mistyped, or the default
    ``.agentgate/agentgate.db`` from another working directory) started a gateway on a new empty
    store: revocations, budgets and nonces written to the store in use never reached it, so a
    revoked grant was served. An empty file was taken for a new store the same way. Rule: exit 2
    before "serving", one line naming the store and how to create one (``agentgate store init
    --store PATH``); nothing created. After that command, the same line serves."""
    keys = {name: SigningKey.generate() for name in NAMES}
    policy = tmp_path / "policy.yaml"
    policy.write_text(_policy_text({n: k.did for n, k in keys.items()}))
    inventory = tmp_path / "inventory.yaml"
    inventory.write_text(
        f"backends:\n  - {{name: sim, url: 'http://127.0.0.1:9', engine: vllm, models: [{MODEL}]}}\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTGATE_")}
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / "empty.db").touch()

    def serve(store: list[str], cwd: Path = tmp_path) -> subprocess.Popen[str]:
        port = _free_port()
        command = [sys.executable, "-m", "agentgate.cli.main", "serve", "--policy", str(policy)]
        command += ["--inventory", str(inventory), "--port", str(port), *store]
        process = subprocess.Popen(
            command, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        deadline = time.monotonic() + 60
        while process.poll() is None and time.monotonic() < deadline:
            try:
                if _http.get(f"http://127.0.0.1:{port}/healthz").status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.1)
        return process

    typo = tmp_path / "typo" / "serve.db"
    for store, cwd, named in (
        (["--store", str(typo)], tmp_path, str(typo)),
        ([], elsewhere, ".agentgate/agentgate.db"),
        (["--store", str(tmp_path / "empty.db")], tmp_path, str(tmp_path / "empty.db")),
    ):
        process = serve(store, cwd)
        if process.poll() is None:
            process.terminate()
            process.communicate(timeout=20)
            pytest.fail(f"agentgate serve {store} served a store that does not exist")
        _, err = process.communicate(timeout=20)
        assert process.returncode == 2 and "serving" not in err, err
        lines = err.splitlines()
        assert len(lines) == 1 and lines[0].startswith(f"agentgate: error: no store at {named}"), err
        if not store or store[1] == str(typo):
            assert f"agentgate store init --store {named}" in lines[0], err
    assert not (tmp_path / "typo").exists() and not (elsewhere / ".agentgate").exists()
    assert (tmp_path / "empty.db").stat().st_size == 0
    # What the error line says to run makes a store that the gateway then serves.
    init = [sys.executable, "-m", "agentgate.cli.main", "store", "init", "--store", str(typo)]
    assert subprocess.run(init, env=env, capture_output=True, timeout=60).returncode == 0
    process = serve(["--store", str(typo)])
    try:
        assert process.poll() is None, process.communicate(timeout=20)
    finally:
        process.terminate()
        process.communicate(timeout=20)
    assert process.returncode == 0


def test_a_chain_issued_elsewhere_is_honoured_and_charged(env: Env) -> None:
    # As `agentgate grant issue` makes it: signed by the trust anchor, never recorded in the
    # gateway's store. The authority engine verifies it; the ledger opens its budget on first use.
    chain = issue(
        env.keys["root"],
        env.keys["agent"].public,
        [f"model:{MODEL}?max_tokens<=64"],
        ttl=600,
        budget=Budget(10_000, "usd_micros"),
    )
    body = _body()
    response = _post(env, body, invocation_headers(env.keys["agent"], chain, body))
    assert response.status_code == 200, response.text
    usage = response.json()["usage"]
    env.gate.flush()
    assert env.gate.ledger.spent(chain.id) == usage["prompt_tokens"] + usage["completion_tokens"]


def test_a_stream_the_caller_abandons_is_charged_its_whole_reservation(env: Env) -> None:
    # A slow backend (real-time simulation) so that the caller can leave mid-answer.
    slow = SimServer(model_name=MODEL, time_scale=1.0).start()
    inventory = inventory_from_mapping(
        {"backends": [{"name": "slow", "url": slow.url, "engine": "vllm", "models": [MODEL]}]}
    )
    server = GatewayServer(Gateway(env.gate, inventory), port=0).start()
    try:
        body = _body(max_tokens=400, stream=True)
        headers = {
            "content-type": "application/json",
            **invocation_headers(env.agent.key, env.agent.chain, body),
        }
        with (
            _http.Client(timeout=10) as http,
            http.stream(
                "POST", f"{server.url}/chat/completions", content=json.dumps(body), headers=headers
            ) as response,
        ):
            assert response.status_code == 200
            events = response.iter_lines()
            assert next(line for line in events if line.startswith("data: {"))
        # The caller is gone before the answer ended: no usage was reported to the gateway.
        deadline = time.monotonic() + 10
        while not [e for e in env.entries() if e.kind == "outcome"]:
            assert time.monotonic() < deadline, "no outcome recorded for the abandoned stream"
            time.sleep(0.05)
        outcome = [e for e in env.entries() if e.kind == "outcome"][-1]
        assert outcome.status == "error"
        reserved = estimate_tokens(prompt_text(body["messages"])) + 400
        assert env.spent() == reserved
    finally:
        server.stop()
        slow.stop()


def test_authentication_comes_before_authorization(env: Env) -> None:
    # A copied chain without its key, asking for a model the policy refuses its holder: 401, not
    # 403, so that a caller without valid authority learns nothing about the policy.
    body = {**_body(), "model": OTHER}
    headers = invocation_headers(env.keys["outsider"], env.poor.chain, body)
    before, count = env.ledger(), len(env.entries())
    assert _assert_refused(env, _post(env, body, headers), 401, before, count)["code"] == "wrong_holder"


def test_the_gateway_decides_and_charges_on_both_stores(
    store: Store, backends: tuple[SimServer, SimServer], tmp_path: Path
) -> None:
    # Several gateway processes share one authority through PostgreSQL; the path is the same.
    keys = {name: SigningKey.generate() for name in NAMES}
    policy = parse_policy(_policy_text({n: k.did for n, k in keys.items()}), source="gateway.yaml")
    gate = GatewayGate(policy, store, log_key=SigningKey.generate())
    inventory = inventory_from_mapping(
        {"backends": [{"name": "sim-0", "url": backends[0].url, "engine": "vllm", "models": [MODEL]}]}
    )
    server = GatewayServer(Gateway(gate, inventory), port=0).start()
    try:
        agent = gate.issue(keys["root"], name="agent", key=keys["agent"], role="chat")
        poor = gate.issue(keys["root"], name="poor", key=keys["poor"], role="thrifty")
        url = f"{server.url}/chat/completions"
        body = _body()
        allowed = _http.post(url, json=body, headers=invocation_headers(agent.key, agent.chain, body))
        assert allowed.status_code == 200
        usage = allowed.json()["usage"]
        assert (
            gate.budget_usage(agent)[agent.chain.root.id][0]
            == usage["prompt_tokens"] + usage["completion_tokens"]
        )
        body = _body(max_tokens=200)
        refused = _http.post(url, json=body, headers=invocation_headers(poor.key, poor.chain, body))
        # 200 tokens alone are more than the poor's whole budget (review R82).
        assert refused.status_code == 402 and refused.json()["error"]["code"] == "budget_too_small"
        assert gate.budget_usage(poor) == {poor.chain.root.id: (0, 100)}
        gate.flush()
        assert [e.kind for e in gate.audit.entries()][-1] == "deny"
    finally:
        server.stop()
        gate.close()


def test_concurrent_callers_are_each_decided_charged_and_audited_once(env: Env) -> None:
    """Many callers at once take the gateway's threaded decision path; nothing is lost or doubled."""
    from concurrent.futures import ThreadPoolExecutor

    clients = [env.openai() for _ in range(8)]

    def calls(i: int) -> int:
        used = 0
        for j in range(4):
            if (i + j) % 3 == 0:
                stream = clients[i].chat.completions.create(
                    model=MODEL,
                    messages=_messages(),
                    max_tokens=8,
                    stream=True,
                    stream_options={"include_usage": True},
                )
                chunks = list(stream)
                usage = chunks[-1].usage
            else:
                usage = (
                    clients[i].chat.completions.create(model=MODEL, messages=_messages(), max_tokens=8).usage
                )
            assert usage is not None
            used += usage.prompt_tokens + usage.completion_tokens
        return used

    with ThreadPoolExecutor(max_workers=8) as pool:
        total = sum(pool.map(calls, range(8)))
    entries = env.entries()
    assert sum(e.kind == "allow" for e in entries) == 32
    assert sum(e.kind == "outcome" for e in entries) == 32
    assert env.spent() == total
    assert env.gate.verify().ok


def test_a_finished_calls_outcome_is_committed_once_the_gateway_is_idle(env: Env) -> None:
    """The outcome goes to the store after the answer, without waiting for the next decision to
    carry it (the gate's own background committer is stopped here, so only the gateway commits)."""
    env.gate._outcomes.close()
    client = env.openai()
    client.chat.completions.create(model=MODEL, messages=_messages(), max_tokens=8)
    stream = client.chat.completions.create(model=MODEL, messages=_messages(), max_tokens=8, stream=True)
    assert "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
    deadline = time.monotonic() + 10
    kinds: list[str] = []
    while time.monotonic() < deadline:
        # read without flushing; the grants' own entries left out
        kinds = [e.kind for e in env.gate.audit.entries() if not (e.resource or "").startswith("agent:")]
        if kinds.count("outcome") == 2:
            break
        time.sleep(0.02)
    assert kinds == ["allow", "outcome", "allow", "outcome"]


# --- the lean upstream pool, against a real TCP server on 127.0.0.1 -----------------------------


class _RawBackend:
    """A loopback HTTP server whose answer per path is written by hand: ``/cl`` (Content-Length,
    keep-alive), ``/chunked``, ``/sse`` (a chunked event stream), ``/eof`` (ends with the connection),
    ``/garbage``, ``/drop``."""

    def __init__(self) -> None:
        self.connections = 0
        self.server: asyncio.Server | None = None
        self.handlers: set[asyncio.Task[Any]] = set()

    async def __aenter__(self) -> str:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}"

    async def __aexit__(self, *exc: object) -> None:
        assert self.server is not None
        self.server.close()
        await self.server.wait_closed()
        # Each handler ends once its client has closed the connection (the pool is closed first).
        async with asyncio.timeout(5):
            await asyncio.gather(*self.handlers)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        task = asyncio.current_task()
        assert task is not None
        self.handlers.add(task)
        try:
            while True:
                try:
                    head = (await reader.readuntil(b"\r\n\r\n")).decode()
                except asyncio.IncompleteReadError:
                    return
                length = next(
                    int(line.split(":")[1])
                    for line in head.split("\r\n")
                    if line.lower().startswith("content-length")
                )
                body = await reader.readexactly(length)
                path = "/" + head.split(" ")[1].split("/")[1]  # the first segment decides
                if path == "/cl":
                    writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
                elif path == "/chunked":
                    half = len(body) // 2
                    writer.write(b"HTTP/1.1 201 Created\r\nTransfer-Encoding: chunked\r\n\r\n")
                    writer.write(
                        b"%x\r\n%s\r\n%x\r\n%s\r\n0\r\n\r\n"
                        % (half, body[:half], len(body) - half, body[half:])
                    )
                elif path == "/sse":  # two events, cut across chunks mid-line, \r\n and \n line ends
                    events = b"data: " + body + b"\r\n\r\ndata: [DONE]\n\n"
                    writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
                    for i in range(0, len(events), 5):
                        piece = events[i : i + 5]
                        writer.write(b"%x\r\n%s\r\n" % (len(piece), piece))
                        await writer.drain()
                        await asyncio.sleep(0)
                    writer.write(b"0\r\n\r\n")
                elif path == "/eof":
                    writer.write(b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n" + body)
                    await writer.drain()
                    return
                elif path == "/garbage":
                    writer.write(b"this is not http\r\n\r\n")
                    await writer.drain()
                    return
                else:  # /drop
                    return
                await writer.drain()
        except ConnectionError:
            return  # the client left mid-answer (as a caller that stops reading a stream does)
        finally:
            writer.close()


def test_upstream_pool_keeps_connections_alive_and_reads_every_framing() -> None:
    from agentgate.dispatch.gateway._upstream import UpstreamPool

    async def scenario() -> None:
        backend = _RawBackend()
        async with backend as url:
            pool = UpstreamPool()
            assert await pool.post(url + "/cl", b'{"a":1}') == (200, b'{"a":1}', None)
            assert await pool.post(url + "/cl", b'{"b":2}') == (200, b'{"b":2}', None)
            assert await pool.post(url + "/chunked", b'{"chunked":true}') == (201, b'{"chunked":true}', None)
            assert backend.connections == 1  # one kept-alive connection for all three
            async with pool.stream(url + "/sse", b'{"x":1}') as (status, _, lines, _):
                assert status == 200
                assert [line async for line in lines] == ['data: {"x":1}', "", "data: [DONE]", ""]
            assert backend.connections == 1  # the stream was read to its end: the connection stays
            async with pool.stream(url + "/sse", b"{}") as (status, _, lines, _):
                assert await anext(lines) == "data: {}"  # left early: that connection is closed
            assert await pool.post(url + "/cl", b"{}") == (200, b"{}", None)
            assert backend.connections == 2
            assert await pool.post(url + "/eof", b"{}") == (200, b"{}", None)
            assert await pool.post(url + "/cl", b"{}") == (200, b"{}", None)
            assert backend.connections == 3  # the closed one was not reused
            await pool.aclose()

    asyncio.run(scenario())


@pytest.mark.parametrize("path", ["/garbage", "/drop"])
def test_upstream_pool_raises_for_an_answer_it_cannot_read_and_the_client_reports_backend_failed(
    path: str,
) -> None:
    from agentgate.dispatch.backends import BackendClient
    from agentgate.dispatch.gateway._upstream import UpstreamError, UpstreamPool
    from agentgate.dispatch.inventory import Backend
    from agentgate.errors import BackendFailed

    async def scenario() -> None:
        async with _RawBackend() as url:
            pool = UpstreamPool()
            with pytest.raises(UpstreamError):
                await pool.post(url + path, b"{}")
            # Through the backend client, as the gateway calls it: a BackendFailed (failover), nothing else.
            async with _http.AsyncClient() as http:
                client = BackendClient(Backend(name="raw", url=url + path, models=(MODEL,)), http)
                client.transport = pool
                with pytest.raises(BackendFailed, match="raw"):
                    await client.chat(_body())
            await pool.aclose()

    asyncio.run(scenario())


def test_chat_calls_take_the_lean_pool_for_http_backends_only(
    tmp_path: Path, backends: tuple[SimServer, SimServer]
) -> None:
    keys = {name: SigningKey.generate() for name in NAMES}
    policy = parse_policy(_policy_text({n: k.did for n, k in keys.items()}), source="gateway.yaml")
    gate = GatewayGate(policy, SQLiteStore(tmp_path / "agentgate.db"))
    inventory = inventory_from_mapping(
        {
            "backends": [
                {"name": "plain", "url": backends[0].url, "engine": "vllm", "models": [MODEL]},
                {"name": "tls", "url": "https://127.0.0.1:9", "engine": "vllm", "models": [OTHER]},
            ]
        }
    )
    server = GatewayServer(Gateway(gate, inventory), port=0).start()
    try:
        clients = server.gateway.dispatcher.clients
        assert clients["plain"].transport is not None
        assert clients["tls"].transport is None  # https stays on aiohttp
    finally:
        server.stop()
        gate.close()


def test_upstream_pool_refused_connection_is_an_os_error() -> None:
    from agentgate.dispatch.gateway._upstream import UpstreamPool

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # closed again before the call: nothing listens there

    async def scenario() -> None:
        pool = UpstreamPool()
        with pytest.raises(OSError):
            await pool.post(f"http://127.0.0.1:{port}/v1/chat/completions", b"{}")
        await pool.aclose()

    asyncio.run(scenario())
