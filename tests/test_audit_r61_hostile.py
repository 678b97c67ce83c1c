"""Hostile edits of the log's rows, made with its protection bypassed, on both stores.

Review R61's hostile pass: rules checked here, on SQLite and PostgreSQL. An entry's bytes edited in
place with its stored leaf hash kept (covered by a checkpoint or not) is named at its index; an
uncovered row overwritten with another row's entry and leaf hash (both columns the hash covers,
consistent with each other) is named by the index the entry carries; every checkpoint row replaced
by one signed with another key (its size and root columns matching the forged note) is named, with
the key that signed it, and the log is not intact; the checkpoints table emptied leaves a log that
the checkpoint saved outside still verifies against, and an entry rewritten after it (with its
leaf hash) is then caught by that saved checkpoint, the range named (no stored checkpoint is left
to narrow it).
"""

from __future__ import annotations

import pytest
from test_audit_tamper import ORIGIN, _attack, _fill, _flip_decision, _row

from agentgate.audit.merkle import leaf_hash
from agentgate.audit.note import Checkpoint, sign_checkpoint
from agentgate.keys import SigningKey
from agentgate.store import Store

OTHER = SigningKey(b"\x66" * 32)


@pytest.mark.parametrize("idx", [2, 8])  # covered by the checkpoint of size 6, and not
def test_an_entry_edited_with_its_leaf_hash_kept_is_named(store: Store, idx: int) -> None:
    """Review R61: an entry's bytes changed in place, its leaf hash column left as it was."""
    log = _fill(store, 6)
    log.checkpoint()
    log.append_many([{"kind": "deny", "principal": "did:key:zAlice"}] * 4)  # entries 6 to 9, uncovered
    data, _stored = _row(store, idx)
    _attack(store, ("UPDATE audit_log SET entry = ? WHERE idx = ?", (_flip_decision(data), idx)))
    report = log.verify()
    assert not report.ok
    assert report.first_bad_index == idx
    assert f"entry {idx}: bytes do not match the stored leaf hash (entry edited)" in report.problems


def test_an_uncovered_row_overwritten_with_another_rows_entry_and_hash_is_named(store: Store) -> None:
    """Review R61: both columns the leaf hash covers copied from another row, consistent with each other."""
    log = _fill(store, 6)
    log.checkpoint()
    log.append({"kind": "allow", "principal": "did:key:zAlice"})
    log.append({"kind": "deny", "principal": "did:key:zAlice"})  # entries 6 and 7, uncovered
    data, stored = _row(store, 6)
    assert stored == leaf_hash(data)
    _attack(store, ("UPDATE audit_log SET entry = ?, leaf_hash = ? WHERE idx = 7", (data, stored)))
    report = log.verify()
    assert report.first_bad_index == 7
    assert "entry 7: holds the entry of index 6 (rows moved, inserted or reordered)" in report.problems


def test_every_checkpoint_re_signed_with_another_key_is_named(store: Store) -> None:
    """Review R61: the checkpoint rows replaced by notes another key signed, columns matching each note."""
    log = _fill(store)
    log.checkpoint()
    cp = log.open_checkpoint(str(store.query("SELECT note FROM audit_checkpoints")[0][0]))
    forged = sign_checkpoint(Checkpoint(ORIGIN, cp.size, cp.root), OTHER)
    _attack(store, ("UPDATE audit_checkpoints SET note = ?", (forged,)))
    report = log.verify()
    assert not report.ok and report.checkpoints_checked == 0
    assert report.problems and report.problems[0].startswith("checkpoint #1: ")
    assert report.unopened_signers and len(report.unopened_signers[0]) == 1


def test_emptied_checkpoints_leave_the_saved_checkpoint_as_the_evidence(store: Store) -> None:
    """Review R61: the tree-head table emptied; the checkpoint saved outside still catches a rewrite."""
    log = _fill(store)
    saved = log.checkpoint()
    _attack(store, ("DELETE FROM audit_checkpoints", ()))
    assert store.query("SELECT COUNT(*) FROM audit_checkpoints")[0][0] == 0
    assert log.verify(saved_checkpoint=saved).entries_verify  # the entries are as the saved one signs
    data, _stored = _row(store, 3)
    forged = _flip_decision(data)
    _attack(
        store, ("UPDATE audit_log SET entry = ?, leaf_hash = ? WHERE idx = 3", (forged, leaf_hash(forged)))
    )
    report = log.verify(saved_checkpoint=saved)
    # No stored checkpoint is left to narrow it down: the saved root alone names the range.
    assert report.first_bad_index == 0
    (problem,) = report.problems
    assert problem.startswith("checkpoint of size 10: root does not match the entries; ")
    assert "an entry in [0, 10) was changed together with its leaf hash" in problem
