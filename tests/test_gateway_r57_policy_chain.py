"""The gateway holds a chain made outside the Gate to the policy as ``Gate.authorize`` does (review
R57): it decides through the authority engine and the policy index, not through
``Gate.authorize``, so it asks the same check (``GatewayGate._policy_chain_refusal``) once the
authority has verified the chain: 403 with the finding's code, charged nothing, audited.

Real components: the gateway on loopback HTTP before simulated vLLM backends, a SQLite store."""

from __future__ import annotations

from test_gateway import MODEL, OTHER, Env, _assert_refused, _body, _post

from agentgate.authority import Budget, Chain, delegate, issue
from agentgate.dispatch.gateway import invocation_headers
from agentgate.keys import SigningKey

pytest_plugins = ("test_gateway",)  # its ``backends`` and ``env`` fixtures


def _refused(
    env: Env, holder: SigningKey, chain: Chain, body: dict[str, object], kind: str, code: str
) -> None:
    before, count = env.ledger(), len(env.entries())
    response = _post(env, body, invocation_headers(holder, chain, body))
    error = _assert_refused(env, response, 403, before, count)
    assert error["code"] == code and error["type"] == "permission_error"
    assert any(f"{kind}:{code}" in reason for reason in env.entries()[-1].reasons)


def test_a_delegation_made_outside_the_gate_beyond_the_rule_is_403_with_its_code(env: Env) -> None:
    """Review R57: a delegation signed outside Gate.delegate beyond the chat role's rule
    (max_ttl_s 600) was served."""
    helper = SigningKey.generate()
    chain = delegate(
        env.agent.chain, env.keys["agent"], helper.public, [f"model:{MODEL}?max_tokens<=512"], ttl=3000
    )
    _refused(env, helper, chain, _body(), "non_revocable_grant", "delegation_ttl_above_policy")
    # Within the rule, the same delegation made outside the Gate is served.
    within = delegate(
        env.agent.chain, env.keys["agent"], helper.public, [f"model:{MODEL}?max_tokens<=512"], ttl=600
    )
    body = _body()
    assert _post(env, body, invocation_headers(helper, within, body)).status_code == 200


def test_a_root_grant_issued_outside_the_gate_beyond_the_role_ttl_is_403(env: Env) -> None:
    """Review R57: a root grant beyond the role's ttl_s (issued without --policy) was served."""
    chain = issue(
        env.keys["root"],
        env.keys["agent"].public,
        [f"model:{MODEL}"],
        ttl=7200,
        budget=Budget(10_000, "usd_micros"),
    )
    _refused(env, env.keys["agent"], chain, _body(), "non_revocable_grant", "root_ttl_above_policy")


def test_a_call_behind_an_approval_gate_is_refused_before_anyone_is_asked(env: Env) -> None:
    """Review R57: such a chain behind an approval gate opened a request for a person to approve."""
    helper = SigningKey.generate()
    chain = delegate(env.agent.chain, env.keys["agent"], helper.public, [f"model:{OTHER}"], ttl=3000)
    body = {**_body(max_tokens=200), "model": OTHER}  # above the long-answers gate's 100
    _refused(env, helper, chain, body, "non_revocable_grant", "delegation_ttl_above_policy")
