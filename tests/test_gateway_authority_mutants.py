"""(Review R46, mutation round 3) gaps that mutants of the HTTP gateway's authority, the once-calls
store and the quota counter survived, each pinned by a test that kills its mutant.

Real components only: the gateway on real loopback HTTP in front of simulated vLLM backends
(``tests/test_gateway.py``'s ``env``), real SQLite stores.
"""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from test_gateway import MODEL, OTHER, Env, _assert_refused, _body, _post

from agentgate.authority import Budget, issue
from agentgate.capabilities import Call
from agentgate.dispatch.gateway import APPROVAL_HEADER, INVOCATION_HEADER, GatewayGate, invocation_headers
from agentgate.errors import InputError
from agentgate.gate import Approval, Gate
from agentgate.keys import SigningKey
from agentgate.policy import QuotaRef, parse_policy
from agentgate.sim import SimServer
from agentgate.store import SQLiteStore
from agentgate.store.once import SETTLE_MIN_AGE_S, settle
from agentgate.store.quotas import QuotaCounter

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


# --- once-calls (agentgate/store/once.py) ---------------------------------------------------------

ONCE_POLICY = """
version: 1
trust_anchors: {{root: {{did: "{root}"}}}}
principals:
  agent: {{kind: agent, did: "{agent}", roles: [worker]}}
tools:
  pay:
    args: {{amount: {{type: integer, required: true}}}}
roles:
  worker:
    kind: agent
    capabilities: [{{resource: tool:pay}}]
    budget: {{limit: 100, unit: calls}}
    ttl_s: 600
"""
PAY = Call.tool("pay", {"amount": 40})
RUN = "thread-1|tools:task-1"


def _once_gate(path: Path, keys: dict[str, SigningKey]) -> Gate:
    text = ONCE_POLICY.format(root=keys["root"].did, agent=keys["agent"].did)
    return Gate(parse_policy(text, source="once.yaml"), SQLiteStore(path))


def test_a_call_settled_as_not_run_and_allowed_again_is_started_so_a_lost_outcome_never_reruns_it(
    tmp_path: Path,
) -> None:
    # o01: deciding a call again after it was settled ``not_run`` must mark it ``started`` anew.
    # Were its state left ``not_run``, a process that died while the re-allowed call ran would
    # leave it looking never run, and the next decision would run it a second time.
    keys = {n: SigningKey.generate() for n in ("root", "agent")}
    path = tmp_path / "agentgate.db"
    with _once_gate(path, keys) as gate:
        agent = gate.issue(keys["root"], name="agent", key=keys["agent"], role="worker")
        assert gate.authorize(agent, PAY, call_id="c1", run_id=RUN).allowed  # then the process died
        gate.flush()
        (lost,) = gate.once.unsettled()
        settle(gate.store, gate.audit, lost.key, ran=False, by="ops", reason="no charge seen", min_age_s=0)
        again = gate.authorize(agent, PAY, call_id="c1", run_id=RUN)
        assert again.allowed  # settled as not run: it may run; and then this process dies too
    with _once_gate(path, keys) as restarted:
        third = restarted.authorize(agent, PAY, call_id="c1", run_id=RUN)
        assert not third.allowed and "its outcome was never recorded" in third.explain()
        (started,) = restarted.once.unsettled()
        assert (started.key, started.state, started.allow_index) == (lost.key, "started", again.audit_index)


# --- quota windows (agentgate/store/quotas.py) ----------------------------------------------------

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


def test_a_call_allowed_moments_ago_cannot_be_settled_as_not_run_so_it_never_runs_twice(
    tmp_path: Path,
) -> None:
    # o03: a ``started`` call allowed less than ``min_age_s`` ago may still be running; settling
    # it as not run would let it be decided and run a second time. It is refused, nothing written.
    keys = {n: SigningKey.generate() for n in ("root", "agent")}
    with _once_gate(tmp_path / "agentgate.db", keys) as gate:
        agent = gate.issue(keys["root"], name="agent", key=keys["agent"], role="worker")
        allowed = gate.authorize(agent, PAY, call_id="c1", run_id=RUN)
        assert allowed.allowed  # and it is running now
        gate.flush()
        (running,) = gate.once.unsettled()
        entries = len(list(gate.audit.entries()))
        for min_age_s in (SETTLE_MIN_AGE_S, 60.0):
            with pytest.raises(InputError, match="may still be running"):
                settle(gate.store, gate.audit, running.key, ran=False, by="ops", min_age_s=min_age_s)
        assert gate.once.unsettled() == [running] and len(list(gate.audit.entries())) == entries
        refused = gate.authorize(agent, PAY, call_id="c1", run_id=RUN)
        assert not refused.allowed and "its outcome was never recorded" in refused.explain()
