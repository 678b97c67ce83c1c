"""Review R82: the broker journal's ``broker_state`` row read back (agentgate/store/broker_leases.py).

Its ``taken_at`` was read with ``float`` alone and its ``generation`` with ``int``, outside the
checks of the other rows: a ``taken_at`` of ``"soon"`` was a ``ValueError`` traceback out of
``BrokerLeaseStore.load`` and ``agentgate broker leases`` (exit 1), and an infinity or ``1e300``
loaded: ``Broker.restore`` moved its clock there, where a lease's ``ttl_s`` moves it no more, so
that every lease ended in the call that granted it, and the CLI showed the state "as of -". Now
each is unreadable state (``MalformedRow``, a ``StoreError``) naming the table and the column:
``taken_at`` is a time a date holds (year 1 to 9999), ``generation`` a count of writes.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from test_broker_r82_stored_rows import _journal_with
from test_broker_store import FakeClock, busy_broker

from agentgate.cli.main import main
from agentgate.errors import MalformedRow
from agentgate.store import SQLiteStore
from agentgate.store.broker_leases import BrokerLeaseStore


@pytest.mark.parametrize(
    ("column", "value"),
    [
        pytest.param("taken_at", "soon", id="taken_at-text"),
        pytest.param("taken_at", "inf", id="taken_at-text-inf"),
        pytest.param("taken_at", float("inf"), id="taken_at-infinity"),
        pytest.param("taken_at", 1e300, id="taken_at-beyond-a-date"),
        pytest.param("generation", "x", id="generation-text"),
        pytest.param("generation", -1, id="generation-negative"),
        pytest.param("generation", 2**63 - 1, id="generation-no-write-fits"),
    ],
)
def test_a_state_row_that_holds_no_time_or_count_is_unreadable(
    tmp_path: Path, column: str, value: object
) -> None:
    path = tmp_path / "agentgate.db"
    _journal_with(path, "broker_state", column, value)
    store = SQLiteStore(path)
    try:
        with pytest.raises(MalformedRow, match=rf"stored state is unreadable: broker_state: its {column} is"):
            BrokerLeaseStore(store).load()
    finally:
        store.close()


def test_the_cli_refuses_such_a_state_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "agentgate.db"
    _journal_with(path, "broker_state", "taken_at", "soon")
    for verb in ("leases", "queue"):
        code = main(["broker", verb, "--store", str(path)])
        out, err = capsys.readouterr()
        assert code == 2 and out == "" and err.count("\n") == 1, (code, out, err[-500:])
        assert "broker_state: its taken_at is 'soon'" in err, err


def test_a_time_a_date_holds_still_reads_back(tmp_path: Path) -> None:
    path = tmp_path / "agentgate.db"
    _journal_with(path, "broker_state", "taken_at", 253402300799.0)  # 9999-12-31T23:59:59Z
    store = SQLiteStore(path)
    try:
        loaded = BrokerLeaseStore(store).load()
    finally:
        store.close()
    assert loaded is not None and loaded.taken_at == 253402300799.0


def test_the_broker_s_next_write_over_a_generation_that_is_no_count_fails_closed(tmp_path: Path) -> None:
    """Its write read the generation with ``int`` too: a ``ValueError`` out of the broker's call."""
    path = tmp_path / "agentgate.db"
    store = SQLiteStore(path)
    try:
        broker = busy_broker(BrokerLeaseStore(store), FakeClock())
        with store.transaction() as tx:
            tx.execute("UPDATE broker_state SET generation = 'x'")
        with pytest.raises(MalformedRow, match="broker_state: its generation is 'x'"):
            broker.release("keep")
    finally:
        store.close()
