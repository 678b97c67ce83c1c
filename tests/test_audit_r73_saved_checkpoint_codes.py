"""One exit code for each refusal over a saved checkpoint, whether ``audit verify --checkpoint
FILE`` reads it or ``audit checkpoint --out FILE`` must extend it.

Until review R73 a checkpoint of another log (another key or origin, or a signature line edited)
was exit 2 for ``verify --checkpoint`` (unusable input: it says nothing about this log) and exit 1
for ``checkpoint --out`` (``REFUSED``, as though the log had been rolled back). The rule now, for
both (docs/cli.md, Saved checkpoints): a file that is no checkpoint of this log signed by its key
is unusable input, exit 2, one ``agentgate: error:`` line naming FILE; a checkpoint of this log
that the log does not extend (a rollback: a checkpoint "from the future", larger than the log) is
exit 1. Either way nothing is signed and FILE is kept.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from _cli import cli
from _signed_log import checkpoints, log_environment, signed_log
from test_audit_r57_repairs import ENTRY, ORIGIN

from agentgate.store import SQLiteStore
from agentgate.store.audit import AuditLog, open_log_key

assert log_environment  # the autouse fixture, imported to apply here


def _another_logs(tmp_path: Path) -> str:
    return signed_log(tmp_path / "other" / "agentgate.db", 3)


def _signature_edited(tmp_path: Path) -> str:
    note = signed_log(tmp_path / "third" / "agentgate.db", 3)
    body, _, signature = note.partition("\n\n")
    return f"{body}\n\n{signature[:-10]}AAAAAAAAA=\n"


def _from_the_future(tmp_path: Path) -> str:
    """A checkpoint of this very log, signed by its key at 10 entries, then 7 of them removed
    (as a restore from an older copy would): the log does not extend it."""
    db = tmp_path / "agentgate.db"
    with SQLiteStore(db) as store:
        log = AuditLog(store, open_log_key(store), ORIGIN)
        log.append_many([ENTRY] * 7)
        note = log.checkpoint()
    raw = sqlite3.connect(db)
    raw.execute("DROP TRIGGER audit_log_no_delete")
    raw.execute("DROP TRIGGER audit_checkpoints_no_delete")
    raw.execute("DELETE FROM audit_log WHERE idx >= 3")
    raw.execute("DELETE FROM audit_checkpoints WHERE size > 3")
    raw.commit()
    raw.close()
    return note


CASES = {
    "another log's": (_another_logs, 2),
    "signature edited": (_signature_edited, 2),
    "from the future": (_from_the_future, 1),
}


@pytest.mark.parametrize("case", list(CASES))
def test_verify_and_checkpoint_give_one_code_for_one_saved_checkpoint(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], case: str
) -> None:
    """Review R73: ``checkpoint --out`` holding another log's checkpoint (or one whose signature
    was edited) exited 1 where ``verify --checkpoint`` of the same file exits 2. Rule: the same
    code from both (2 for a file that is no checkpoint of this log, 1 for a rollback), one error
    line on stderr for exit 2, nothing signed, FILE kept."""
    db = tmp_path / "agentgate.db"
    signed_log(db, 3)
    make, expected = CASES[case]
    saved = tmp_path / "cp.txt"
    note = make(tmp_path)
    saved.write_text(note, encoding="utf-8")
    before = checkpoints(db)

    verified, _out, verify_err = cli(
        capsys, "audit", "verify", "--store", str(db), "--checkpoint", str(saved)
    )
    signed, out, err = cli(capsys, "audit", "checkpoint", "--store", str(db), "--out", str(saved))

    assert (verified, signed) == (expected, expected), (verify_err, out, err)
    if expected == 2:
        assert out == ""
        assert err.startswith(
            f"agentgate: error: {saved}: not a checkpoint of this log signed by its key: "
        ), err
        assert err.rstrip("\n").endswith("refusing to replace it (move it away or name another file)"), err
        assert err.count("\n") == 1, err
    assert saved.read_text(encoding="utf-8") == note
    assert checkpoints(db) == before


def test_checkpoint_out_of_another_log_leaves_no_log_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R73: on a log with no checkpoint and no log key yet, ``checkpoint --out`` holding
    another log's checkpoint is the same exit 2, and no log key is created (the check runs before
    the key is made)."""
    db = tmp_path / "agentgate.db"
    with SQLiteStore(db) as store:
        AuditLog(store, open_log_key(store, create=True), ORIGIN).append_many([ENTRY] * 3)
    (tmp_path / "log.key").unlink()
    (tmp_path / "log.pub").unlink(missing_ok=True)
    saved = tmp_path / "cp.txt"
    note = _another_logs(tmp_path)
    saved.write_text(note, encoding="utf-8")
    code, out, err = cli(capsys, "audit", "checkpoint", "--store", str(db), "--out", str(saved))
    assert (code, out) == (2, ""), (code, out, err)
    assert "not a checkpoint of this log signed by its key" in err, err
    assert not (tmp_path / "log.key").exists()
    assert saved.read_text(encoding="utf-8") == note
