"""A related entry whose row was deleted is tampering, not an entry the call never had.

Until review R90 ``explain`` and ``referring`` kept only the rows they found among the indexes the
reference index names and the entry's own ``ref``: with a call's outcome deleted (its delete
trigger dropped and put back), ``explain`` of the allow showed it with no related entry (``audit
explain``: "no outcome found", exit 0), even where a signed checkpoint covered the outcome, while
``explain`` of the outcome itself said ``REFUSED``. Now such an index, below the log's end or
inside its latest signed checkpoint, is ``_absent``'s ``TamperDetected``, as for the entry itself;
a reference index row for an entry not written yet still names none.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from test_audit_cli import audit_cli_store
from test_audit_reference_index import _index_sql
from test_audit_tamper import KEY, ORIGIN, _attack

from agentgate.cli.main import main
from agentgate.errors import TamperDetected
from agentgate.store import SQLiteStore, Store
from agentgate.store.audit import AuditLog, open_log_key

CALL = {"principal": "did:key:zAlice", "resource": "tool:search"}


def _call(log: AuditLog, *, checkpointed: bool) -> tuple[int, int]:
    """Four denies, an allow and its outcome, and a deny after them; the call's indexes. With
    ``checkpointed``, one checkpoint covers them all, else one covers the first four only."""
    log.append_many([{"kind": "deny", **CALL}] * 4)
    if not checkpointed:
        log.checkpoint()
    allow = log.append({"kind": "allow", **CALL})
    outcome = log.append({"kind": "outcome", "ref": allow, "status": "ok", **CALL})
    log.append({"kind": "deny", **CALL})
    if checkpointed:
        log.checkpoint()
    return allow, outcome


def _missing(index: int) -> str:
    return f"audit log: entry {index} is missing from the log, which holds entries up to index 6 (its row was deleted)"


@pytest.mark.parametrize("refs_indexed", [True, False], ids=["reference-index", "whole-log-read"])
@pytest.mark.parametrize("checkpointed", [False, True], ids=["past-the-checkpoint", "signed"])
def test_explain_of_a_call_whose_outcome_was_deleted_is_refused(
    store: Store, refs_indexed: bool, checkpointed: bool
) -> None:
    log = AuditLog(store, KEY, ORIGIN)
    allow, outcome = _call(log, checkpointed=checkpointed)
    assert [e.index for e in log.explain(allow).related] == [outcome]  # fills the node cache
    _attack(store, ("DELETE FROM audit_log WHERE idx = ?", (outcome,)))
    log.refs_indexed = refs_indexed and log.refs_indexed  # False: a role that could not build audit_refs
    for read in (log.explain, log.referring):
        with pytest.raises(TamperDetected) as refused:
            read(allow)
        assert str(refused.value) == _missing(outcome)


@pytest.mark.parametrize("refs_indexed", [True, False], ids=["reference-index", "whole-log-read"])
def test_explain_of_an_outcome_whose_decision_was_deleted_is_refused(
    store: Store, refs_indexed: bool
) -> None:
    log = AuditLog(store, KEY, ORIGIN)
    allow, outcome = _call(log, checkpointed=False)
    _attack(store, ("DELETE FROM audit_log WHERE idx = ?", (allow,)))
    log.refs_indexed = refs_indexed and log.refs_indexed
    with pytest.raises(TamperDetected) as refused:
        log.explain(outcome)
    assert str(refused.value) == _missing(allow)


def test_only_a_whole_log_read_refuses_an_unrelated_deleted_row(store: Store) -> None:
    """The reference index names the entries that refer to entry 3: the deleted outcome is not
    one of them. Read whole, the log cannot say what the deleted row referred to."""
    log = AuditLog(store, KEY, ORIGIN)
    _allow, outcome = _call(log, checkpointed=False)
    _attack(store, ("DELETE FROM audit_log WHERE idx = ?", (outcome,)))
    assert log.explain(3).related == ()
    log.refs_indexed = False
    with pytest.raises(TamperDetected) as refused:
        log.explain(3)
    assert str(refused.value) == _missing(outcome)


def test_a_reference_index_row_past_the_end_still_names_no_entry(store: Store) -> None:
    log = AuditLog(store, KEY, ORIGIN)
    allow, outcome = _call(log, checkpointed=False)
    _index_sql(store, "INSERT INTO audit_refs (idx, ref) VALUES (?, ?)", (9, allow))
    assert [e.index for e in log.explain(allow).related] == [outcome]
    assert [e.index for e in log.referring(allow)] == [outcome]


def test_audit_explain_of_the_allow_exits_1(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    db = audit_cli_store(tmp_path, monkeypatch)
    with SQLiteStore(db) as store:
        allow, outcome = _call(AuditLog(store, open_log_key(store, create=True)), checkpointed=False)
        _attack(store, ("DELETE FROM audit_log WHERE idx = ?", (outcome,)))
    capsys.readouterr()
    assert main(["audit", "explain", str(allow)]) == 1
    assert capsys.readouterr().out == (
        f"REFUSED: {_missing(outcome)}; nothing explained, run agentgate audit verify\n"
    )
