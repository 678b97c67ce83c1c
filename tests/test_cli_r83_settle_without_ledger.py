"""Review R83: ``agentgate budget settle`` in a store whose log was made but where no call was
ever allowed (no budget ledger) refuses, exit 1, naming the id and that the store holds no
ledger, and creates nothing: until R83 it made the two ledger tables, then said no reservation
had the id."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentgate.cli.main import main
from agentgate.keys import SigningKey
from agentgate.store import open_store
from agentgate.store.audit import AuditLog

RESERVATION = "0123456789abcdef" * 2


def _tables(path: Path) -> set[str]:
    with open_store(path, create=False) as store:
        return {str(row[0]) for row in store.query("SELECT name FROM sqlite_master WHERE type = 'table'")}


def test_settle_in_a_store_without_a_ledger_creates_no_table(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "agentgate.db"
    with open_store(path) as store:
        AuditLog(store, SigningKey.generate())  # the log only: no call was ever allowed here
    assert main(["audit", "checkpoint", "--store", str(path)]) == 0
    before = _tables(path)
    assert "budget_reservations" not in before
    capsys.readouterr()
    code = main(["budget", "settle", RESERVATION, "--ran", "--by", "ops", "--store", str(path)])
    out, err = capsys.readouterr()
    assert code == 1 and err == "", (code, out, err)
    assert RESERVATION in out and "holds no budget ledger" in out, out
    assert _tables(path) == before
