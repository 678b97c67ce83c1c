"""Regression review of R85: a renewal that preempts its own lease while the journal is out
(agentgate/dispatch/broker).

R85 made ``renew`` extend the lease before it tries the queue and writes the journal, and said
that a ``renew`` raising ``StoreError`` renewed the lease all the same. But the renewal's own pass
over the queue may preempt the lease with no grace: then the journal's write failed after the
lease had ended, and its holder was told by ``StoreError`` that it still held GPUs it had lost.
Now that renewal raises ``LeaseLost``, as it does when the journal is written, so ``StoreError``
from ``renew`` always means renewed.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_broker_library_use import FlakyJournal

from agentgate.dispatch.broker import Broker, GangRequest, LeaseEnded, TenantQuota, synthetic_topology
from agentgate.errors import BrokerError, LeaseLost, StoreError
from agentgate.store import SQLiteStore


@contextlib.contextmanager
def _one_job(tmp_path: Path) -> Iterator[tuple[Broker, list[float], FlakyJournal]]:
    """A broker journaled to a SQLite file through a journal that can be made to fail, holding
    the lease ``job`` (60 s from 1000) for tenant ``a``; its clock is the list's one time."""
    store = SQLiteStore(tmp_path / "agentgate.db")
    try:
        now = [1000.0]
        journal = FlakyJournal(store)
        broker = Broker(
            synthetic_topology(1, 8), [TenantQuota("a", 8)], clock=lambda: now[0], journal=journal
        )
        broker.submit(GangRequest("job", "a", 2, ttl_s=60))
        yield broker, now, journal
    finally:
        store.close()


@pytest.mark.parametrize("journal_out", [False, True], ids=["journal-written", "journal-out"])
def test_a_renewal_whose_queue_pass_preempts_the_lease_is_lease_lost(
    tmp_path: Path, journal_out: bool
) -> None:
    store = SQLiteStore(tmp_path / "agentgate.db")
    try:
        now = [1000.0]
        journal = FlakyJournal(store)
        broker = Broker(
            synthetic_topology(1, 8),
            [TenantQuota("a", 8)],
            clock=lambda: now[0],
            ttl_s=60,
            grace_s=0,
            journal=journal,
        )
        broker.submit(GangRequest("low", "a", 4))
        broker.submit(GangRequest("mid", "a", 4, priority=5, ttl_s=10))
        broker.submit(GangRequest("high", "a", 8, priority=1))  # waits: "mid" outranks it
        now[0] = 1020.0  # "mid" has expired: "high" now preempts "low", with no grace
        journal.failing = journal_out
        with pytest.raises(LeaseLost, match=r"^lease 'low' is not held"):
            broker.renew("low")
        assert [held.id for held in broker.leases()] == ["high"]
        journal.failing = False
        ended = [
            e.lease.id for e in broker.advance() if isinstance(e, LeaseEnded) and e.reason == "preempted"
        ]
        assert ended == ["low"]
    finally:
        store.close()


def test_a_renewal_that_keeps_its_lease_in_an_outage_is_still_store_error(tmp_path: Path) -> None:
    with _one_job(tmp_path) as (broker, now, journal):
        now[0], journal.failing = 1030.0, True
        with pytest.raises(StoreError, match="injected"):
            broker.renew("job")
        assert broker.leases()[0].expires_at == 1090.0


@pytest.mark.parametrize("lease_id", ["job", "never-held"])
def test_a_lease_not_held_is_lease_lost_while_the_journal_is_out(tmp_path: Path, lease_id: str) -> None:
    """A second regression review of R85: a lease that expired during the outage (or an id never
    held), with the clock's changes not yet journaled, raised the journal's ``StoreError`` from
    ``renew``, which says renewed; it is ``LeaseLost``, the journal's error its cause."""
    with _one_job(tmp_path) as (broker, now, journal):
        now[0], journal.failing = 1070.0, True  # expired at 1060, the journal out
        with pytest.raises(LeaseLost, match="is not held") as lost:
            broker.renew(lease_id)
        assert isinstance(lost.value.__cause__, StoreError)
        assert broker.leases() == []


def test_a_refused_release_or_submit_is_its_refusal_while_the_journal_is_out(tmp_path: Path) -> None:
    """Reading R85 again: ``release`` of a lease that expired during an outage, and a ``submit``
    refused then, raised the journal's ``StoreError`` (which says the call took effect), as
    ``renew`` did until the second regression review; each is its refusal, the journal's error
    its cause."""
    with _one_job(tmp_path) as (broker, now, journal):
        now[0], journal.failing = 1070.0, True  # expired at 1060, the journal out
        with pytest.raises(LeaseLost, match="is not held") as lost:
            broker.release("job")
        assert isinstance(lost.value.__cause__, StoreError)
        with pytest.raises(BrokerError, match="exceed what tenant") as refused:
            broker.submit(GangRequest("big", "a", 64))
        assert isinstance(refused.value.__cause__, StoreError)
