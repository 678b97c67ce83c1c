"""GatewayGate (agentgate/dispatch/gateway/_authority.py): the Gate as the OpenAI-compatible gateway
uses it. A caller's token and invocation are decided and audited like any call, a refusal never
quotes the caller's secret, and each dispatch's outcome says why it failed."""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import httpx
import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from test_audit_reconciliation import _read, _reconcile, traced_gateway
from test_gate import R29_POLICY
from test_gateway_hostile_backends import Env, _body, _in_service, _settled
from test_gateway_hostile_backends import env as env  # the fixtures
from test_gateway_hostile_backends import hostile as hostile

from agentgate.authority import GrantRepository, Invocation, revoke
from agentgate.capabilities import Call
from agentgate.dispatch.gateway import GatewayGate
from agentgate.dispatch.gateway._client import chat_call
from agentgate.gate import Approval
from agentgate.keys import SigningKey
from agentgate.policy import parse_policy
from agentgate.store import SQLiteStore


def test_a_failed_dispatch_is_audited_with_why_it_failed(env: Env) -> None:
    """R16: a gateway call whose backend answered a redirect (or garbage, or nothing) was
    audited ``error`` with the exception's class alone (``BackendFailed``); why it failed was only
    in the gateway's log. The outcome now keeps the (key-scrubbed) message beside the class."""
    _in_service(env)
    env.backend.mode = "redirect"
    count = len(env.outcomes())
    answer = env.post(_body())
    assert answer.status_code in (502, 503), answer.text
    reasons = _settled(env, count + 1)[-1].reasons
    assert any(r.startswith(("BackendFailed: ", "NoBackend: ")) and "302" in r for r in reasons), reasons
    env.backend.mode = "ok"


CHAT_POLICY = """
version: 1
trust_anchors:
  root: {{did: "{root}"}}
principals:
  agent: {{kind: agent, did: "{agent}", roles: [chat]}}
models:
  m: {{cost_per_mtok: {{input: 1, output: 1}}}}
roles:
  chat:
    kind: agent
    capabilities:
      - resource: model:m
    budget: {{limit: 1000000, unit: usd_micros}}
    ttl_s: 3600
"""


# What an OpenAI SDK pointed at the gateway sends as its Bearer token: the user's provider key.
PROVIDER_KEY = "sk-proj-Q7xW9kPzR4mN2vB8cT5yH1jL6fD3gS0aE"


def test_a_provider_key_sent_as_the_bearer_token_is_quoted_nowhere(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """``parse_chain`` refuses a token that is not ``ag1.…`` quoting its first 16 characters; the
    gateway keeps that text as the refusal's reason: in the audit log (signed, kept for good,
    exported), in the 401 answer and, were the 401 traced, in the span. The caller's secret
    (``sk-proj-Q7xW9kPz``: 8 secret characters of an OpenAI key) lands in the evidence."""
    caplog.set_level(logging.DEBUG)
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    keys = {n: SigningKey.generate() for n in ("root", "agent")}
    policy = parse_policy(CHAT_POLICY.format(**{n: k.did for n, k in keys.items()}), source="p.yaml")
    gate = GatewayGate(policy, SQLiteStore(tmp_path / "agentgate.db"), tracer=provider.get_tracer("r20"))
    try:
        decision = gate.authorize_invocation(PROVIDER_KEY, "x", Call.model("m"), (1, 1))
        assert decision.status == 401
        secret = PROVIDER_KEY[len("sk-proj-") :][:8]
        evidence = [
            e.model_dump_json() if hasattr(e, "model_dump_json") else repr(e) for e in gate.audit.entries()
        ]
        assert evidence, "the refusal is audited"
        seen = "\n".join(
            [*evidence, decision.message, caplog.text, *(s.to_json() for s in exporter.get_finished_spans())]
        )
        assert secret not in seen
    finally:
        gate.close()


class _RevokedMeanwhile(GatewayGate):
    """Another process (``agentgate grant revoke``) revokes the caller's grant while the gateway
    checks the approval: after the authority's decision, before the allow is recorded."""

    path: Path
    victim: str | None = None

    def _approval_complete(self, approval: Any, request: Mapping[str, Any], verdict: Any) -> Any:
        if self.victim is not None:
            with SQLiteStore(self.path) as other:
                repo = GrantRepository(other)
                revoke(repo, self.victim)
                repo.close()
        return super()._approval_complete(approval, request, verdict)


def test_a_gated_gateway_call_is_not_allowed_after_its_grant_was_revoked(tmp_path: Path) -> None:
    keys = {n: SigningKey.generate() for n in ("root", "agent", "lead")}
    policy = parse_policy(R29_POLICY.format(**{n: k.did for n, k in keys.items()}), source="p.yaml")
    _RevokedMeanwhile.path = tmp_path / "agentgate.db"
    gate = _RevokedMeanwhile(policy, SQLiteStore(_RevokedMeanwhile.path))
    try:
        agent = gate.issue(keys["root"], name="agent", key=keys["agent"], role="chat")
        body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 10}
        call = chat_call(body)

        def send(approval: str | None = None) -> Any:
            inv = Invocation.sign(agent.key, agent.chain, call)
            return gate.authorize_invocation(agent.chain.token, inv.encode(), call, (5, 10), approval)

        asked = send()
        assert asked.auth.needs_approval
        approval = json.dumps(Approval.sign(asked.auth.approval_payload(), keys["lead"]).to_dict())
        gate.victim = agent.chain.id
        answered = send(approval)
        gate.flush()
        kinds = [e.kind for e in gate.audit.entries()]
        # The revocation returned before the allow was written: the log shows an allow, over a
        # revoked grant, after the revocation took effect, and the model call runs.
        assert not answered.allowed, kinds
        assert (answered.status, answered.code) == (401, "revoked")
        assert kinds[-1] == "deny"
    finally:
        gate.close()


def test_the_gateway_does_not_export_the_reservation_as_the_usage_of_a_call_without_usage(
    tmp_path: Path,
) -> None:
    """A backend answer without ``usage`` is charged its reservation (docs/gateway.md), but the
    call's span then carries ``gen_ai.usage.input_tokens``/``output_tokens`` = the reservation
    (the request's max_tokens as output tokens): telemetry reports usage no backend reported, and
    the audit outcome says nothing of the fallback either."""
    from test_gateway import MODEL

    from agentgate.dispatch.gateway import invocation_headers

    with traced_gateway(tmp_path) as served:
        gate, keys = served.gate, served.keys
        try:
            agent = gate.issue(keys["root"], name="agent", key=keys["agent"], role="chat")
            body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 64}
            served.backend.mode = "no_usage"
            answer = httpx.post(
                f"{served.url}/chat/completions",
                json=body,
                headers=invocation_headers(agent.key, agent.chain, body),
                timeout=10,
            )
            assert answer.status_code == 200
            gate.flush()
            entries = _read(gate.store)
            _reconcile(entries, gate.store)
            (outcome,) = [e for e in entries if e["kind"] == "outcome"]
            (span,) = [s for s in served.exporter.get_finished_spans() if s.name == f"chat {MODEL}"]
        finally:
            gate.close()
    attributes = dict(span.attributes or {})
    assert attributes.get("gen_ai.usage.output_tokens") != 64, "max_tokens exported as the usage"
    assert any("charged as reserved" in r for r in outcome["reasons"]), outcome["reasons"]
