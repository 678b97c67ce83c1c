"""Review R82: a ``broker_decisions`` row read back (agentgate/store/broker_decisions.py).

Its ``audit_index`` and ``cost_per_gpu_hour`` were read with ``int`` outside the check that
names a malformed row, and a reservation's amount with ``int``: an ``audit_index`` of ``"x"`` or
a price of ``"cheap"`` was a ``ValueError`` traceback, and an amount of ``1e400`` an
``OverflowError`` one, out of ``BrokerDecisionStore``, ``agentgate broker leases``, ``budget
held`` and ``budget settle`` (exit 1); an amount of ``5.7`` was read as 5, and a reservation id
``7`` as ``"7"``. One helper reads every column now: such a row is ``MalformedRow`` (a
``StoreError``) naming the table, the request and the column, and each verb exits 2 with one line.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from agentgate.cli.main import main
from agentgate.errors import MalformedRow
from agentgate.store import open_store
from agentgate.store.broker_decisions import BrokerDecisionStore, LeaseDecision
from agentgate.store.ledger import BudgetLedger

GRANT = "ab" * 32


def _decided(path: Path, column: str, value: object) -> str:
    """A decision of lease ``ft-1`` holding a budget reservation, its ``column`` then set to
    ``value`` (in text, ``{id}`` stands for the reservation's id), in a store with an audit log
    (which ``budget held`` and ``budget settle`` read); returns the reservation's id."""
    assert main(["store", "init", "--store", str(path)]) == 0
    assert main(["audit", "checkpoint", "--store", str(path)]) == 0
    with open_store(path) as store:
        reservation = BudgetLedger(store).reserve(None, [GRANT], {GRANT: 100}, 5)
        BrokerDecisionStore(store).add(
            LeaseDecision("ft-1", "did:key:zA", GRANT, "gpu:h100", 0, 2_000_000, ((reservation, "calls", 5),))
        )
        if isinstance(value, str):
            value = value.replace("{id}", reservation)
        with store.transaction() as tx:
            tx.execute(f"UPDATE broker_decisions SET {column} = ?", (value,))
    return reservation


@pytest.mark.parametrize(
    ("column", "value"),
    [
        pytest.param("audit_index", "x", id="audit_index-text"),
        pytest.param("audit_index", -1, id="audit_index-negative"),
        pytest.param("cost_per_gpu_hour", "cheap", id="price-text"),
        pytest.param("cost_per_gpu_hour", -5, id="price-negative"),
        pytest.param("reservations", '[["{id}", "calls", 1e400]]', id="amount-1e400"),
        pytest.param("reservations", '[["{id}", "calls", 5.7]]', id="amount-fraction"),
        pytest.param("reservations", '[["{id}", "calls", true]]', id="amount-bool"),
        pytest.param("reservations", '[[7, "calls", 5]]', id="id-number"),
        pytest.param("reservations", '[["{id}", "calls"]]', id="two-items"),
    ],
)
def test_a_decision_row_not_as_agentgate_writes_it_is_malformed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], column: str, value: object
) -> None:
    path = tmp_path / "agentgate.db"
    reservation = _decided(path, column, value)
    capsys.readouterr()
    with open_store(path) as store:
        with pytest.raises(
            MalformedRow, match=rf"broker_decisions: the row of request 'ft-1' is malformed: its {column}"
        ):
            BrokerDecisionStore(store).all()
        with pytest.raises(MalformedRow, match="broker_decisions"):
            BrokerDecisionStore(store).get("ft-1")
    for argv in (
        ["broker", "leases"],
        ["budget", "held", "--older-than", "0"],
        ["budget", "settle", reservation, "--ran", "--older-than", "0"],
    ):
        code = main([*argv, "--store", str(path)])
        out, err = capsys.readouterr()
        assert code == 2 and out == "" and err.count("\n") == 1, (argv, code, out, err[-500:])
        assert "broker_decisions: the row of request 'ft-1' is malformed" in err, err


def test_a_decision_row_as_agentgate_writes_it_reads_back(tmp_path: Path) -> None:
    path = tmp_path / "agentgate.db"
    reservation = _decided(path, "audit_index", None)
    with open_store(path) as store:
        (decision,) = BrokerDecisionStore(store).all()
    assert decision.audit_index is None and decision.cost_per_gpu_hour == 2_000_000
    assert decision.reservations == ((reservation, "calls", 5),)
