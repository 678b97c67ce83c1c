"""``audit prove`` refuses as ``audit checkpoint`` does: a log whose protection trigger is not in
force (where a checkpoint would be signed) and an entry edited in the database are exit 1, one
``REFUSED: ...`` line on standard output, nothing signed or written (docs/cli.md, Exit codes)."""

from __future__ import annotations

from pathlib import Path

import pytest
from _raw_sqlite import opened
from test_audit_proofs import edited
from test_docs_r57_literal import _rewrite_entry_1_past_a_dropped_trigger, checkpointed

from agentgate.cli.main import main

__all__ = ["checkpointed", "edited"]  # the fixtures, shared with the tests they come from


def _checkpoints(db: Path) -> int:
    with opened(db) as conn:
        (count,) = conn.execute("SELECT COUNT(*) FROM audit_checkpoints").fetchone()
    return int(count)


def test_prove_over_a_log_whose_trigger_is_missing_is_refused_exit_1(
    checkpointed: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R59: prove refused a log whose trigger was dropped with exit 2, where audit checkpoint refuses it with exit 1."""
    _rewrite_entry_1_past_a_dropped_trigger(checkpointed)
    bundle = checkpointed.parent / "entry-1.proof"
    capsys.readouterr()
    assert main(["audit", "prove", "1", "--out", str(bundle)]) == 1
    out, err = capsys.readouterr()
    assert err == "" and out.count("\n") == 1
    assert out.startswith("REFUSED: the protection trigger audit_log_no_update on table audit_log is missing")
    assert out.endswith("; no checkpoint signed over it; no proof written, run agentgate audit verify\n")
    assert not bundle.exists() and _checkpoints(checkpointed) == 1


def test_prove_of_an_entry_edited_in_the_database_is_refused_exit_1(
    edited: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R59: prove answered an edited entry (tampering, which verify reports with exit 1) with exit 2."""
    out_file = edited / "entry.tlog-proof"
    capsys.readouterr()
    assert main(["audit", "prove", "3", "--out", str(out_file)]) == 1
    out, err = capsys.readouterr()
    assert err == "" and out.count("\n") == 1 and out.startswith("REFUSED: ")
    assert "entry 3 is not the entry its signed checkpoint holds" in out
    assert out.endswith("; no proof written, run agentgate audit verify\n")
    assert not out_file.exists()


def test_prove_past_the_end_of_the_log_stays_unusable_input_exit_2(
    edited: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R59: an index past the end is input the command cannot use (exit 2), not a refusal."""
    capsys.readouterr()
    assert main(["audit", "prove", "99", "--out", str(edited / "p")]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err == "agentgate: error: audit log has only 7 entries; entry 99 is past its end\n"
