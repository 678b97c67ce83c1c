"""Review R91d of ``audit prove --out`` and ``audit report --out`` (agentgate/cli/audit.py):
before either replaces the file at FILE, it reads the start of it, to replace only what the same
verb wrote. That check was its own, opened without blocking, so a file another process held a
kernel lease on (Samba's oplocks, knfsd's delegations) was refused as "a file that could not be
checked (Resource temporarily unavailable)", where every other ``--out`` waits for the lease's
break and replaces it (tests/test_keys_r91c_leased_out.py), as docs/cli.md says of every ``--out``.
The audit verbs now read FILE through that same check (``keys.output_file_start``).

The lease is a real one, held by another process that lets go as soon as it is told to."""

from __future__ import annotations

from pathlib import Path

import pytest
from _cli import cli
from _signed_log import log_environment, signed_log
from test_keys_r91c_leased_out import _leased

assert log_environment  # the autouse fixture, imported to apply here

VERBS = {"prove": ("prove", "1"), "report": ("report",)}
STARTS = {"prove": "c2sp.org/tlog-proof@v1\n", "report": "<!DOCTYPE html>"}


@pytest.mark.parametrize("earlier", [False, True], ids=["empty", "earlier_output"])
@pytest.mark.parametrize("verb", list(VERBS))
def test_a_leased_out_file_is_checked_and_replaced_once_let_go(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], verb: str, earlier: bool
) -> None:
    db = tmp_path / "agentgate.db"
    signed_log(db, 3, after=2)
    out_file = tmp_path / "out.txt"
    out_file.write_text("", encoding="utf-8")
    command = ("audit", *VERBS[verb], "--store", str(db), "--out", str(out_file))
    if earlier:
        assert cli(capsys, *command)[0] == 0
    with _leased(out_file) as holder:
        code, out, err = cli(capsys, *command)
        assert holder.stdout is not None and holder.stdout.readline().strip() == "let go"
    assert (code, err) == (0, ""), (code, out, err)
    assert out.startswith("wrote ") and str(out_file) in out, out
    assert out_file.read_text(encoding="utf-8").startswith(STARTS[verb])
