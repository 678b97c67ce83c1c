"""``agentgate approval sign --store`` reads the request's own entry without a checkpoint too.

Review R91b made ``referring`` read no checkpoint for this command, which opens the log with no
key (a public key that signs nothing), but the request's ``approval_required`` entry itself was
still read with ``AuditLog.entry``, which opens the latest checkpoint when no row holds the index:
with that entry deleted as the log's newest row, under a checkpoint, the command exited 2 with
``its latest stored checkpoint ... does not open ... (--key, AGENTGATE_LOG_KEY)``, a command that
takes no ``--key``. ``entry(index, against_checkpoint=False)`` reads no checkpoint: the command
refuses the payload as one the store holds no entry for, and blames no key.
"""

from __future__ import annotations

import pytest
import test_cli_approval_r70_store_check
from _cli import cli
from test_audit_tamper import _attack
from test_cli_approval_r70_store_check import Asked

from agentgate.errors import BeyondLogEnd, TamperDetected
from agentgate.store import SQLiteStore

asked = test_cli_approval_r70_store_check.asked  # the fixture, shared


def _delete_newest_under_a_checkpoint(asked: Asked) -> int:
    """The request's ``approval_required`` entry, the log's newest, deleted after a checkpoint
    signed over it; its index."""
    (entry,) = [e for e in asked.gate.audit.entries() if e.kind == "approval_required"]
    assert entry.index == asked.gate.audit.size() - 1
    asked.gate.audit.checkpoint()
    store = SQLiteStore(asked.db)
    try:
        _attack(store, ("DELETE FROM audit_log WHERE idx = ?", (entry.index,)))
    finally:
        store.close()
    return entry.index


def test_the_request_entry_deleted_as_the_newest_row_is_refused_blaming_no_key(
    asked: Asked, capsys: pytest.CaptureFixture[str]
) -> None:
    _delete_newest_under_a_checkpoint(asked)
    code, out, err = cli(
        capsys, "approval", "sign", asked.write(), "--as", asked.lead, "--store", str(asked.db)
    )
    assert code == 1 and out == ""
    assert "the store has no approval_required audit entry for this request" in err
    assert "checkpoint" not in err and "--key" not in err and "forgery" not in err


def test_entry_reads_no_checkpoint_when_asked_not_to(asked: Asked) -> None:
    index = _delete_newest_under_a_checkpoint(asked)
    with pytest.raises(TamperDetected, match="latest signed checkpoint covers"):
        asked.gate.audit.entry(index)
    with pytest.raises(BeyondLogEnd):
        asked.gate.audit.entry(index, against_checkpoint=False)
