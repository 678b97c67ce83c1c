"""Review R83: an ``allow`` entry rewritten in the database (its protection trigger dropped) into
other bytes that are still a canonical entry is not settled: ``tasks settle`` read the entry
checking only that its bytes were canonical, listed it in ``tasks unsettled`` and copied its
edited fields (its resource here) into the outcome entry it wrote, where ``_allow_entry``'s
docstring said an edited entry raised the log's ``TamperDetected``. The entry is now checked
against its stored leaf hash: ``TamperDetected`` naming it, exit 2, nothing written."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_gate_once import PAY, RUN
from test_gate_once import _gate as _once_gate
from test_gate_once import _new as _once_new

from agentgate.cli.main import main
from agentgate.errors import TamperDetected
from agentgate.keys import SigningKey
from agentgate.store import SQLiteStore
from agentgate.store.audit import AuditLog
from agentgate.store.once import settle


def _edited_allow(tmp_path: Path) -> tuple[Path, str, int]:
    """A store whose once-only call's ``allow`` entry names another tool, its leaf hash kept:
    the store, the call's key and the entry's index."""
    keys, path, agent = _once_new(tmp_path)
    with _once_gate(path, keys) as gate:
        auth = gate.authorize(agent, PAY, call_id="c1", run_id=RUN)
        assert auth.allowed
        gate.flush()
    with SQLiteStore(path) as store, store.transaction() as tx:
        ((key,),) = tx.execute("SELECT key FROM agentgate_once")
        tx.execute("DROP TRIGGER audit_log_no_update")
        ((data,),) = tx.execute("SELECT entry FROM audit_log WHERE idx = ?", (auth.audit_index,))
        edited = bytes(data).replace(b'"tool:pay"', b'"tool:paz"')
        assert edited != bytes(data)
        tx.execute("UPDATE audit_log SET entry = ? WHERE idx = ?", (edited, auth.audit_index))
    return path, str(key), auth.audit_index


def _log_and_calls(path: Path) -> tuple[object, ...]:
    with SQLiteStore(path) as store:
        return (
            store.query("SELECT idx FROM audit_log ORDER BY idx"),
            store.query("SELECT key, state FROM agentgate_once"),
        )


def test_tasks_settle_refuses_an_allow_entry_that_does_not_match_its_leaf_hash(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path, key, index = _edited_allow(tmp_path)
    before = _log_and_calls(path)
    assert main(["tasks", "settle", key, "--ran", "--older-than", "0", "--store", str(path)]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.endswith(
        f"agentgate: error: audit log: entry {index} does not match its leaf hash\n"
    )
    assert _log_and_calls(path) == before  # no outcome appended, the call still unsettled
    for json_flag in ([], ["--json"]):
        assert main(["tasks", "unsettled", *json_flag, "--store", str(path)]) == 2
        out, err = capsys.readouterr()
        assert "tool:paz" not in out and f"entry {index} does not match its leaf hash" in err, (out, err)


def test_settle_raises_tamper_detected_for_such_an_entry(tmp_path: Path) -> None:
    path, key, index = _edited_allow(tmp_path)
    before = _log_and_calls(path)
    with SQLiteStore(path) as store:
        log = AuditLog(store, SigningKey.generate())
        with pytest.raises(TamperDetected, match=f"entry {index} does not match its leaf hash"):
            settle(store, log, key, ran=False, by="ops", min_age_s=0)
    assert _log_and_calls(path) == before


def test_every_reader_of_the_entry_is_refused_it(tmp_path: Path) -> None:
    """The check is the log's own (``AuditLog.entry``, ``entries_at``), not the settle paths':
    the Gate's readers (a superseded or voided approval request copies its ``approval_required``
    entry's fields into the ``deny`` it writes) are refused such an entry too."""
    path, _key, index = _edited_allow(tmp_path)
    with SQLiteStore(path) as store:
        log = AuditLog(store, SigningKey.generate())
        for read in (lambda: log.entry(index), lambda: log.entries_at([index])):
            with pytest.raises(TamperDetected, match=f"entry {index} does not match its leaf hash"):
                read()
        assert log.entry(0).index == 0  # an entry as written is read as before
