"""Who may call through the gateway (agentgate/dispatch/gateway/_authority.py,
``GatewayGate.authorize_invocation``, and the app's reading of ``Authorization: Bearer``): the chain
comes only from a Bearer header and needs its invocation header (401 naming it); a revoked grant is
401 whatever it asks and also when revoked while its approval is checked; a chain valid beyond the
policy is 403 policy_denied. Each refusal is audited with nothing charged.

Real components: the gateway on loopback HTTP before simulated vLLM backends, a SQLite store."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest
from test_gateway import MODEL, OTHER, Env, _assert_refused, _body, _post

from agentgate.authority import Budget, issue
from agentgate.dispatch.gateway import APPROVAL_HEADER, INVOCATION_HEADER, GatewayGate, invocation_headers
from agentgate.gate import Approval
from agentgate.keys import SigningKey
from agentgate.sim import SimServer
from agentgate.store import SQLiteStore

pytest_plugins = ("test_gateway",)  # its ``backends`` and ``env`` fixtures


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
        budget=Budget(10_000, "usd_micros"),
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
    assert [e.kind for e in env.entries()[count:]] == ["revoke", "deny"]


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
    assert "link 0 of this chain was revoked" in error["message"]


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
