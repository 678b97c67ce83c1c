"""The gateway holds a root grant made outside the Gate to its holder's role's budget, as
``Gate.authorize`` does (review R58): it asks the Gate's ``PolicyChains`` once the authority has
verified the chain, so a grant carrying more than the role's ``budget`` (or another unit, or none)
is 403 ``root_budget_above_policy``, charged nothing, audited; and a forged one is 401
``bad_signature`` before anything the policy refuses, as the Gate now answers too.

Real components: the gateway on loopback HTTP before simulated vLLM backends, a SQLite store."""

from __future__ import annotations

import pytest
from test_gateway import MODEL, Env, _assert_refused, _body, _post

from agentgate.authority import Budget, Chain, issue, parse_chain
from agentgate.dispatch.gateway import invocation_headers

pytest_plugins = ("test_gateway",)  # its ``backends`` and ``env`` fixtures


def _root(env: Env, budget: Budget | None, ttl: int = 600) -> Chain:
    return issue(env.keys["root"], env.keys["agent"].public, [f"model:{MODEL}"], ttl=ttl, budget=budget)


@pytest.mark.parametrize(
    "budget",
    [Budget(5_000_000, "usd_micros"), Budget(1000, "tokens"), None],
    ids=["above_the_limit", "another_unit", "no_budget"],
)
def test_a_root_grant_issued_outside_the_gate_beyond_the_role_budget_is_403(
    env: Env, budget: Budget | None
) -> None:
    """Review R58: a root grant with more budget than the chat role's 1,000,000 usd_micros
    (issued without --policy) was served."""
    chain = _root(env, budget)
    body = _body()
    before, count = env.ledger(), len(env.entries())
    response = _post(env, body, invocation_headers(env.keys["agent"], chain, body))
    error = _assert_refused(env, response, 403, before, count)
    assert error["code"] == "root_budget_above_policy" and error["type"] == "permission_error"
    assert any("scope_creep:root_budget_above_policy" in r for r in env.entries()[-1].reasons)
    # Within the role's budget, the same grant made outside the Gate is served.
    within = _root(env, Budget(1_000_000, "usd_micros"))
    body = _body()
    assert _post(env, body, invocation_headers(env.keys["agent"], within, body)).status_code == 200


def test_a_forged_root_grant_beyond_the_policy_is_401_bad_signature(env: Env) -> None:
    """The order the Gate now keeps too: the chain's signatures before the policy's bounds."""
    long = _root(env, Budget(5_000_000, "usd_micros"), ttl=7200)
    other = _root(env, Budget(1_000_000, "usd_micros"))
    forged = parse_chain(long.token.rpartition(".")[0] + "." + other.token.rpartition(".")[2])
    body = _body()
    before, count = env.ledger(), len(env.entries())
    response = _post(env, body, invocation_headers(env.keys["agent"], forged, body))
    error = _assert_refused(env, response, 401, before, count)
    assert error["code"] == "bad_signature"
