"""Review R91c of ``audit prove --out`` and ``audit report --out`` (agentgate/cli/audit.py): before
either replaces the file at FILE, it reads the start of it (``_file_start``) to replace only what
the same verb wrote. A file it could not read was refused as ``cannot read what is there: ERROR``,
where every other ``--out`` (``replace_file``) and docs/cli.md say ``a file that could not be
checked (ERROR) is there`` (and, for a refused read, ``a file that cannot be read (it may hold a
private key) is there``). The audit verbs now say the same. An open that would block is no
longer refused: it is a lease's break, waited for as by every ``--out`` since review R91d
(tests/test_keys_r91d_audit_out_lease.py).

The errors are made certain here: ``os.open`` or ``os.read`` of FILE fails with them."""

from __future__ import annotations

import errno
from pathlib import Path

import pytest
from _cli import cli
from _signed_log import log_environment, signed_log
from _unreadable_file import fail_reading

assert log_environment  # the autouse fixture, imported to apply here

VERBS = {"prove": ("prove", "1"), "report": ("report",)}


@pytest.mark.parametrize("call", ["open", "read"])
@pytest.mark.parametrize(
    ("error", "said"),
    [
        (errno.EIO, "a file that could not be checked (Input/output error) is there"),
        (errno.ESTALE, "a file that could not be checked (Stale file handle) is there"),
        (errno.EACCES, "a file that cannot be read (it may hold a private key) is there"),
    ],
    ids=["io_error", "stale_handle", "refused_read"],
)
@pytest.mark.parametrize("verb", list(VERBS))
def test_a_file_that_could_not_be_read_is_refused_as_every_out_refuses_it(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    verb: str,
    call: str,
    error: int,
    said: str,
) -> None:
    db = tmp_path / "agentgate.db"
    signed_log(db, 3, after=2)
    out_file = tmp_path / "out.txt"
    out_file.write_text("kept\n", encoding="utf-8")
    fail_reading(monkeypatch, out_file, call, error)
    code, out, err = cli(capsys, "audit", *VERBS[verb], "--store", str(db), "--out", str(out_file))
    monkeypatch.undo()
    assert (code, out) == (2, ""), (code, out, err)
    assert err.strip() == (
        f"agentgate: error: {out_file}: cannot write: {said}; refusing to replace it (name another file)"
    )
    assert out_file.read_text(encoding="utf-8") == "kept\n"
