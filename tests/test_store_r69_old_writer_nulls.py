"""Rows an older agentgate writes into a store this one made or upgraded: a column it does not know
is left null (or takes its default), and this code reads that as "not set": no crash, no allow.

docs/operations.md (Upgrading, "Rolling upgrades", rule 2) lets an older process write beside this
one when the change is "a column it never reads that may be null (this code reads null as 'not
set')". Each column added to a table an earlier version made is listed in ``ADDED`` with the test
that writes a row as that version did and reads it through this code; the list is checked against
the columns the recorded earlier schemas lack (``tests/schema/earlier/``), so a column added later
without such a test fails here. On a real SQLite file and the session's real PostgreSQL server.
"""

from __future__ import annotations

import io
import json
import re
import sqlite3
from contextlib import redirect_stdout
from pathlib import Path

import pytest

from agentgate.cli.main import main
from agentgate.errors import NewerStore
from agentgate.keys import SigningKey
from agentgate.store import Store, open_store
from agentgate.store._version import SCHEMA_VERSION, SchemaRecord, recorded_version
from agentgate.store.audit import AuditLog
from agentgate.store.held import held_rows, settle_held
from agentgate.store.ledger import BudgetLedger
from agentgate.store.quotas import QuotaCounter

EARLIER = Path(__file__).parent / "schema" / "earlier"

ADDED = {
    "agentgate_schema.newest": "test_a_schema_row_without_newest_reads_as_its_version_and_never_lets_a_newer_store_in",
    "budget_reservations.entry": "test_a_reservation_an_earlier_writer_made_is_listed_and_settled_by_hand",
    "budget_reservations.unit": "test_a_reservation_an_earlier_writer_made_is_listed_and_settled_by_hand",
    # NOT NULL with a default, never null: an earlier writer's row takes it.
    "approvals.quorum": (
        "tests/test_store_r69_schema_upgrade.py::"
        "test_an_approval_of_a_quorum_is_asked_and_used_on_a_store_of_the_first_approvals_table"
    ),
    "broker_state.generation": (
        "tests/test_store_upgrade_release.py (a broker of this version taking over state of generation 0)"
    ),
}
"""Each column a table of an earlier version lacked, with the test of its rows as that version
wrote them."""


def _columns(sqlite_script: str) -> dict[str, set[str]]:
    conn = sqlite3.connect(":memory:")
    try:
        conn.executescript(sqlite_script)
        names = [str(row[0]) for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        return {name: {str(row[1]) for row in conn.execute(f'PRAGMA table_info("{name}")')} for name in names}
    finally:
        conn.close()


def test_every_column_added_to_an_earlier_table_has_a_test_of_an_earlier_writer_s_rows(
    tmp_path: Path,
) -> None:
    """Review R69: "code reads a null new column as not set" was a documented rule no test held:
    the columns an earlier version's tables lack (from the recorded schemas, against a fresh
    store's) must each be in ``ADDED``, with its test."""
    fresh = tmp_path / "fresh.db"
    with redirect_stdout(io.StringIO()):
        assert main(["store", "init", "--store", str(fresh)]) == 0
    conn = sqlite3.connect(fresh)
    made = conn.execute("SELECT sql FROM sqlite_master WHERE sql IS NOT NULL AND name NOT LIKE 'sqlite_%'")
    now = _columns("".join(f"{row[0]};\n" for row in made.fetchall()))
    conn.close()
    added = set()
    for recorded in EARLIER.glob("*.sqlite.sql"):
        for table, columns in _columns(recorded.read_text()).items():
            added |= {f"{table}.{column}" for column in now.get(table, set()) - columns}
    assert added == set(ADDED)


GRANT = "a" * 64


def _earlier_reservation(store: Store, reservation: str, amount: int, created: str) -> None:
    """A budget of 100 and a reservation of ``amount`` against it, as schema version 1's ledger
    before review R61 wrote them (no ``entry``, no ``unit``)."""
    with store.transaction() as tx:
        tx.execute(
            "INSERT INTO budget_ledger (grant_id, cap, remaining) VALUES (?, 100, ?)", (GRANT, 100 - amount)
        )
        tx.execute(
            "INSERT INTO budget_reservations (id, chain, amount, state, created) VALUES (?, ?, ?, 'reserved', ?)",
            (reservation, json.dumps([GRANT]), amount, created),
        )


def test_a_reservation_an_earlier_writer_made_is_listed_and_settled_by_hand(store: Store) -> None:
    """Review R69: a reservation without ``entry`` and ``unit`` (an earlier writer's, beside this
    one) is listed as held with no unit and no ``allow`` found, and settled by hand once: charged,
    its outcome naming no unit, never released nor charged twice."""
    audit = AuditLog(store, SigningKey.generate())
    ledger = BudgetLedger(store)
    reservation = "0123456789abcdef0123456789abcdef"
    _earlier_reservation(store, reservation, 30, "2026-12-01T00:00:00.000000Z")
    assert store.query("SELECT entry, unit FROM budget_reservations WHERE id = ?", (reservation,)) == [
        (None, None)
    ]
    found, unreadable = held_rows(store, audit, min_age_s=0)
    assert unreadable == []
    assert [(r.id, r.chain, r.amount, r.unit, r.allow_index) for r in found] == [
        (reservation, (GRANT,), 30, None, None)
    ]
    settled, index = settle_held(store, audit, reservation, ran=True, by="ops", min_age_s=0)
    assert settled.unit is None
    outcome = audit.entry(index)
    assert outcome.kind == "outcome" and outcome.budget_delta == 30
    assert ledger.remaining(GRANT) == 70 and ledger.spent(GRANT) == 30
    assert ledger.reservation(reservation).state == "committed"
    assert held_rows(store, audit, min_age_s=0) == ([], [])


def _schema_row(store: Store, version: int) -> None:
    """The row as schema version 1 wrote it into a table with ``newest`` (one it did not make)."""
    with store.transaction() as tx:
        tx.execute("DELETE FROM agentgate_schema")
        tx.execute("INSERT INTO agentgate_schema (id, version) VALUES (1, ?)", (version,))


@pytest.mark.parametrize("dialect", ["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def test_a_schema_row_without_newest_reads_as_its_version_and_never_lets_a_newer_store_in(
    tmp_path: Path, request: pytest.FixtureRequest, dialect: str
) -> None:
    """Review R69: a row with ``newest`` null (written by schema version 1) is read as its
    ``version`` for both numbers: a store of version 1 opens and its next writer raises the row;
    one whose ``version`` is above this code's is refused as before, null ``newest`` or not."""
    url = str(tmp_path / "s.db") if dialect == "sqlite" else request.getfixturevalue("postgres_url")
    with open_store(url) as store:
        BudgetLedger(store)  # a part's tables: the row is recorded
        _schema_row(store, 1)
    with open_store(url) as store:
        assert store.schema == SchemaRecord(1, 1) and store.schema_version == 1
        QuotaCounter(store)  # a writer's opening of a part raises the row
        with store.transaction(immediate=False) as tx:
            assert recorded_version(tx, store.dialect) == SchemaRecord(1, SCHEMA_VERSION)
    with open_store(url) as store:
        _schema_row(store, SCHEMA_VERSION + 1)
    with pytest.raises(NewerStore, match=re.escape(f"schema version {SCHEMA_VERSION + 1}")):
        open_store(url).close()
