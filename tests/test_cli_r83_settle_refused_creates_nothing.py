"""Review R83: ``agentgate tasks settle`` refused (exit 1, nothing written) in a store that holds no
call that must run once makes nothing there: until R83 it made the audit log's tables, the
once-only calls' and the budget ledger's (``once.settle`` opened the ledger and the once-only
calls before it looked the key up; the command opened the log to write first). ``budget settle``
in a store without a ledger made the log's tables the same way (its ledger's no longer, since
the review's first fix)."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_store_dead_letters import letter

from agentgate.cli.main import main
from agentgate.errors import SettlementRefused
from agentgate.keys import SigningKey
from agentgate.store import SQLiteStore, open_store
from agentgate.store.audit import AuditLog, open_log_key
from agentgate.store.dead_letters import DeadLetterStore
from agentgate.store.once import settle


def _tables(path: Path) -> set[str]:
    with open_store(path, create=False) as store:
        return {str(row[0]) for row in store.query("SELECT name FROM sqlite_master WHERE type = 'table'")}


@pytest.fixture
def letters_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A store holding dead letters only (a scheduler's, no Gate's), and its log key."""
    monkeypatch.setenv("AGENTGATE_LOG_KEY", str(tmp_path / "keys" / "log.key"))
    path = tmp_path / "agentgate.db"
    with SQLiteStore(path) as store:
        DeadLetterStore(store).record(letter(1))
        open_log_key(store)
    return path


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (
            ["tasks", "settle", "abc", "--ran"],
            "no call that must run once has the key 'abc': the store holds no",
        ),
        (["budget", "settle", "0" * 32, "--ran", "--by", "ops"], "the store holds no budget ledger"),
    ],
    ids=["tasks", "budget"],
)
def test_a_settle_refused_where_nothing_could_be_settled_creates_no_table(
    letters_only: Path, capsys: pytest.CaptureFixture[str], argv: list[str], said: str
) -> None:
    before = _tables(letters_only)
    assert "audit_log" not in before
    assert main([*argv, "--store", str(letters_only)]) == 1
    out, err = capsys.readouterr()
    assert out.startswith("REFUSED: ") and said in out and err == "", (out, err)
    assert _tables(letters_only) == before


def test_settle_refuses_before_opening_the_ledger_where_no_call_runs_once(tmp_path: Path) -> None:
    """``once.settle`` in a store with a log but no once-only calls: refused, no table made."""
    path = tmp_path / "agentgate.db"
    with SQLiteStore(path) as store:
        log = AuditLog(store, SigningKey.generate())
        before = _tables(path)
        with pytest.raises(SettlementRefused, match="the store holds no calls that must run once"):
            settle(store, log, "abc", ran=True, by="ops")
    assert _tables(path) == before
