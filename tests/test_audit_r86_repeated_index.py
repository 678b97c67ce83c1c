"""Review R86: in an ``audit_log`` made again without its primary key, a second row at an
uncheckpointed index (a forged allow beside the real deny) was read by ``entry`` and ``explain``
(the last row read), while ``verify``, ``audit show`` and ``entries`` read the other; ``explain``
printed the forged entry, exit 0, without a word of the second row. Rule: a reader of one index
by key (``entry``, ``entries_at``, ``explain``, for the entry and each related one) refuses an
index that more than one row holds, in ``verify``'s words, on both stores."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_audit_cli import audit_cli_store
from test_audit_tamper import _attack, _drop_primary_key

from agentgate.audit.entry import AuditEntry, encode_entry
from agentgate.audit.merkle import leaf_hash
from agentgate.cli.main import main
from agentgate.errors import TamperDetected
from agentgate.keys import SigningKey
from agentgate.store import SQLiteStore, Store
from agentgate.store.audit import AuditLog, open_log_key

KEY = SigningKey(b"\x07" * 32)
ORIGIN = "test.example/audit"
NAMED = "audit log: entry 4: 2 rows hold this index, which one entry has: rows inserted outside agentgate"


def _forged_beside_entry_4(store: Store, log: AuditLog) -> None:
    """Entries 0..3 checkpointed, a deny at 4 and its outcome at 5; then the table's key dropped
    and a forged allow at 4, canonical and with its own leaf hash, inserted beside the deny."""
    for _ in range(4):
        log.append({"kind": "allow", "principal": "did:key:zAlice", "resource": "tool:search"})
    log.checkpoint()
    log.append({"kind": "deny", "principal": "did:key:zAlice", "resource": "tool:payments.refund"})
    log.append({"kind": "outcome", "principal": "did:key:zAlice", "ref": 4, "status": "ok"})
    real = log.entry(4)
    values = real.model_dump(exclude={"charges"})
    forged = encode_entry({**values, "kind": "allow", "reasons": ["forged"]})
    _drop_primary_key(store)
    _attack(
        store, ("INSERT INTO audit_log (idx, entry, leaf_hash) VALUES (4, ?, ?)", (forged, leaf_hash(forged)))
    )


@pytest.mark.parametrize("refs_indexed", [True, False], ids=["reference-index", "whole-log-read"])
def test_readers_of_one_index_refuse_an_index_two_rows_hold(store: Store, refs_indexed: bool) -> None:
    log = AuditLog(store, KEY, ORIGIN)
    _forged_beside_entry_4(store, log)
    log.refs_indexed = refs_indexed and log.refs_indexed  # False: a role that could not build audit_refs
    report = log.verify()
    assert report.first_bad_index == 4
    assert any(p.startswith("entry 4: 2 rows hold this index") for p in report.problems), report.problems
    assert [entry.index for entry in log.entries(4)] == [4, 5]  # one row of 4, as show lists it
    assert log.repeated_indexes() == [(4, 2)]
    for read in (
        lambda: log.entry(4),
        lambda: log.entry_bytes(4),
        lambda: log.entries_at([3, 4]),
        lambda: log.explain(4),
        lambda: log.explain(5),  # entry 4 is the one its outcome refers to
    ):
        with pytest.raises(TamperDetected) as caught:
            read()
        assert str(caught.value) == NAMED
    assert isinstance(log.entry(5), AuditEntry) and log.explain(3).entry.index == 3


def test_explain_refuses_an_index_two_rows_hold(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    db = audit_cli_store(tmp_path, monkeypatch)
    with SQLiteStore(db) as store:
        _forged_beside_entry_4(store, AuditLog(store, open_log_key(store)))
    assert main(["audit", "explain", "4"]) == 1
    out = capsys.readouterr().out
    assert out == f"REFUSED: {NAMED}; nothing explained, run agentgate audit verify\n"
