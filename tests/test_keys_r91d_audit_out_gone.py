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
from _signed_log import log_environment
from test_keys_r91d_audit_out_empty_unreadable import VERBS, run_audit_out

assert log_environment  # the autouse fixture, imported to apply here


@pytest.mark.parametrize("verb", list(VERBS))
def test_an_out_file_removed_before_its_check_is_taken_as_none(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, verb: str
) -> None:
    real_open = os.open
    removed: list[bool] = []

    def remove_at_first_open(out_file: Path) -> None:
        def open_once_removed(path: Any, *args: Any, **kwargs: Any) -> int:
            if os.fspath(path) == str(out_file) and not removed:
                removed.append(True)
                out_file.unlink()
            return real_open(path, *args, **kwargs)

        monkeypatch.setattr(os, "open", open_once_removed)

    run_audit_out(tmp_path, capsys, monkeypatch, verb, remove_at_first_open)
    assert removed
