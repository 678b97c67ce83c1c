"""Review R85's regression review: ``micro_usd``, the alias of ``usd_micros`` a library-made token
may carry (``agentgate._names.METERED_UNITS``), is compared with a policy's ``usd_micros`` alike.
R85 made a delegated budget in another unit than its rule's count as over it, and compared the
names literally: a link of 5 ``micro_usd`` under a rule of 10 ``usd_micros`` was refused at every
call, and ``Gate.delegate`` from a parent holding ``micro_usd`` raised ``ScopeCreep``; a root
grant's ``micro_usd`` under a role's ``usd_micros`` budget was refused the same way."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from test_gate_r85_delegation_budget_unit import _policy

from agentgate.authority import Budget, delegate, issue
from agentgate.capabilities import Call
from agentgate.gate import AgentIdentity, Gate
from agentgate.keys import SigningKey
from agentgate.policy import parse_policy
from agentgate.store import SQLiteStore

KEYS = {n: SigningKey.generate() for n in ("root", "bot", "kid")}


@pytest.fixture(params=["", "budget: {limit: 100, unit: usd_micros}"], ids=["no-role-budget", "role-budget"])
def gate(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Gate]:
    made = Gate(
        parse_policy(_policy(KEYS, request.param, "usd_micros"), source="p.yaml"),
        SQLiteStore(tmp_path / "a.db"),
    )
    yield made
    made.close()


def test_micro_usd_is_usd_micros_to_the_policy(gate: Gate) -> None:
    call = Call.tool("lookup", {"id": "1"})
    root = issue(KEYS["root"], KEYS["bot"].public, ["tool:lookup"], ttl=600, budget=Budget(100, "micro_usd"))
    bot = AgentIdentity(name="bot", key=KEYS["bot"], chain=root)
    assert gate.authorize(bot, call).allowed
    kid = delegate(
        root, KEYS["bot"], KEYS["kid"].public, ["tool:lookup"], ttl=60, budget=Budget(5, "micro_usd")
    )
    allowed = gate.authorize(AgentIdentity(name="kid", key=KEYS["kid"], chain=kid), call)
    assert allowed.allowed, [f.message for f in allowed.findings]
    made = gate.delegate(
        bot,
        name="kid2",
        key=SigningKey.generate(),
        capabilities=["tool:lookup"],
        ttl=timedelta(minutes=1),
        budget=5,
    )
    assert made.chain.tip.budget == Budget(5, "micro_usd")
    over = delegate(
        root, KEYS["bot"], KEYS["kid"].public, ["tool:lookup"], ttl=60, budget=Budget(11, "micro_usd")
    )
    refused = gate.authorize(AgentIdentity(name="kid", key=KEYS["kid"], chain=over), call)
    assert not refused.allowed
    assert [f.code for f in refused.findings] == ["delegation_budget_above_policy"]
