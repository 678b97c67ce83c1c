"""``agentgate approval sign --store`` reads no checkpoint, and so blames no key.

The command opens the store's log to read only, with no log key (``unsigned``: a public key that
signs nothing), and trusts the store as it is (docs/cli.md; ``audit verify`` says whether the log
was edited). Review R91 made ``AuditLog.referring``, which it reads for later ``approval_required``
entries of the request, refuse a log shorter than its latest checkpoint: that checkpoint was
opened with the key that signs nothing, and with the log's newest row deleted, one unrelated to
the request, the command exited 2 with ``its latest stored checkpoint (size 3) does not open ...
any other key is a forgery ... run again with the right one (--key, AGENTGATE_LOG_KEY)``, a
command that takes no ``--key``. Before, it signed. ``referring(index, against_checkpoint=False)``
reads no checkpoint, and the command signs again, as docs/cli.md says it does.
"""

from __future__ import annotations

import json

import pytest
import test_cli_approval_r70_store_check
from _cli import cli
from test_audit_tamper import _attack
from test_cli_approval_r70_store_check import Asked

from agentgate.store import SQLiteStore

asked = test_cli_approval_r70_store_check.asked  # the fixture, shared


def _asked_index(asked: Asked) -> int:
    (entry,) = [e for e in asked.gate.audit.entries() if e.kind == "approval_required"]
    return entry.index


def _newest_deleted_under_a_checkpoint(asked: Asked, newest: dict[str, object]) -> None:
    """``newest`` appended as the log's newest entry, a checkpoint signed over it, then its
    ``audit_log`` row deleted (its ``audit_refs`` row, if any, kept)."""
    end = asked.gate.audit.append(newest)
    asked.gate.audit.checkpoint()
    store = SQLiteStore(asked.db)
    try:
        _attack(store, ("DELETE FROM audit_log WHERE idx = ?", (end,)))
    finally:
        store.close()


def _signed(asked: Asked, capsys: pytest.CaptureFixture[str]) -> str:
    code, out, err = cli(
        capsys, "approval", "sign", asked.write(), "--as", asked.lead, "--store", str(asked.db)
    )
    assert code == 0, err
    assert json.loads(out)["call_hash"] == asked.payload["request"]["call_hash"]
    assert "checkpoint" not in err and "--key" not in err and "forgery" not in err
    return err


def test_a_deleted_newest_entry_unrelated_to_the_request_is_signed(
    asked: Asked, capsys: pytest.CaptureFixture[str]
) -> None:
    _newest_deleted_under_a_checkpoint(
        asked, {"kind": "deny", "principal": "did:key:zOther", "resource": "tool:other"}
    )
    assert "checked    against the store's request" in _signed(asked, capsys)


def test_a_deleted_newest_entry_of_the_request_named_by_audit_refs_is_signed(
    asked: Asked, capsys: pytest.CaptureFixture[str]
) -> None:
    """Its ``audit_refs`` row still names it past the log's end: no entry, as in a log without
    checkpoints, where until review R91b the checkpoint was opened with no key to blame."""
    index = _asked_index(asked)
    _newest_deleted_under_a_checkpoint(
        asked,
        {
            "kind": "approval_required",
            "ref": index,
            "principal": "did:key:zOther",
            "resource": "tool:refund",
            "reasons": ["approval not counted: its approver is not one of this call's approvers"],
        },
    )
    assert "not counted" not in _signed(asked, capsys)
