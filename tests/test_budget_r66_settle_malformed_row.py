"""Settling a call whose held reservation row is malformed names the row, never a traceback
(review R66).

``agentgate budget settle`` (``store.held``) has named a malformed ``budget_reservations`` row
since review R62; ``agentgate tasks settle`` (``store.once.settle``) read the same row with
``int()`` and the ledger's settlement with ``json.loads``, so an amount or chain edited outside
agentgate ended the command with ``ValueError`` or ``JSONDecodeError``. Real components: a Gate
over a SQLite file, the row edited through a second connection, the CLI's ``main``.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
from pathlib import Path

import pytest
from test_gate_once import PAY, RUN, _cli, _gate, _new

from agentgate.cli.main import main
from agentgate.errors import StoreError
from agentgate.store import SQLiteStore
from agentgate.store.audit import AuditLog, open_log_key
from agentgate.store.ledger import BudgetLedger


def _lost_call(tmp_path: Path, edit: str) -> tuple[Path, str, str]:
    """A once-only call allowed whose process died (no outcome), its reservation's row then
    edited by ``edit``; the store's path, the call's key and the reservation's id."""
    keys, path, agent = _new(tmp_path)
    with _gate(path, keys) as gate:
        assert gate.authorize(agent, PAY, call_id="c1", run_id=RUN).allowed
        gate.flush()
    with contextlib.closing(sqlite3.connect(path)) as conn:
        conn.execute(f"UPDATE budget_reservations SET {edit}")
        conn.commit()
        (reservation,) = conn.execute("SELECT id FROM budget_reservations").fetchone()
    code, listed = _cli("tasks", "unsettled", "--json", "--store", str(path))
    assert code == 0
    (row,) = json.loads(listed)
    return path, str(row["key"]), str(reservation)


@pytest.mark.parametrize("said", ["--ran", "--not-run"])
@pytest.mark.parametrize("edit", ["amount = 'x'", "chain = 'not json'", "chain = '{\"a\": 1}'"])
def test_tasks_settle_of_a_malformed_reservation_row_names_it_and_writes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], edit: str, said: str
) -> None:
    """Review R66: ``tasks settle`` of a call whose reservation row was edited (an amount of
    text, a chain that is not a JSON list of grant ids) ended in a traceback (``ValueError``,
    ``JSONDecodeError``, or a chain of no grant settled as charged). It exits 2 with one line
    naming the row, and writes nothing: the call is still unsettled, no outcome is logged."""
    path, key, reservation = _lost_call(tmp_path, edit)
    code = main(["tasks", "settle", key, said, "--by", "ops", "--older-than", "0", "--store", str(path)])
    err = capsys.readouterr().err
    assert code == 2, err
    assert f"budget_reservations: the row of reservation '{reservation}' is malformed" in err, err
    assert "Traceback" not in err
    with SQLiteStore(path) as store:
        assert store.query("SELECT state FROM agentgate_once") == [("started",)]
        assert store.query("SELECT state FROM budget_reservations") == [("reserved",)]
        with pytest.raises(StoreError, match="is malformed"):  # the library's read says the same
            BudgetLedger(store).reservation(reservation)
        kinds = [entry.kind for entry in AuditLog(store, open_log_key(store)).entries()]
    assert "outcome" not in kinds, kinds
