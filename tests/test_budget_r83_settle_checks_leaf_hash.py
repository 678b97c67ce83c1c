"""Review R83: ``budget settle`` reads the reservation's ``allow`` entry checked against its stored
leaf hash, as ``tasks settle`` does since R83: an entry rewritten in the database (its protection
trigger dropped) into other canonical bytes was copied into the outcome it wrote (its resource
here). Now ``TamperDetected`` naming the entry, exit 2, nothing written, the reservation held."""

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


def test_budget_settle_refuses_an_allow_entry_that_does_not_match_its_leaf_hash(
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
    argv = ["budget", "settle", row["id"], "--ran", "--older-than", "0", "--store", str(path)]
    assert main(argv) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.endswith(
        f"agentgate: error: audit log: entry {allow} does not match its leaf hash\n"
    )
    with SQLiteStore(path) as store:
        assert store.query("SELECT COUNT(*) FROM audit_log")[0][0] == size  # no outcome written
    assert [r["id"] for r in _held(str(path), "--older-than", "0")] == [row["id"]]  # still held
