"""Review R76: ``audit prove --out FILE`` whose write is refused (FILE changed while the proof was
made) says that the checkpoint it signed for the proof is stored in the log, as ``audit
checkpoint --out`` says it since review R74; a proof against a checkpoint already stored says
nothing of the kind. Until now its line left the reader to believe nothing was signed.

The race is made deterministic as in tests/test_audit_r74_checkpoint_out_race.py (FILE changes as
the write begins); the command runs in this process, on a real SQLite store and real files.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from _cli import cli
from _signed_log import checkpoints, log_environment
from test_audit_r73_out_refuses import _store
from test_audit_r74_checkpoint_out_race import _THEIRS, _changing_as_written

assert log_environment  # the autouse fixture, imported to apply here


@pytest.mark.parametrize("signs", [True, False])
def test_a_refused_proof_says_whether_a_new_checkpoint_is_stored(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], signs: bool
) -> None:
    db, _note = _store(tmp_path)  # two entries past its checkpoint: the first proof signs one
    if not signs:
        code, _out, err = cli(capsys, "audit", "prove", "1", "--store", str(db), "--out", str(tmp_path / "a"))
        assert code == 0, err
    out_file = tmp_path / "proof.txt"
    _changing_as_written(monkeypatch, lambda: out_file.write_text(_THEIRS, encoding="utf-8"))
    before = checkpoints(db)
    code, out, err = cli(capsys, "audit", "prove", "1", "--store", str(db), "--out", str(out_file))
    assert (code, out) == (2, ""), (code, out, err)
    assert err.startswith(f"agentgate: error: {out_file}: cannot write: ") and err.count("\n") == 1, err
    assert ("the new checkpoint is stored in the log" in err) is signs, err
    assert checkpoints(db) == before + signs
    assert out_file.read_text(encoding="utf-8") == _THEIRS
