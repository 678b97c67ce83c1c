"""``agentgate store prune`` is all or nothing: every part (approval requests, settled
reservations, dead letters, expired grants' budgets, grants and revocations) is deleted in one
transaction, so a failure in a later part leaves the earlier ones as they were, and the error
says that nothing was pruned. Until review R64 each part committed on its own, and a failure in
the dead letters part (a lock another session held, a trigger's refusal) exited 2 after the
expired approval requests and the settled reservations were gone, without saying so."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import psycopg
import pytest

from agentgate.cli.main import main
from agentgate.store import Store, open_store
from agentgate.store.approvals import ApprovalStore
from agentgate.store.dead_letters import DeadLetter, DeadLetterStore
from agentgate.store.ledger import BudgetLedger

LONG_AGO = time.time() - 90 * 86400


def _over(store: Store) -> str:
    """An expired approval request, a settled reservation and a dead letter, all over for 90
    days; returns the request's id."""
    request = ApprovalStore(store).request("call-old", "did:agent", LONG_AGO)
    ledger = BudgetLedger(store)
    reservation = ledger.reserve(None, ["g" * 64], {"g" * 64: 100}, 5)
    ledger.commit(reservation, 5)
    with store.transaction() as tx:  # settled 90 days ago
        tx.execute("UPDATE budget_reservations SET settled = '2000-01-01T00:00:00Z'")
    DeadLetterStore(store).record(
        DeadLetter(
            id="letter-1",
            recorded_at=LONG_AGO,
            tool="search",
            tenant="t",
            principal="p",
            run_id=None,
            call_id=None,
            idempotency_key=None,
            arguments_digest="0" * 64,
            authority_chain=(),
            reason="gave up",
            errors=(),
        )
    )
    return request


def _pruneable(tmp_path: Path) -> str:
    """The path of a new SQLite store holding ``_over``'s rows, each over for 90 days."""
    path = str(tmp_path / "agentgate.db")
    with open_store(path) as store:
        _over(store)
    return path


def _counts(store: Store) -> tuple[int, int, int]:
    return tuple(  # type: ignore[return-value]
        int(store.query(f"SELECT count(*) FROM {table}")[0][0])
        for table in ("approvals", "budget_reservations", "agentgate_dead_letters")
    )


def test_prune_failing_in_a_later_part_on_sqlite_prunes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R64: SQLite, the dead letters' DELETE refused by a trigger (a real SQLite abort):
    exit 2, one line saying nothing was pruned, and the request and reservation are still there."""
    path = str(tmp_path / "agentgate.db")
    with open_store(path) as store:
        _over(store)
        with store.transaction() as tx:
            tx.execute(
                "CREATE TRIGGER r64_no_delete BEFORE DELETE ON agentgate_dead_letters "
                "BEGIN SELECT RAISE(ABORT, 'dead letters are kept'); END"
            )
    capsys.readouterr()
    assert main(["store", "prune", "--older-than", "30d", "--store", path]) == 2
    out, err = capsys.readouterr()
    with open_store(path) as store:
        assert _counts(store) == (1, 1, 1)
    assert out == "" and err.count("\n") == 1, err
    assert "nothing was pruned" in err and "dead letters are kept" in err, err


@pytest.mark.postgres
def test_prune_failing_on_a_lock_on_postgresql_prunes_nothing(
    postgres_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R64: PostgreSQL, another session holds the dead letters table locked and the URL
    sets a short lock_timeout (as docs/operations.md says a user sets it): exit 2, one line
    saying nothing was pruned and naming the lock timeout, the request and reservation kept."""
    from agentgate.store._postgres import PostgresStore

    with PostgresStore(postgres_url) as store:
        _over(store)
    url = postgres_url + ("&" if "?" in postgres_url else "?") + "options=-c%20lock_timeout%3D200ms"
    holder: Any = psycopg.connect(postgres_url)
    try:
        holder.execute("LOCK TABLE agentgate_dead_letters IN ACCESS EXCLUSIVE MODE")
        capsys.readouterr()
        assert main(["store", "prune", "--older-than", "30d", "--store", url]) == 2
        out, err = capsys.readouterr()
    finally:
        holder.rollback()
        holder.close()
    with PostgresStore(postgres_url) as store:
        assert _counts(store) == (1, 1, 1)
    assert out == "" and err.count("\n") == 1, err
    assert "nothing was pruned" in err and "lock timeout" in err, err


def test_prune_succeeding_prunes_every_part(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Review R64: in one transaction, every part is still pruned and counted."""
    path = _pruneable(tmp_path)
    capsys.readouterr()
    assert main(["store", "prune", "--older-than", "30d", "--store", path]) == 0
    out = capsys.readouterr().out
    assert "approval requests: 1 pruned" in out and "settled reservations: 1 pruned" in out
    assert "dead letters: 1 pruned" in out
    with open_store(path) as store:
        assert _counts(store) == (0, 0, 0)
