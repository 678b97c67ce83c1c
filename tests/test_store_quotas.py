"""Quota counters (agentgate/store/quotas.py): policy quotas are counted per fixed window in the
decision's transaction, on both stores, and concurrent deciders never push a window past its limit;
a call past a limit is refused, with the refusal recorded; an amount beyond any window (or column)
is a refusal, not an overflow; a call that adds nothing to a quota's unit is not refused by its
overfull window; the previous window survives the next one's start (a lagging clock cannot reopen
it)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentgate.capabilities import Call
from agentgate.gate import AgentIdentity, Gate
from agentgate.keys import SigningKey
from agentgate.policy import QuotaRef, parse_policy
from agentgate.store import SQLiteStore, Store, open_store
from agentgate.store.quotas import QuotaCounter, window_start

POLICY = """
version: 1
trust_anchors: {{root: {{did: "{root}"}}}}
tenants: {{team: {{}}}}
principals:
  bot: {{kind: agent, did: "{bot}", tenant: team, roles: [worker]}}
  other: {{kind: agent, did: "{other}", tenant: team, roles: [worker]}}
tools:
  payments.refund:
    args: {{amount: {{type: integer, required: true}}}}
  lookup:
    args: {{key: {{type: string, required: true}}}}
models:
  small: {{cost_per_mtok: {{input: 1000000, output: 1000000}}}}
roles:
  worker:
    kind: agent
    capabilities:
      - resource: tool:payments.refund
      - resource: tool:lookup
      - resource: model:small
    budget: {{limit: 1000000, unit: usd_micros}}
    ttl_s: 600
quotas:
  # The longest window (10 years): windows are aligned to the epoch, so an hour's window could
  # roll over between the calls below and the one that must be refused.
  one-refund-per-decade:
    principal: bot
    window_s: 315360000
    limit: 1
    resources: [tool:payments.refund]
  team-tokens:
    tenant: team
    window_s: 315360000
    limit: 1000
    unit: tokens
    resources: ["model:*"]
"""


class Team:
    def __init__(self, path: Path) -> None:
        keys = {n: SigningKey.generate() for n in ("root", "bot", "other")}
        text = POLICY.format(**{n: k.did for n, k in keys.items()})
        self.gate = Gate(parse_policy(text, source="quota.yaml"), SQLiteStore(path))
        self.bot = self.gate.issue(keys["root"], name="bot", key=keys["bot"], role="worker")
        self.other = self.gate.issue(keys["root"], name="other", key=keys["other"], role="worker")


@pytest.fixture
def team(tmp_path: Path) -> Iterator[Team]:
    made = Team(tmp_path / "agentgate.db")
    yield made
    made.gate.close()


def _refund(gate: Gate, who: AgentIdentity, i: int) -> bool:
    auth = gate.authorize(who, Call.tool("payments.refund", {"amount": 10}), call_id=f"r{i}")
    if auth.allowed:
        gate.run(auth, lambda: "refunded", call_id=f"r{i}")
    return auth.allowed


def test_a_principal_quota_refuses_the_call_past_its_limit_and_records_why(team: Team) -> None:
    gate = team.gate
    assert [_refund(gate, team.bot, i) for i in range(3)] == [True, False, False]
    refused = gate.authorize(team.bot, Call.tool("payments.refund", {"amount": 5}))
    assert refused.quota_exceeded == "one-refund-per-decade" and not refused.budget_exhausted
    assert refused.reasons == (
        "quota one-refund-per-decade reached: 1 calls per 315360000 s for principal:bot",
    )
    assert refused.audit_index is not None and gate.audit.entry(refused.audit_index).kind == "deny"
    # Other resources and other principals are not counted by it.
    assert gate.authorize(team.bot, Call.tool("lookup", {"key": "k"})).allowed
    assert _refund(gate, team.other, 9)
    assert gate.verify().ok


def test_a_tenant_token_quota_counts_every_principal_of_the_tenant(team: Team) -> None:
    """Model calls count what the decision reserves (prompt estimate + max output), shared by
    the tenant's principals; a refused call reserves nothing, so the budget is untouched."""
    gate = team.gate
    assert gate.authorize(team.bot, Call.model("small"), tokens=(100, 500)).allowed  # 600 of 1,000
    spent_before = gate.budget_usage(team.other)
    refused = gate.authorize(team.other, Call.model("small"), tokens=(100, 400))  # 1,100 > 1,000
    assert refused.quota_exceeded == "team-tokens"
    assert gate.budget_usage(team.other) == spent_before
    assert gate.authorize(team.other, Call.model("small"), tokens=(100, 300)).allowed  # exactly 1,000


REFS = QuotaRef("q", "principal:bot", 60, 3, "calls"), QuotaRef("t", "tenant:team", 60, 100, "tokens")


def test_windows_are_fixed_and_each_starts_from_zero(store: Store) -> None:
    counter = QuotaCounter(store)
    assert window_start(60, 1_000_000_019.5) == 999_999_960
    with store.transaction() as tx:
        for _ in range(3):
            assert counter.count(tx, REFS, {"calls": 1, "tokens": 30}, now=1_000_000.0) is None
        assert counter.count(tx, REFS, {"calls": 1}, now=1_000_010.0) == REFS[0]  # same window
    assert counter.used(REFS[0], 1_000_000.0) == 3 and counter.used(REFS[1], 1_000_000.0) == 90
    with store.transaction() as tx:  # the next window: from zero; the previous one is kept (full)
        assert counter.count(tx, REFS, {"calls": 1, "tokens": 100}, now=1_000_020.0) is None
    assert counter.used(REFS[0], 1_000_020.0) == 1 and counter.used(REFS[0], 1_000_000.0) == 3
    with store.transaction() as tx:  # a unit the call does not use is not counted
        assert counter.count(tx, REFS, {"calls": 1}, now=1_000_020.0) is None
    assert counter.used(REFS[1], 1_000_020.0) == 100


def test_concurrent_deciders_never_push_a_window_past_its_limit(store: Store) -> None:
    """Threads, each on its own connection (as separate processes would be), race for 10 slots."""
    quota = QuotaRef("race", "principal:bot", 3600, 10, "calls")
    QuotaCounter(store)  # the schema, once
    wins: list[bool] = []
    lock = threading.Lock()

    def decider() -> None:
        own = open_store(store.url)
        try:
            counter = QuotaCounter(own)
            for _ in range(5):
                with own.transaction() as tx:
                    ok = counter.count(tx, (quota,), {"calls": 1}, now=7_200.0) is None
                with lock:
                    wins.append(ok)
        finally:
            own.close()

    threads = [threading.Thread(target=decider) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert len(wins) == 30 and wins.count(True) == 10
    assert QuotaCounter(store).used(quota, 7_200.0) == 10


QUOTA_POLICY = """
version: 1
trust_anchors:
  root: {{did: "{root}"}}
principals:
  a: {{kind: agent, did: "{agent}", roles: [r]}}
models:
  small:
    cost_per_mtok: {{input: 50000, output: 80000}}
roles:
  r:
    kind: agent
    capabilities: [{{resource: "model:small"}}]
    ttl_s: 600
quotas:
  q: {{principal: a, window_s: 60, limit: 1000000, unit: {unit}, resources: ["model:*"]}}
"""


@pytest.mark.parametrize("unit", ["tokens", "usd_micros"])
def test_an_amount_no_quota_column_can_hold_is_a_recorded_refusal(tmp_path: Path, unit: str) -> None:
    keys = {n: SigningKey.generate() for n in ("root", "agent")}
    text = QUOTA_POLICY.format(root=keys["root"].did, agent=keys["agent"].did, unit=unit)
    gate = Gate(parse_policy(text, source="q.yaml"), SQLiteStore(tmp_path / "s.db"))
    try:
        agent = gate.issue(keys["root"], name="a", key=keys["agent"], role="r")
        before = len(list(gate.audit.entries()))
        auth = gate.authorize(agent, Call.model("small"), tokens=(10**30, 1))  # OverflowError here
        assert not auth.allowed and auth.quota_exceeded is not None
        assert len(list(gate.audit.entries())) == before + 1
    finally:
        gate.close()


# The counter's windows on real SQLite stores.
WINDOW = 3600
T0 = 1_800_000_000.0  # a window start (a multiple of WINDOW), far from any real clock


def _quota(limit: int) -> QuotaRef:
    return QuotaRef("calls-per-hour", "principal:agent", WINDOW, limit, "calls")


def _count(counter: QuotaCounter, quota: QuotaRef, amount: int, now: float) -> QuotaRef | None:
    with counter.store.transaction() as tx:
        return counter.count(tx, [quota], {"calls": amount}, now)


def test_the_previous_window_survives_the_next_ones_start_so_a_lagging_clock_cannot_reopen_it(
    tmp_path: Path,
) -> None:
    # q05: starting a window drops only the windows before the previous one. A decider whose
    # clock lags (another process, another host) still counts into the previous window; were it
    # dropped, that window would start again from zero and let its quota be used twice over.
    counter = QuotaCounter(SQLiteStore(tmp_path / "q.db"))
    quota = _quota(2)
    assert _count(counter, quota, 2, T0 + 10) is None  # window k full
    assert _count(counter, quota, 1, T0 + WINDOW + 1) is None  # window k + 1 starts
    assert _count(counter, quota, 1, T0 + WINDOW - 1) == quota  # a lagging clock: k is still full
    assert counter.used(quota, T0 + 10) == 2
    # Two windows on, window k is gone (nothing reads it again); k + 1 is kept.
    assert _count(counter, quota, 1, T0 + 2 * WINDOW + 1) is None
    assert counter.used(quota, T0 + 10) == 0 and counter.used(quota, T0 + WINDOW + 1) == 1
    counter.store.close()


def test_a_call_that_does_not_use_a_quotas_unit_is_not_refused_by_its_overfull_window(
    tmp_path: Path,
) -> None:
    # q02: a quota whose unit the call does not use is not counted. A window already over its
    # limit (the policy lowered the limit mid-window) must not refuse a call that adds nothing.
    counter = QuotaCounter(SQLiteStore(tmp_path / "q.db"))
    assert _count(counter, _quota(10), 5, T0 + 10) is None
    lowered = _quota(3)  # the same quota (same name, subject, unit, window), a lower limit
    assert _count(counter, lowered, 0, T0 + 20) is None
    assert _count(counter, lowered, 1, T0 + 30) == lowered
    assert counter.used(lowered, T0 + 30) == 5
    counter.store.close()


def test_an_amount_beyond_any_window_is_refused_not_an_overflow(tmp_path: Path) -> None:
    # q01: an amount over the limit is refused before any SQL: the column and its parameters are
    # 64-bit, and an amount past that must be the quota's refusal, not a store error.
    counter = QuotaCounter(SQLiteStore(tmp_path / "q.db"))
    quota = _quota(10)
    assert _count(counter, quota, 2**63, T0 + 10) == quota
    assert _count(counter, quota, 11, T0 + 10) == quota
    assert counter.used(quota, T0 + 10) == 0
    assert _count(counter, quota, 10, T0 + 10) is None
    counter.store.close()
