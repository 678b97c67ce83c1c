"""GatewayGate (agentgate/dispatch/gateway/_authority.py): the Gate as the OpenAI-compatible gateway
uses it, and who may call through it (``GatewayGate.authorize_invocation`` and the app's reading of
``Authorization: Bearer``). The chain comes only from a Bearer header and needs its invocation
header (401 naming it); a revoked grant is 401 whatever it asks and also when revoked while its
approval is checked; a chain valid beyond the policy is 403 policy_denied. Each refusal is audited
with nothing charged and never quotes the caller's secret; each dispatch's outcome says why it
failed, and a call's span never reports its reservation as its usage.

Real components: the gateway on loopback HTTP before simulated vLLM backends, a SQLite store."""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Iterator, Mapping
from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from typing import Any

import _http
import httpx
import pytest
import test_gateway_hostile_backends
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Tracer
from test_audit_reconciliation import _read, _reconcile, traced_gateway
from test_gate import R29_POLICY
from test_gateway import MODEL, OTHER, Env, _assert_refused, _body, _post
from test_gateway_hostile_backends import Env as HostileEnv
from test_gateway_hostile_backends import _body as _hostile_body
from test_gateway_hostile_backends import _in_service, _settled
from test_gateway_hostile_backends import hostile as hostile  # the fixture ``hostile_env`` uses

from agentgate.authority import Budget, GrantRepository, Invocation, issue, revoke
from agentgate.capabilities import Call
from agentgate.dispatch.gateway import APPROVAL_HEADER, INVOCATION_HEADER, GatewayGate, invocation_headers
from agentgate.dispatch.gateway._client import chat_call
from agentgate.gate import Approval, Authorization
from agentgate.keys import SigningKey
from agentgate.policy import parse_policy
from agentgate.sim import SimServer
from agentgate.store import SQLiteStore

pytest_plugins = ("test_gateway",)  # its ``backends`` and ``env`` fixtures

# test_gateway_hostile_backends's ``env`` fixture (a gateway before one misbehaving backend), under
# another name: this module's ``env`` is test_gateway's.
hostile_env = test_gateway_hostile_backends.env


def test_a_chain_issued_elsewhere_beyond_the_policy_is_403_policy_denied(env: Env) -> None:
    # w01: the gateway's common path answered a valid authority with an allow even when the
    # policy refuses the call. A chain signed by the trust anchor outside the gateway (as
    # `agentgate grant issue` makes it) may cover more than the holder's role: `poor` (role
    # thrifty: MODEL only) holds a chain that covers OTHER. The authority allows; the policy does
    # not; the call is 403 policy_denied, charged nothing, audited as a deny.
    chain = issue(
        env.keys["root"],
        env.keys["poor"].public,
        [f"model:{OTHER}", f"model:{MODEL}"],
        ttl=600,
        budget=Budget(100, "usd_micros"),  # thrifty's: since review R58 a root grant carries no more
    )
    body = {**_body(), "model": OTHER}
    before, count = env.ledger(), len(env.entries())
    response = _post(env, body, invocation_headers(env.keys["poor"], chain, body))
    error = _assert_refused(env, response, 403, before, count)
    assert error["code"] == "policy_denied" and error["type"] == "permission_error"
    # The same chain, for what the policy allows its holder, goes through.
    body = _body()
    assert _post(env, body, invocation_headers(env.keys["poor"], chain, body)).status_code == 200


def test_a_grant_revoked_by_another_process_while_an_approved_call_is_decided_is_401(
    env: Env, backends: tuple[SimServer, SimServer], monkeypatch: pytest.MonkeyPatch
) -> None:
    # w03: an approved call re-reads revocation in the transaction that records its allow. The
    # authority's own read comes first, outside it; another process (a second gate on the same
    # store file) revokes the grant between the two reads, while the approval is checked. The
    # call must be refused 401 revoked, charged nothing, never sent to the backend.
    body = {
        "model": OTHER,
        "messages": [{"role": "user", "content": "Say something short."}],
        "max_tokens": 200,
    }

    def send(extra: dict[str, str] | None = None) -> Any:
        headers = {**invocation_headers(env.agent.key, env.agent.chain, body), **(extra or {})}
        return _post(env, body, headers)

    payload = send().json()
    assert payload["error"]["code"] == "approval_required"
    approval = json.dumps(Approval.sign(payload, env.keys["lead"]).to_dict())
    store = env.gate.store
    assert isinstance(store, SQLiteStore)
    other = GatewayGate(env.gate.policy, SQLiteStore(store.path))
    complete = env.gate._approval_complete

    def revoked_meanwhile(*args: Any, **kwargs: Any) -> Any:
        other.revoke(env.agent, reason="leaked while its approval was checked")
        return complete(*args, **kwargs)

    monkeypatch.setattr(env.gate, "_approval_complete", revoked_meanwhile)
    served = backends[1].served
    before, count = env.ledger(), len(env.entries())
    try:
        answer = send({APPROVAL_HEADER: approval})
    finally:
        other.close()
    assert answer.status_code == 401, answer.text
    assert answer.json()["error"]["code"] == "revoked"
    assert "waited for its approval" in answer.json()["error"]["message"]
    assert env.ledger() == before and backends[1].served == served
    # The revocation closes the request it made void (a deny of its own, review R55), then the
    # call is refused
    revoke, closed, refused = env.entries()[count:]
    assert (revoke.kind, closed.kind, refused.kind) == ("revoke", "deny", "deny")
    assert "is void: grant" in closed.reasons[0] and closed.ref is not None


@pytest.mark.parametrize("invocation", [None, ""])
def test_a_chain_without_an_invocation_is_401_missing_invocation_naming_the_header(
    env: Env, invocation: str | None
) -> None:
    # w04: a bearer chain with no invocation (absent or empty) must say which
    # header is missing, not that an authority is unreadable.
    headers = {"Authorization": f"Bearer {env.agent.chain.token}"}
    if invocation is not None:
        headers[INVOCATION_HEADER] = invocation
    before, count = env.ledger(), len(env.entries())
    error = _assert_refused(env, _post(env, _body(), headers), 401, before, count)
    assert error["code"] == "missing_invocation" and INVOCATION_HEADER in error["message"]


def test_a_revoked_grant_asking_beyond_its_coverage_is_401_revoked_not_403(env: Env) -> None:
    # w06: the engine checks coverage before revocation, so for a call its grant does not cover
    # the gateway reads revocation itself: a revoked grant is 401 revoked whatever it asks for (a
    # dead authority learns nothing about what it would cover).
    narrow = env.gate.delegate(
        env.agent,
        name="helper",
        key=SigningKey.generate(),
        capabilities=[f"model:{MODEL}?max_tokens<=256"],
        ttl=timedelta(minutes=5),
        budget=1000,
    )
    env.gate.revoke(env.agent, reason="leaked")  # the parent: every grant below it is dead
    body = {**_body(), "model": OTHER}
    before, count = env.ledger(), len(env.entries())
    response = _post(env, body, invocation_headers(narrow.key, narrow.chain, body))
    error = _assert_refused(env, response, 401, before, count)
    assert error["code"] == "revoked" and error["type"] == "authentication_error"
    assert f"link 0 ({env.agent.grant_id[:16]}...) of this chain was revoked" in error["message"]


@pytest.mark.parametrize("scheme", ["Token", "Basic", ""])
def test_a_chain_under_another_scheme_than_bearer_is_refused(env: Env, scheme: str) -> None:
    """Kills: ``_bearer`` taking the token of any ``Authorization`` scheme (the ``bearer`` test
    dropped).

    Rule: the chain is read only from ``Authorization: Bearer <chain>`` (any case of the
    scheme); under any other scheme (or none) the call has no chain: 401, nothing charged, the
    refusal audited; the same headers with ``Bearer`` are allowed."""
    body = _body()
    headers = invocation_headers(env.agent.key, env.agent.chain, body)
    token = headers["Authorization"].removeprefix("Bearer ")
    headers["Authorization"] = f"{scheme} {token}".lstrip()
    before, count = env.ledger(), len(env.entries())
    error = _assert_refused(env, _post(env, body, headers), 401, before, count)
    assert error["type"] == "authentication_error"
    fresh = invocation_headers(env.agent.key, env.agent.chain, body)
    fresh["Authorization"] = "bEaReR " + token
    assert INVOCATION_HEADER in fresh
    assert _post(env, body, fresh).status_code == 200


def test_a_failed_dispatch_is_audited_with_why_it_failed(hostile_env: HostileEnv) -> None:
    """R16: a gateway call whose backend answered a redirect (or garbage, or nothing) was
    audited ``error`` with the exception's class alone (``BackendFailed``); why it failed was only
    in the gateway's log. The outcome now keeps the (key-scrubbed) message beside the class."""
    _in_service(hostile_env)
    hostile_env.backend.mode = "redirect"
    count = len(hostile_env.outcomes())
    answer = hostile_env.post(_hostile_body())
    assert answer.status_code in (502, 503), answer.text
    reasons = _settled(hostile_env, count + 1)[-1].reasons
    assert any(r.startswith(("BackendFailed: ", "NoBackend: ")) and "302" in r for r in reasons), reasons
    hostile_env.backend.mode = "ok"


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


@contextlib.contextmanager
def chat_allowed(path: Path, tracer: Tracer | None = None) -> Iterator[tuple[GatewayGate, Authorization]]:
    """A ``GatewayGate`` of ``CHAT_POLICY`` on a SQLite file at ``path`` and its allow of an
    agent's call of model ``m`` (signed invocation, as the gateway receives it); the gate is
    closed at the end."""
    keys = {n: SigningKey.generate() for n in ("root", "agent")}
    policy = parse_policy(CHAT_POLICY.format(**{n: k.did for n, k in keys.items()}), source="p.yaml")
    gate = GatewayGate(policy, SQLiteStore(path), tracer=tracer)
    try:
        agent = gate.issue(keys["root"], name="agent", key=keys["agent"], role="chat")
        call = Call.model("m")
        invocation = Invocation.sign(agent.key, agent.chain, call)
        decided = gate.authorize_invocation(agent.chain.token, invocation.encode(), call, (1, 1))
        assert decided.status == 200
        yield gate, decided.auth
    finally:
        gate.close()


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

    def _approval_complete(
        self, approval: Any, request: Mapping[str, Any], verdict: Any, *args: Any, **kwargs: Any
    ) -> Any:
        if self.victim is not None:
            with SQLiteStore(self.path) as other:
                repo = GrantRepository(other)
                revoke(repo, self.victim)
                repo.close()
        return super()._approval_complete(approval, request, verdict, *args, **kwargs)


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
            answer = _http.post(
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


def test_an_approval_header_that_does_not_count_is_audited_with_why(env: Env) -> None:
    # Review R52: a signed approval that did not count (the caller's own, a key the policy does
    # not name, a bad signature) on a call whose request was open was answered 403
    # approval_required and written nowhere: a caller trying to approve itself left no trace.
    body = {"model": OTHER, "messages": [{"role": "user", "content": "Say a lot."}], "max_tokens": 200}

    def send(approval: Approval | None = None) -> httpx.Response:
        headers = invocation_headers(env.agent.key, env.agent.chain, body)
        if approval is not None:
            headers[APPROVAL_HEADER] = json.dumps(approval.to_dict())
        return _post(env, body, headers)

    payload = send().json()
    asked = env.entries()[-1]
    assert asked.kind == "approval_required"
    request = payload["request"]
    for approval in (
        Approval.sign(payload, env.keys["agent"]),
        Approval.sign(payload, env.keys["outsider"]),
        Approval(request["id"], request["call_hash"], env.keys["lead"].did, bytes(64)),
    ):
        count = len(env.entries())
        answer = send(approval)
        assert answer.status_code == 403 and answer.json()["error"]["code"] == "approval_required"
        (entry,) = env.entries()[count:]
        assert entry.kind == "approval_required" and entry.ref == asked.index
        assert any(r.startswith("approval not counted: ") for r in entry.reasons), entry.reasons
    assert send(Approval.sign(payload, env.keys["lead"])).status_code == 200


def _claiming(
    env: Env, body: dict[str, Any], signer: SigningKey, claimed: str, *, garbage: bool = False
) -> dict[str, str]:
    """Headers of an invocation for ``env.agent``'s chain that ``signer`` signed (or no key, with
    ``garbage``) and that claims ``claimed`` signed it."""
    invocation = replace(Invocation.sign(signer, env.agent.chain, chat_call(body)), issuer=claimed)
    if garbage:
        invocation = replace(invocation, signature=bytes(range(64)))
    return {"Authorization": f"Bearer {env.agent.chain.token}", INVOCATION_HEADER: invocation.encode()}


@pytest.mark.parametrize(
    ("how", "code"),
    [
        ("another_key_claims_the_holder", "bad_invocation_signature"),
        ("garbage_signature_claims_the_holder", "bad_invocation_signature"),
        ("another_key_claims_a_third_party", "wrong_holder"),
        ("gated_call_another_key_claims_the_holder", "bad_invocation_signature"),
    ],
)
def test_a_forged_invocation_is_recorded_as_nobodys_not_the_claimed_signers(
    env: Env, how: str, code: str
) -> None:
    """Review R56: a forged invocation's denial was recorded with its claimed signer (or the chain's holder) as principal."""
    body = _body() if not how.startswith("gated") else {**_body(max_tokens=200), "model": OTHER}
    outsider, agent, poor = env.keys["outsider"], env.agent.did, env.poor.did
    claimed = poor if how == "another_key_claims_a_third_party" else agent
    headers = _claiming(env, body, outsider, claimed, garbage=how.startswith("garbage"))
    before, count = env.ledger(), len(env.entries())
    assert _assert_refused(env, _post(env, body, headers), 401, before, count)["code"] == code
    deny = env.entries()[-1]
    assert deny.principal == "unknown" and deny.chain_hash == env.agent.grant_id, deny
    assert env.gate.verify().ok
    # Who did sign is named: the outsider with the agent's copied chain, and the agent itself.
    signed = invocation_headers(outsider, env.agent.chain, body)
    assert _post(env, body, signed).json()["error"]["code"] == "wrong_holder"
    assert env.entries()[-1].principal == outsider.did
    assert _post(env, _body(), invocation_headers(env.agent.key, env.agent.chain, _body())).status_code == 200
    assert [e.principal for e in env.entries()[-2:]] == [agent, agent]  # its allow and its outcome


def test_the_span_of_a_forged_invocation_names_no_agent_and_a_copied_chain_its_signer(
    tmp_path: Path,
) -> None:
    """Review R56: the span of a forged invocation's refusal named the chain holder's agent (gen_ai.agent.name)."""
    with traced_gateway(tmp_path) as served:
        gate, keys = served.gate, served.keys
        try:
            agent = gate.issue(keys["root"], name="agent", key=keys["agent"], role="chat")
            gate.issue(keys["root"], name="poor", key=keys["poor"], role="thrifty")
            gated = {"model": OTHER, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 200}

            def agent_named(body: dict[str, Any], invocation: Invocation, garbage: bool = False) -> Any:
                """The status and the ``gen_ai.agent.name`` of the span of a request for ``body``
                with the agent's chain and ``invocation`` (its signature zeroed with ``garbage``)."""
                if garbage:
                    invocation = replace(invocation, signature=bytes(64))
                headers = {
                    "Authorization": f"Bearer {agent.chain.token}",
                    INVOCATION_HEADER: invocation.encode(),
                }
                served.exporter.clear()
                answer = _http.post(f"{served.url}/chat/completions", json=body, headers=headers, timeout=10)
                gate.flush()  # a call's span ends once its outcome is written (review R69)
                (span,) = served.exporter.get_finished_spans()
                return answer.status_code, (span.attributes or {}).get("gen_ai.agent.name")

            def signed(key: SigningKey, body: dict[str, Any], claimed: str | None = None) -> Invocation:
                invocation = Invocation.sign(key, agent.chain, chat_call(body))
                return invocation if claimed is None else replace(invocation, issuer=claimed)

            body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 8}
            # Signed by another key, or by none, claiming the agent or another principal: nobody.
            assert agent_named(body, signed(keys["outsider"], body, agent.did)) == (401, None)
            assert agent_named(body, signed(keys["outsider"], body, agent.did), garbage=True) == (401, None)
            assert agent_named(body, signed(keys["outsider"], body, keys["poor"].did)) == (401, None)
            assert agent_named(gated, signed(keys["outsider"], gated, agent.did)) == (401, None)
            # A copied chain, signed by the caller's own key: that caller, by its policy name if any.
            assert agent_named(body, signed(keys["poor"], body)) == (401, "poor")
            assert agent_named(body, signed(keys["outsider"], body)) == (401, "caller")
            # The agent itself, refused by its grant and allowed.
            over = {**body, "max_tokens": 600}
            assert agent_named(over, signed(keys["agent"], over)) == (403, "agent")
            assert agent_named(body, signed(keys["agent"], body)) == (200, "agent")
        finally:
            gate.close()
