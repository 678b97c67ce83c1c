"""The stores and the budget ledger: what a demanding operator found."""

from __future__ import annotations

import time
import uuid
from collections.abc import Sequence
from typing import Any

import pytest

from agentgate.errors import StoreError
from agentgate.store import Row, Transaction, open_store
from agentgate.store import _postgres as pg
from agentgate.store._postgres import PostgresStore
from agentgate.store.grants import GrantRepository
from agentgate.store.ledger import BudgetLedger


def _dbname(url: str) -> str:
    return url.split("@/", 1)[1].split("?", 1)[0]


# --- store URLs: the password is masked in every error -------------------------------------------


@pytest.mark.parametrize(
    "url",
    [
        "postgresql://:hunter2@127.0.0.1:1/db",  # a password with no user name
        "postgresql://alice:hunt@er2@127.0.0.1:1/db",  # an @ in the password, not percent-encoded
        "postgresql://ali@ce:hunter2@127.0.0.1:1/db",  # an @ in the user name
    ],
)
def test_a_store_error_never_repeats_any_part_of_the_password(url: str) -> None:
    with pytest.raises(StoreError) as raised:
        open_store(url)
    assert "hunter2" not in str(raised.value)
    assert "er2" not in str(raised.value)


def test_a_percent_encoded_at_in_the_password_is_read_as_libpq_reads_it() -> None:
    """Only an @ libpq would misread is refused: written as %40 the URL is tried (and the
    server is then unreachable here), the password masked."""
    with pytest.raises(StoreError, match="cannot connect") as raised:
        open_store("postgresql://alice:hunt%40er2@127.0.0.1:1/db")
    assert "er2" not in str(raised.value)


# --- PostgreSQL: connections the server closed while they sat idle -------------------------------


@pytest.mark.postgres
def test_a_nonce_recorded_outside_a_transaction_survives_a_quiet_spell(
    postgres_server: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``decide()`` without a bound transaction (``agentgate grant check``, the gateway's
    approval-gated calls, a library caller) records the nonce on a pooled connection of its
    own. That connection skipped the idle check every transaction gets, so the first decision
    after a quiet spell longer than the server's ``idle_session_timeout`` failed (a deny)."""
    monkeypatch.setattr(pg, "IDLE_CHECK_S", 0.4)
    url = postgres_server.create_database()
    with PostgresStore(url) as owner, owner.transaction() as tx:
        tx.execute(f"ALTER DATABASE {_dbname(url)} SET idle_session_timeout = '300ms'")
    store = PostgresStore(url)
    repo = GrantRepository(store)
    expires = int(time.time()) + 60
    for turn in range(3):
        time.sleep(0.7)  # every pooled connection is closed by the server meanwhile
        assert repo.consume_nonce("did:key:alice", f"n{turn}", expires, ["g1"]) == "fresh"
    assert repo.consume_nonce("did:key:alice", "n0", expires, ["g1"]) == "replay"
    repo.close()
    store.close()


# --- the ledger: an overrun settled with ``exhaust`` while another process refunds ---------------


class _RefundAfterFailedOverrun(Transaction):
    """``tx``, with another process's refund committed just after the overrun's conditional
    update found too little left (the moment a concurrent settlement can land)."""

    def __init__(self, tx: Transaction, refund: Any) -> None:
        self.tx, self.refund = tx, refund

    def execute(self, sql: str, params: Sequence[Any] = ()) -> list[Row]:
        rows = self.tx.execute(sql, params)
        if sql.startswith("UPDATE budget_ledger SET remaining = remaining - ?") and self.tx.rowcount == 0:
            self.refund()
            self.refund = lambda: None
        return rows

    def executemany(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        self.tx.executemany(sql, rows)

    @property
    def rowcount(self) -> int:
        return self.tx.rowcount


@pytest.mark.postgres
def test_an_exhausting_overrun_is_charged_only_its_cost_when_a_refund_lands_first(postgres_url: str) -> None:
    """A call reserved 10 and used 30 on a budget with 5 left (another reservation held 85);
    that one was released after the overrun's conditional update failed and before the row was
    locked. The overrun then fits: the grant is charged 30 (70 left), not everything it had then
    (100 spent, 0 left, for a call that cost 30)."""
    mine, other = PostgresStore(postgres_url), PostgresStore(postgres_url)
    ledger, others = BudgetLedger(mine), BudgetLedger(other)
    grant = "g-" + uuid.uuid4().hex
    reservation = ledger.reserve(None, [grant], {grant: 100}, 10)
    held = others.reserve(None, [grant], {grant: 100}, 85)
    with mine.transaction() as tx:
        shortfall = ledger.commit(
            reservation, 30, _RefundAfterFailedOverrun(tx, lambda: others.release(held)), exhaust=True
        )
    assert (shortfall, ledger.remaining(grant), ledger.spent(grant)) == (0, 70, 30)
    mine.close()
    other.close()
