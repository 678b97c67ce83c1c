"""Review R70: what review R69 left of a decision whose COMMIT answer was lost (``CommitUnknown``,
``_Settlement._settle_unknown``): one that holds no budget reservation (a once-only call's row, an
approval it consumed) was left to be settled by hand, and one whose server process lingers idle
after its COMMIT was read back only once that process ended (it may linger for good: left held
after ``OUTCOME_RETRY_FOR_S``). A loopback TCP proxy between the store and the session's
PostgreSQL server cuts the COMMIT (``test_store_r68_pg_lost_commit.CommitCutter``)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from test_gate_approvals import _agent, _gate
from test_gate_policy_change import KEYS, MODEL, REFUND
from test_store_r68_pg_lost_commit import CommitCutter, _shut, _through, settled_after
from test_store_r69_pg_lost_decision import CommitDropper, CommitHolder

from agentgate.capabilities import Call
from agentgate.errors import CommitUnknown
from agentgate.gate import Approval
from agentgate.store import SQLiteStore
from agentgate.store._postgres import PostgresStore

pytestmark = pytest.mark.postgres

SMALL_REFUND = Call.tool("refund", {"amount": 50})
"""A once-only call (``refund`` is not idempotent) that needs no approval and reserves nothing."""


@pytest.fixture
def cutter(postgres_server: Any) -> Iterator[CommitCutter]:
    proxy = CommitCutter(f"{postgres_server.socket_dir}/.s.PGSQL.{postgres_server.port}")
    yield proxy
    proxy.close()


@pytest.fixture
def dropper(postgres_server: Any) -> Iterator[CommitCutter]:
    proxy = CommitDropper(f"{postgres_server.socket_dir}/.s.PGSQL.{postgres_server.port}")
    yield proxy
    proxy.close()


def _once_states(gate: Any) -> list[tuple[int, str]]:
    return [(int(i), str(s)) for i, s in gate.store.query("SELECT allow_index, state FROM agentgate_once")]


def _gone(gate: Any, session: int | None) -> None:
    for _ in range(100_000):
        if not gate.store.query("SELECT 1 FROM pg_stat_activity WHERE pid = ?", (session,)):
            return
    pytest.fail(f"server process {session} never ended")


def test_a_once_only_call_whose_decision_commit_was_lost_may_be_decided_again(
    postgres_url: str, cutter: CommitCutter
) -> None:
    """Review R70: a once-only call's allow that reserves nothing, committed by the server, the
    answer lost: the call did not run, yet its row stayed ``started`` and the call decided again
    was refused as already started until a person ran ``agentgate tasks settle KEY --not-run``.
    The next commit reads the allow back (the entry at its index is this decision's) and writes
    its ``not run`` outcome: the row says ``not_run``, and the call may be decided again."""
    gate = _gate(PostgresStore(_through(postgres_url, cutter)))
    try:
        agent = _agent(gate)
        cutter.arm(b'"kind":"allow"')
        with pytest.raises(CommitUnknown) as lost:
            gate.authorize(agent, SMALL_REFUND, call_id="c1")
        assert cutter.cut == 1
        [allow] = [e.index for e in gate.audit.entries() if e.kind == "allow" and e.resource == "tool:refund"]
        settled_after(gate, lost.value)
        assert _once_states(gate) == [(allow, "not_run")]
        outcomes = [e for e in gate.audit.entries() if e.kind == "outcome"]
        assert [o.ref for o in outcomes] == [allow]
        assert any("not acknowledged" in r for r in outcomes[0].reasons), outcomes[0].reasons
        assert not any("reservation" in r for r in outcomes[0].reasons), outcomes[0].reasons  # none held
        again = gate.authorize(agent, SMALL_REFUND, call_id="c1")
        assert again.allowed, again.reasons
        assert list(gate.audit.verify().problems) == []
    finally:
        gate.close()


def test_an_approval_used_by_a_decision_whose_commit_was_lost_is_pending_again(
    postgres_url: str, cutter: CommitCutter
) -> None:
    """Review R70: an approved call's allow (the approval consumed, nothing reserved) committed
    by the server, the answer lost: the approval stayed used, and the call decided again was
    refused with it as a replay. Read back, the allow gets its ``not run`` outcome and the
    request is pending again, as for a call that did not start."""
    gate = _gate(PostgresStore(_through(postgres_url, cutter)))
    try:
        agent = _agent(gate)
        asked = gate.authorize(agent, REFUND)
        assert asked.needs_approval and asked.request is not None
        approval = Approval.sign(asked.request, KEYS["alice"])
        cutter.arm(b'"kind":"allow"')
        with pytest.raises(CommitUnknown) as lost:
            gate.authorize(agent, REFUND, approval=approval)
        assert cutter.cut == 1
        assert gate.approvals.get(asked.request["id"]).state == "consumed"  # committed
        settled_after(gate, lost.value)
        assert gate.approvals.get(asked.request["id"]).state == "pending"
        assert [e.kind for e in gate.audit.entries() if e.kind == "outcome"] == ["outcome"]
    finally:
        gate.close()


def test_a_rolled_back_decision_does_not_settle_the_call_decided_again_at_its_index(
    postgres_url: str, dropper: CommitCutter
) -> None:
    """Review R70: the read-back (above) must not take the retry of a call whose lost decision
    the server rolled back for that decision: the retry is allowed at the same audit index, its
    row ``started`` for that index, and settling it as not run would let the call run a third
    time while the second runs. The allow at the index is not the lost one (its time differs):
    nothing is settled."""
    gate = _gate(PostgresStore(_through(postgres_url, dropper)))
    try:
        agent = _agent(gate)
        dropper.arm(b'"kind":"allow"')
        with pytest.raises(CommitUnknown) as lost:
            gate.authorize(agent, SMALL_REFUND, call_id="c1")
        assert dropper.cut == 1
        _gone(gate, lost.value.session)
        again = gate.authorize(agent, SMALL_REFUND, call_id="c1")
        assert again.allowed
        gate.flush()
        assert _once_states(gate) == [(again.audit_index, "started")]
        assert [e for e in gate.audit.entries() if e.kind == "outcome"] == []
        refused = gate.authorize(agent, SMALL_REFUND, call_id="c1")
        assert not refused.allowed
    finally:
        gate.close()


def test_a_lost_decision_whose_server_process_lingers_idle_is_read_back_at_once(
    postgres_server: Any, postgres_url: str
) -> None:
    """Review R70: the lost connection's server process committed and lingers, idle, no
    transaction open (its client gone unnoticed): its COMMIT is over either way, yet the
    read-back waited for the process to end, and after ``OUTCOME_RETRY_FOR_S`` (5 minutes) left
    the reservation held for good. Read from its ``pg_stat_activity`` row, it is read back now."""
    holder = CommitHolder(f"{postgres_server.socket_dir}/.s.PGSQL.{postgres_server.port}")
    gate = _gate(PostgresStore(_through(postgres_url, holder)))
    try:
        agent = _agent(gate)
        holder.arm(b'"kind":"allow"')
        with pytest.raises(CommitUnknown) as lost:
            gate.authorize(agent, MODEL, tokens=(10, 5))
        assert holder.cut == 1
        for _ in range(100_000):  # the COMMIT's answer is on its way: the process idle after it
            row = gate.store.query(
                "SELECT state, backend_xid IS NULL FROM pg_stat_activity WHERE pid = ?", (lost.value.session,)
            )
            if row == [("idle", True)]:
                break
        else:
            pytest.fail(f"server process {lost.value.session} not idle: {row}")
        gate.flush()
        assert gate.store.query("SELECT state FROM budget_reservations") == [("released",)]
        assert [e.kind for e in gate.audit.entries() if e.kind == "outcome"] == ["outcome"]
    finally:
        gate.close()
        _shut(*holder.kept)
        holder.close()


def test_a_server_process_may_be_committing_only_while_inside_a_transaction(postgres_url: str) -> None:
    """Review R70: the read-back above must still wait for a process inside a transaction
    (``idle in transaction``: its COMMIT not read yet; ``active``: carrying it out, a synchronous
    standby awaited): read then, the decision would be found not committed, and a COMMIT that
    came later would leave it held unsaid. Idle with no transaction open, or ended, it is not."""
    store = PostgresStore(postgres_url)
    other = PostgresStore(postgres_url)
    try:
        with other.transaction() as theirs:
            theirs.execute("CREATE TEMPORARY TABLE r70 (n integer)")
            [(session,)] = theirs.execute("SELECT pg_backend_pid()")
            with store.transaction() as tx:
                assert store.may_be_committing(session, tx) is True
        with store.transaction() as tx:
            assert store.may_be_committing(session, tx) is False  # idle, pooled
        other.close()
        store.query("SELECT pg_terminate_backend(?)", (session,))
        for _ in range(100_000):
            if not store.query("SELECT 1 FROM pg_stat_activity WHERE pid = ?", (session,)):
                break
        with store.transaction() as tx:
            assert store.may_be_committing(session, tx) is False
    finally:
        other.close()
        store.close()


def test_a_sqlite_store_has_no_session_that_may_be_committing(tmp_path: Any) -> None:
    """Review R70: the read-back asks the store whether the lost connection's server process may
    still be committing (``Store.may_be_committing``); SQLite has no server processes (its
    commit is this process's own): never."""
    store = SQLiteStore(tmp_path / "ag.db")
    try:
        with store.transaction() as tx:
            assert store.may_be_committing(1, tx) is False
    finally:
        store.close()
