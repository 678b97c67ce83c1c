"""Review R83: ``budget settle`` copies nothing from an ``allow`` entry rewritten in the database
(its protection trigger dropped) into other canonical bytes: it used to find it, and copied its
edited fields (its resource here) into the outcome it wrote. The log's reads by index check an
entry against its stored leaf hash (``AuditLog.entry``), and ``budget`` reads an entry it cannot
trust as it reads one whose bytes are not canonical: as no ``allow`` found (``budget held`` lists
none), the reservation settled by hand referring to none (``audit verify`` reports the edit)."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_cli_r58_held import _held, _killed_worker
from test_gate_once import _new as _once_new
from test_gate_once import _policy_text

from agentgate.cli.main import main
from agentgate.gate import Gate
from agentgate.policy import parse_policy
from agentgate.store import SQLiteStore


def test_budget_settle_copies_nothing_from_an_allow_entry_that_does_not_match_its_leaf_hash(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    keys, path, agent = _once_new(tmp_path)
    with Gate(parse_policy(_policy_text(keys), source="once.yaml"), SQLiteStore(path)) as gate:
        allow = _killed_worker(gate, agent)
    with SQLiteStore(path) as store, store.transaction() as tx:
        tx.execute("DROP TRIGGER audit_log_no_update")
        ((data,),) = tx.execute("SELECT entry FROM audit_log WHERE idx = ?", (allow,))
        edited = bytes(data).replace(b'"tool:lookup"', b'"tool:lookuq"')
        assert edited != bytes(data)
        tx.execute("UPDATE audit_log SET entry = ? WHERE idx = ?", (edited, allow))
        size = tx.execute("SELECT COUNT(*) FROM audit_log")[0][0]
    (row,) = _held(str(path), "--older-than", "0")
    capsys.readouterr()
    assert row["allow_index"] is None  # the edited entry is not taken for the reservation's allow
    assert main(["budget", "settle", row["id"], "--ran", "--older-than", "0", "--store", str(path)]) == 0
    out, _ = capsys.readouterr()
    assert "allowed by audit entry" not in out, out
    with SQLiteStore(path) as store:
        assert store.query("SELECT COUNT(*) FROM audit_log")[0][0] == size + 1
        outcome = bytes(store.query("SELECT entry FROM audit_log WHERE idx = ?", (size,))[0][0])
    assert b'"ref":null' in outcome and b"lookuq" not in outcome and b'"resource":null' in outcome
