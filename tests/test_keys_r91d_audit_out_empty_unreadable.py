"""Review R91d of ``audit prove --out`` and ``audit report --out`` (agentgate/cli/audit.py): an
empty file at FILE that the user may not read (another user's, mode 0600, in a directory the user
may write to) was refused as "a file that cannot be read (it may hold a private key)", where every
other ``--out`` replaces it (nothing in it to lose) and docs/cli.md says both verbs replace FILE
when it is empty. It is now replaced, looked at again just before the rename (no lock can be held
on a file that cannot be opened); one that is not empty is still refused
(tests/test_audit_r91c_out_unchecked_wording.py).

The refusal is made certain here, whatever the user: every ``os.open`` of FILE fails with
``EACCES``."""

from __future__ import annotations

import errno
from collections.abc import Callable
from pathlib import Path

import pytest
from _cli import cli
from _signed_log import log_environment, signed_log
from _unreadable_file import fail_reading

assert log_environment  # the autouse fixture, imported to apply here

VERBS = {"prove": ("prove", "1"), "report": ("report",)}
STARTS = {"prove": "c2sp.org/tlog-proof@v1\n", "report": "<!DOCTYPE html>"}


def run_audit_out(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    verb: str,
    interfere: Callable[[Path], None],
) -> Path:
    """Run ``audit VERB --out FILE`` on a signed log, FILE empty and ``interfere(FILE)`` done just
    before; check that it wrote what VERB writes, and return FILE (used by
    tests/test_keys_r91d_audit_out_gone.py)."""
    db = tmp_path / "agentgate.db"
    signed_log(db, 3, after=2)
    out_file = tmp_path / "out.txt"
    out_file.write_text("", encoding="utf-8")
    interfere(out_file)
    code, out, err = cli(capsys, "audit", *VERBS[verb], "--store", str(db), "--out", str(out_file))
    monkeypatch.undo()
    assert (code, err) == (0, ""), (code, out, err)
    assert out_file.read_text(encoding="utf-8").startswith(STARTS[verb])
    return out_file


@pytest.mark.parametrize("verb", list(VERBS))
def test_an_empty_out_file_the_user_may_not_read_is_replaced(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, verb: str
) -> None:
    run_audit_out(
        tmp_path,
        capsys,
        monkeypatch,
        verb,
        lambda out_file: fail_reading(monkeypatch, out_file, "open", errno.EACCES),
    )
