"""A row at the largest index a store holds (2**63 - 1) is tampering that ``verify`` names.

Since review R89 ``verify`` goes on past a gap to the rows after it: a well-formed entry inserted
at 2**63 - 1 (the append trigger dropped and put back) made the log's end 2**63, which the pass
then bound as the upper bound of its reads of ``audit_refs`` (``idx < ?``): no store's integer
holds it, and ``verify`` raised ``StoreError`` (``audit verify``: ``agentgate: error``, exit 2, no
JSON) where before R89 it said ``TAMPERED``, exit 1. A read whose end is past 2**63 - 1 is now
bound by ``idx <= 2**63 - 1``, which a store holds (any other keeps ``idx < ?``, which reads a
fraction just below its end: tests/test_audit_r90b_refs_fraction_end.py). On PostgreSQL the
log's end was also summed in SQL (``MAX(idx) + 1``: bigint out of range), so ``explain`` of a
deleted entry raised ``StoreError`` too; the sum is now made in Python.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_audit_r68_verify_counts import _cli
from test_audit_tamper import ORIGIN, _attack, _drop_primary_key, _fill

from agentgate.audit.entry import encode_entry
from agentgate.audit.merkle import leaf_hash
from agentgate.errors import TamperDetected
from agentgate.store import SQLiteStore, Store
from agentgate.store.audit import AuditLog, open_log_key

TOP = 2**63 - 1
GAP = f"entry 3: missing, and so are entries 4..{TOP - 1} (the next stored index is {TOP})"


def _entry_at_top(store: Store) -> None:
    """A well-formed outcome of entry 0 at index ``TOP``, with its row of the reference index:
    the rows a tamperer writes with the append trigger out of the way (SQLite's reference
    trigger, left in force, writes the second)."""
    data = encode_entry(
        {
            "kind": "outcome",
            "principal": "did:key:zAlice",
            "ref": 0,
            "index": TOP,
            "time": "2026-12-07T00:00:00.000000Z",
        }
    )
    _attack(
        store,
        ("INSERT INTO audit_log (idx, entry, leaf_hash) VALUES (?, ?, ?)", (TOP, data, leaf_hash(data))),
        ("INSERT INTO audit_refs (idx, ref) VALUES (?, 0) ON CONFLICT DO NOTHING", (TOP,)),
    )


@pytest.mark.parametrize("keyed", [True, False], ids=["keyed", "primary-key-dropped"])
def test_verify_names_the_gap_to_a_row_at_the_largest_index(store: Store, keyed: bool) -> None:
    log = _fill(store, 3)
    log.checkpoint()
    if not keyed:
        _drop_primary_key(store)
    _entry_at_top(store)
    report = log.verify()
    assert report.problems == (GAP,)
    assert (report.size, report.missing, report.first_bad_index) == (4, TOP - 3, 3)


def test_a_deleted_entry_below_a_row_at_the_largest_index_is_missing(store: Store) -> None:
    log = _fill(store, 3)
    _entry_at_top(store)
    for read in (log.entry, log.explain):
        with pytest.raises(TamperDetected) as refused:
            read(5)
        assert str(refused.value) == (
            f"audit log: entry 5 is missing from the log, which holds entries up to index {TOP} "
            "(its row was deleted)"
        )


def test_audit_verify_says_tampered_and_exits_1(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "agentgate.db"
    with SQLiteStore(db) as store:
        log = AuditLog(store, open_log_key(store, create=True), ORIGIN)
        for _ in range(3):
            log.append({"kind": "deny", "principal": "did:key:zAlice"})
        log.checkpoint()
        _entry_at_top(store)
    code, out = _cli(db, ["audit", "verify"], monkeypatch, capsys)
    assert code == 1 and out.startswith("TAMPERED") and GAP in out
    code, out = _cli(db, ["audit", "verify", "--json"], monkeypatch, capsys)
    printed = json.loads(out)
    assert code == 1 and printed["verdict"] == "tampered"
    assert (printed["entries"], printed["first_bad_index"]) == (4, 3)
