"""Review R91d of ``audit prove --out`` and ``audit report --out`` (agentgate/cli/audit.py):
before either replaces the file at FILE, it reads the start of it, to replace only what the same
verb wrote. A file removed between the look at FILE and that read was refused as "a file that
could not be checked (No such file or directory) is there", though nothing was there, where every
other ``--out`` takes a file gone as nothing to lose and writes. The audit verbs now read FILE
through that same check (``keys.output_file_start``), and write.

The removal is made certain here: the first open of FILE removes it first, as another process
would at that moment."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from _cli import cli
from _signed_log import log_environment, signed_log

assert log_environment  # the autouse fixture, imported to apply here

VERBS = {"prove": ("prove", "1"), "report": ("report",)}
STARTS = {"prove": "c2sp.org/tlog-proof@v1\n", "report": "<!DOCTYPE html>"}


@pytest.mark.parametrize("verb", list(VERBS))
def test_an_out_file_removed_before_its_check_is_taken_as_none(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, verb: str
) -> None:
    db = tmp_path / "agentgate.db"
    signed_log(db, 3, after=2)
    out_file = tmp_path / "out.txt"
    out_file.write_text("", encoding="utf-8")
    real_open = os.open
    removed: list[bool] = []

    def open_once_removed(path: Any, *args: Any, **kwargs: Any) -> int:
        if os.fspath(path) == str(out_file) and not removed:
            removed.append(True)
            out_file.unlink()
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(os, "open", open_once_removed)
    code, out, err = cli(capsys, "audit", *VERBS[verb], "--store", str(db), "--out", str(out_file))
    monkeypatch.undo()
    assert removed
    assert (code, err) == (0, ""), (code, out, err)
    assert out_file.read_text(encoding="utf-8").startswith(STARTS[verb])
