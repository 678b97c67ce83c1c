"""A chain whose budget agentgate cannot meter is refused 403 ``budget_not_metered`` (review R93).

A root grant may carry a budget in a unit that is a valid name but that agentgate does not charge
(``Budget(100, "eur_cents")``, made with the library's ``issue()``). Given to a principal whose
role sets no budget (``root_budget_above_policy`` does not catch it), the authority allows the
call and the Gate refuses it, failing closed. Until R93 the gateway answered that refusal 403
``approval_not_usable`` ("the approval was already used, or has expired"), though the call carried
no approval: the code, and the metrics' label, told the caller something false. The refusal says
so now (``Authorization.unmetered``), with a code of its own."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from test_gateway import MODEL, NAMES, OTHER, _body, _policy_text
from test_gateway_r83_error_codes import _errors_table

from agentgate.authority import Budget, issue
from agentgate.dispatch.gateway import INVOCATION_HEADER, GatewayDecision, GatewayGate, invocation_headers
from agentgate.dispatch.gateway._client import chat_call
from agentgate.keys import SigningKey
from agentgate.policy import parse_policy
from agentgate.store import SQLiteStore


@pytest.fixture
def keys() -> dict[str, SigningKey]:
    return {name: SigningKey.generate() for name in NAMES}


@pytest.fixture
def gate(tmp_path: Path, keys: dict[str, SigningKey]) -> Iterator[GatewayGate]:
    policy = parse_policy(_policy_text({n: k.did for n, k in keys.items()}), source="gateway.yaml")
    gate = GatewayGate(policy, SQLiteStore(tmp_path / "agentgate.db"))
    yield gate
    gate.close()


def _decide(
    gate: GatewayGate, keys: dict[str, SigningKey], who: str, model: str, budget: Budget | None
) -> GatewayDecision:
    chain = issue(keys["root"], keys[who].public, [f"model:{model}"], ttl=600, budget=budget)
    body = {**_body(), "model": model}
    headers = invocation_headers(keys[who], chain, body)
    return gate.authorize_invocation(
        headers["Authorization"].removeprefix("Bearer "), headers[INVOCATION_HEADER], chat_call(body), (10, 8)
    )


def test_a_budget_that_cannot_be_metered_is_refused_as_such_not_as_an_unusable_approval(
    gate: GatewayGate, keys: dict[str, SigningKey]
) -> None:
    refused = _decide(gate, keys, "lead", OTHER, Budget(100, "eur_cents"))
    assert (refused.status, refused.code) == (403, "budget_not_metered"), refused.message
    assert "cannot be metered" in refused.message
    assert refused.auth.unmetered and not refused.auth.allowed and refused.auth.reservations == ()
    assert refused.auth.audit_index is not None  # the refusal is audited


def test_a_metered_budget_and_a_budget_over_the_policy_keep_their_answers(
    gate: GatewayGate, keys: dict[str, SigningKey]
) -> None:
    allowed = _decide(gate, keys, "lead", OTHER, None)
    assert allowed.status == 200 and not allowed.auth.unmetered
    over = _decide(gate, keys, "agent", MODEL, Budget(100, "eur_cents"))
    assert (over.status, over.code) == (403, "root_budget_above_policy")


def test_the_errors_table_lists_budget_not_metered() -> None:
    assert "`budget_not_metered`" in _errors_table()
