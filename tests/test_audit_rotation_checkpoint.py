"""The first checkpoint after a log-key rotation is signed by the new key.

docs/operations.md, "Rotating the log key": step 4 takes a checkpoint under the new key. When no
entry had been appended since the last checkpoint (step 1 took it), ``checkpoint`` returned that
stored note, signed by the old key, so a proof bundle made then verified with the old public key
only, not with the new ``log.pub`` the operator publishes.
"""

from __future__ import annotations

import pytest

from agentgate.audit.note import open_checkpoint
from agentgate.audit.proof import verify_bundle
from agentgate.errors import TamperDetected
from agentgate.keys import SigningKey
from agentgate.store import Store
from agentgate.store.audit import AuditLog

ORIGIN = "test.example/audit"
OLD, NEW = SigningKey(b"\x07" * 32), SigningKey(b"\x08" * 32)


def _rotated(store: Store) -> AuditLog:
    log = AuditLog(store, OLD, origin=ORIGIN)
    log.append({"kind": "deny", "principal": "did:key:z6Mk-x", "reasons": ["r"]})
    log.checkpoint()  # step 1: the last checkpoint under the old key
    return AuditLog(store, NEW, origin=ORIGIN, previous_keys=[OLD.public])


def test_a_checkpoint_right_after_rotation_is_signed_by_the_new_key(store: Store) -> None:
    rotated = _rotated(store)
    note = rotated.checkpoint()  # step 4, no entry appended since step 1
    assert open_checkpoint(note, NEW.public, ORIGIN).size == 1
    assert rotated.latest_checkpoint() == note
    assert rotated.checkpoint() == note  # and signed once: the next call signs nothing new
    assert len(rotated.checkpoints()) == 2
    entry, checkpoint = verify_bundle(rotated.prove(0).text(), NEW.public, ORIGIN)
    assert (entry.index, checkpoint.size) == (0, 1)
    with pytest.raises(TamperDetected):
        verify_bundle(rotated.prove(0).text(), OLD.public, ORIGIN)
    report = rotated.verify()
    assert report.ok and report.checkpoints_checked == 2


def test_an_auditors_copy_with_the_public_key_only_still_reads_the_old_checkpoint(store: Store) -> None:
    _rotated(store)
    auditor = AuditLog(store, NEW.public, origin=ORIGIN, previous_keys=[OLD.public])
    note = auditor.checkpoint()  # nothing to sign with: the stored checkpoint, as before rotation
    assert open_checkpoint(note, OLD.public, ORIGIN).size == 1
