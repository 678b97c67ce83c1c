"""The Gate answers the authority's refusal first, as the gateway does (review R59): for the same
chain and call, the first finding of ``Gate.authorize`` is the code the gateway answers with. The
chains here are refused by the authority (expired, revoked, a call their tip does not cover) and
by the policy too (no rule of the holder's role names the model, or a root grant that lives
longer than its role's ``ttl_s``); until then the Gate answered the policy's reason, where the
gateway answers 401 ``grant_expired``, 401 ``revoked`` or 403 ``call_not_covered``.

Real components: the gateway on loopback HTTP before simulated vLLM backends, a SQLite store."""

from __future__ import annotations

import time
from typing import Any

import pytest
from test_gateway import MODEL, OTHER, Env, _assert_refused, _body, _post

from agentgate.authority import Budget, Chain, issue
from agentgate.capabilities import Call
from agentgate.dispatch.gateway import invocation_headers
from agentgate.gate import AgentIdentity

pytest_plugins = ("test_gateway",)  # its ``backends`` and ``env`` fixtures


def _chain(env: Env, holder: str, caps: list[str], **terms: Any) -> Chain:
    budget = Budget(100, "usd_micros") if holder == "poor" else Budget(1_000_000, "usd_micros")
    return issue(env.keys["root"], env.keys[holder].public, caps, budget=budget, **terms)


CASES = {
    # poor's role (thrifty) has no rule for OTHER: the policy's verdict denies every one of these.
    "expired": ("poor", ["model:*"], {"ttl": 600, "now": time.time() - 7200}, False, 401, "grant_expired"),
    "revoked": ("poor", ["model:*"], {"ttl": 600}, True, 401, "revoked"),
    "not_covered": ("poor", [f"model:{MODEL}"], {"ttl": 600}, False, 403, "call_not_covered"),
    "not_covered_revoked": ("poor", [f"model:{MODEL}"], {"ttl": 600}, True, 401, "revoked"),
    # agent's role (chat) lets a root grant live 3600 s: these are outside the policy.
    "outside_policy_expired": (
        "agent",
        ["model:*"],
        {"ttl": 7200, "now": time.time() - 9000},
        False,
        401,
        "grant_expired",
    ),
    "outside_policy_not_covered": (
        "agent",
        [f"model:{MODEL}"],
        {"ttl": 7200},
        False,
        403,
        "call_not_covered",
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_the_gates_first_refusal_is_the_gateways_for_the_same_chain_and_call(env: Env, case: str) -> None:
    """Review R59: Gate.authorize gave the policy's reason first where the gateway answers the authority's refusal."""
    holder, caps, terms, revoked, status, code = CASES[case]
    chain = _chain(env, holder, caps, **terms)
    if revoked:
        env.gate.revoke(chain)
    body = {**_body(), "model": OTHER}
    before, count = env.ledger(), len(env.entries())
    response = _post(env, body, invocation_headers(env.keys[holder], chain, body))
    assert _assert_refused(env, response, status, before, count)["code"] == code
    identity = AgentIdentity(name=holder, key=env.keys[holder], chain=chain)
    auth = env.gate.authorize(identity, Call.model(OTHER, {"max_tokens": 8}), tokens=(10, 8))
    assert auth.verdict == "deny" and auth.audit_index is not None
    assert [f.code for f in auth.findings][:1] == [code]


@pytest.mark.parametrize("revoked", [False, True], ids=["expired", "revoked"])
def test_no_approval_is_asked_for_a_call_the_authority_refuses(env: Env, revoked: bool) -> None:
    """Review R59 (checked, already so): a call behind an approval gate (long answers of OTHER)
    on a chain the authority refuses opens no approval request, at the gateway or the Gate: the
    engine asks the approval hook only once the chain, its times and its coverage hold, and reads
    revocation in the transaction that would record the request."""
    terms: dict[str, Any] = {"ttl": 600} if revoked else {"ttl": 600, "now": time.time() - 7200}
    chain = _chain(env, "agent", ["model:*"], **terms)
    if revoked:
        env.gate.revoke(chain)
    code = "revoked" if revoked else "grant_expired"
    body = {**_body(), "model": OTHER, "max_tokens": 200}
    before, count = env.ledger(), len(env.entries())
    response = _post(env, body, invocation_headers(env.keys["agent"], chain, body))
    assert _assert_refused(env, response, 401, before, count)["code"] == code
    identity = AgentIdentity(name="agent", key=env.keys["agent"], chain=chain)
    auth = env.gate.authorize(identity, Call.model(OTHER, {"max_tokens": 200}), tokens=(10, 200))
    assert auth.verdict == "deny" and [f.code for f in auth.findings] == [code]
    assert all(e.kind != "approval_required" for e in env.entries())
    assert env.gate.approvals.open_records() == []
