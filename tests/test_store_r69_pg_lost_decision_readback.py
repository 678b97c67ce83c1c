"""Review R69 (helper review): the read-back that settles a decision whose COMMIT answer was lost
(``CommitUnknown``, ``_Settlement._decision_committed``) must hold only once the transaction
that read it commits. A loopback TCP proxy between the store and the session's PostgreSQL server
drops a COMMIT (``test_store_r69_pg_lost_decision.CommitDropper``): the server rolls back."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from test_gate_approvals import _agent, _gate
from test_gate_policy_change import MODEL
from test_store_r68_pg_lost_commit import BUDGET, CommitCutter, _shut, _through, settled_after
from test_store_r69_pg_lost_decision import CommitDropper, CommitHolderBusy, _terminate, _until_busy

from agentgate.errors import CommitUnknown
from agentgate.store import Transaction
from agentgate.store._postgres import PostgresStore

pytestmark = pytest.mark.postgres


@pytest.fixture
def dropper(postgres_server: Any) -> Iterator[CommitCutter]:
    proxy = CommitDropper(f"{postgres_server.socket_dir}/.s.PGSQL.{postgres_server.port}")
    yield proxy
    proxy.close()


def _gone(gate: Any, lost: CommitUnknown) -> None:
    """Wait until the server process of ``lost``'s connection has ended, committing nothing."""
    for _ in range(100_000):
        if not gate.store.query("SELECT 1 FROM pg_stat_activity WHERE pid = ?", (lost.session,)):
            return
    pytest.fail(f"server process {lost.session} never ended")


def test_a_lost_decision_read_back_in_a_transaction_rolled_back_is_read_back_again(
    postgres_url: str, dropper: CommitCutter
) -> None:
    """Review R69: the read-back forgot the lost decision as it read it, before the transaction
    that read it committed. That transaction (the next decision's, its own COMMIT lost too) was
    rolled back, the outcome put back, and the next commit wrote it without reading back: an
    ``outcome`` entry for an ``allow`` the server never committed (its audit index the next
    allow's), a ``not run`` for a call that was never decided."""
    gate = _gate(PostgresStore(_through(postgres_url, dropper)))
    try:
        agent = _agent(gate)
        dropper.arm(b'"kind":"allow"')
        with pytest.raises(CommitUnknown) as first:
            gate.authorize(agent, MODEL, tokens=(10, 5))
        _gone(gate, first.value)
        dropper.arm(b'"kind":"allow"')
        with pytest.raises(CommitUnknown) as second:
            gate.authorize(agent, MODEL, tokens=(10, 5))  # carries the first's outcome, read back
        assert dropper.cut == 2
        _gone(gate, second.value)
        again = gate.authorize(agent, MODEL, tokens=(10, 5))
        assert again.allowed
        settled_after(gate, second.value)
        allows = [e.index for e in gate.audit.entries() if e.kind == "allow" and e.resource == "model:small"]
        assert allows == [again.audit_index]
        assert [e.ref for e in gate.audit.entries() if e.kind == "outcome"] == []
        held = sum(amount for _, _, amount in again.reservations)
        assert gate.ledger.remaining(agent.grant_id) == BUDGET - held
        assert list(gate.audit.verify().problems) == []
    finally:
        gate.close()


class CountingStore(PostgresStore):
    """A ``PostgresStore`` that counts its transactions left by an exception (rolled back)."""

    rolled_back = 0

    @contextmanager
    def transaction(self, *, immediate: bool = True) -> Iterator[Transaction]:
        try:
            with super().transaction(immediate=immediate) as tx:
                yield tx
        except BaseException:
            self.rolled_back += 1
            raise


def test_outcomes_carried_with_a_lost_decision_still_committing_roll_nothing_back(
    postgres_server: Any, postgres_url: str
) -> None:
    """Review R69: while the server process of a lost decision's connection lives (it may still
    be committing), its outcome waits (``_decision_committed`` raises ``StoreError``). That was
    raised in the first transaction of every decision that carried it, which was rolled back
    whole and made again with a savepoint per outcome: two transactions, the other calls'
    outcomes written twice, for every decision until that process ended (up to
    ``OUTCOME_RETRY_FOR_S``). The other calls' outcomes and the decisions that carry them are
    written at once, and nothing is rolled back. (Its process kept busy: since review R70 one
    idle after its COMMIT is read back at once.)"""
    holder = CommitHolderBusy(f"{postgres_server.socket_dir}/.s.PGSQL.{postgres_server.port}")
    store = CountingStore(_through(postgres_url, holder))
    gate = _gate(store)
    try:
        agent = _agent(gate)
        other = gate.authorize(agent, MODEL, tokens=(10, 5))
        holder.arm(b'"kind":"allow"')
        with pytest.raises(CommitUnknown) as lost:
            gate.authorize(agent, MODEL, tokens=(10, 5))
        _until_busy(gate, lost.value.session)
        store.rolled_back = 0  # the lost decision's
        gate.abandon(other)  # its outcome waits in the queue with the lost decision's
        for _ in range(3):
            assert gate.authorize(agent, MODEL, tokens=(10, 5)).allowed
        gate.flush()
        assert [e.ref for e in gate.audit.entries() if e.kind == "outcome"] == [other.audit_index]
        assert store.rolled_back == 0
        _terminate(gate, lost.value.session)
    finally:
        gate.close()
        _shut(*holder.kept)
        holder.close()
