"""Budgets as a finance-minded operator reads them: what the ledger charges and what
the audit log says, for calls the Gate allows.

A real ``Gate`` on a real SQLite store; every amount below is worked out from
docs/policy-reference.md (``cost_per_mtok``, rounded up to the micro-dollar) and
docs/audit-format.md (``budget_delta``, grant entries).
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest

from agentgate.authority import Budget, issue
from agentgate.capabilities import Call, Capability
from agentgate.gate import AgentIdentity, Gate
from agentgate.keys import SigningKey
from agentgate.policy import parse_policy
from agentgate.store import SQLiteStore

POLICY = """
version: 1
trust_anchors: {{root: {{did: "{root}"}}}}
tenants: {{team: {{}}}}
principals:
  bot: {{kind: agent, did: "{bot}", tenant: team, roles: [worker]}}
models:
  big: {{cost_per_mtok: {{input: 3000000, output: 15000000}}}}   # $3 / $15 per million tokens
roles:
  worker:
    kind: agent
    capabilities:
      - resource: model:big
    budget: {{limit: 100000, unit: usd_micros}}
    ttl_s: 600
    delegation:
      max_depth: 1
      capabilities:
        - resource: model:big
"""


class Books:
    def __init__(self, path: Path) -> None:
        self.keys = {n: SigningKey.generate() for n in ("root", "bot", "kid")}
        text = POLICY.format(**{n: k.did for n, k in self.keys.items()})
        self.gate = Gate(parse_policy(text, source="budgets.yaml"), SQLiteStore(path))
        self.bot = self.gate.issue(self.keys["root"], name="bot", key=self.keys["bot"], role="worker")


@pytest.fixture
def books(tmp_path: Path) -> Iterator[Books]:
    made = Books(tmp_path / "agentgate.db")
    yield made
    made.gate.close()


def test_a_budget_in_a_unit_the_gate_does_not_meter_never_lets_calls_through(books: Books) -> None:
    """A root grant made with ``agentgate grant issue --budget 1:usd_micro`` (a typo the token
    format accepts: any ``[a-z][a-z0-9_]{0,31}``) limits its holder to 1 minor unit. The Gate
    meters only ``usd_micros``, ``tokens`` and ``calls``: a call under such a budget must be
    refused (fail closed), not allowed with nothing reserved."""
    chain = issue(
        books.keys["root"],
        books.keys["bot"].public,
        [Capability.parse("model:big")],
        ttl=600,
        budget=Budget(1, "usd_micro"),
    )
    bot = AgentIdentity("bot", books.keys["bot"], chain, "team", None)
    # 100,000 output tokens at $15 per million: 1,500,000 micro-dollars, far above a budget of 1.
    auth = books.gate.authorize(bot, Call.model("big"), tokens=(0, 100_000))
    assert not auth.allowed, auth.reservations


def test_a_model_call_without_an_estimate_is_refused_or_charged_what_it_used(books: Books) -> None:
    """``Gate.authorize(identity, Call.model(...))`` without ``tokens`` is allowed with nothing
    reserved in ``usd_micros``; the call then reports 1,000,000 output tokens ($15), and the
    outcome commits nothing: three such calls spend $45 on a $0.10 budget and the ledger and
    the audit log both say 0. Either the call is refused, or what it reports is charged (at
    most the budget: 100,000, with the overrun in the outcome's reasons)."""
    gate, bot = books.gate, books.bot
    auth = gate.authorize(bot, Call.model("big", {"max_tokens": 1_000_000}))
    if auth.allowed:
        gate.run(auth, lambda: "text", spent=lambda _result: (0, 1_000_000))
    spent, limit = gate.budget_usage(bot)[bot.grant_id]
    assert not auth.allowed or spent == limit == 100_000


def test_the_audit_entry_of_a_delegation_names_the_budget_the_child_carries(books: Books) -> None:
    """docs/audit-format.md: "The reasons of a grant entry name the grant id, ..., the lifetime in
    seconds and the budget". A delegation without ``budget=`` hands the child the parent's whole
    budget (100,000 usd_micros, in the signed grant); its ``allow`` entry must say so."""
    gate = books.gate
    kid = gate.delegate(
        books.bot, name="kid", key=books.keys["kid"], capabilities=["model:big"], ttl=timedelta(minutes=5)
    )
    assert kid.chain.tip.budget == Budget(100_000, "usd_micros")
    assert kid.audit_index is not None
    (reason,) = gate.audit.entry(kid.audit_index).reasons
    assert "budget 100000 usd_micros" in reason, reason


QUOTA_POLICY = (
    POLICY
    + """
quotas:
  bot-spend:
    principal: bot
    window_s: 315360000   # ten years: one window from 2019-12-20 to 2029-12-17
    limit: 50000
    unit: usd_micros
"""
)


def test_a_sub_agents_calls_count_against_the_quota_of_the_principal_it_was_delegated_from(
    tmp_path: Path,
) -> None:
    """docs/policy-reference.md (quotas): a sub-agent the policy does not name is counted as the
    principal its chain was first issued to, so a delegation never escapes that principal's quota.
    30,000 (2,000 output tokens at $15 per million) by the sub-agent, then 20,010 by the
    principal itself: 50,010 is more than the 50,000 the window holds; 19,995 still fits."""
    keys = {n: SigningKey.generate() for n in ("root", "bot", "kid")}
    text = QUOTA_POLICY.format(**{n: k.did for n, k in keys.items()})
    gate = Gate(parse_policy(text, source="quota.yaml"), SQLiteStore(tmp_path / "agentgate.db"))
    try:
        bot = gate.issue(keys["root"], name="bot", key=keys["bot"], role="worker")
        kid = gate.delegate(
            bot, name="kid", key=keys["kid"], capabilities=["model:big"], ttl=timedelta(minutes=5)
        )
        assert gate.authorize(kid, Call.model("big"), tokens=(0, 2000)).allowed
        refused = gate.authorize(bot, Call.model("big"), tokens=(0, 1334))
        assert refused.quota_exceeded == "bot-spend"
        assert refused.reasons == (
            "quota bot-spend reached: 50000 usd_micros per 315360000 s for principal:bot",
        )
        assert gate.authorize(bot, Call.model("big"), tokens=(0, 1333)).allowed
    finally:
        gate.close()
