"""Review R92b of ``grant issue --out`` (agentgate/cli/grant.py, ``_record_and_write``): where the
rename of the written token over the file at ``--out`` was refused once the grant was recorded
(``EPERM``: another user's readable empty file in a sticky directory such as /tmp, or an
immutable file), the command said only "cannot write token: Operation not permitted": the grant
stayed recorded, its token written nowhere, and the user was not told to revoke it. The error now
names the grant and says to revoke it, as for a file put there while the grant was recorded.

The refusal is made certain here, whatever the user: ``os.replace`` onto FILE fails with
``EPERM``."""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import Any

import pytest
from _cli import cli
from _raw_sqlite import query
from test_keys_r92_out_name_taken import _leftovers, empty_out, grant_argv  # noqa: F401 (the fixtures)


@pytest.mark.parametrize("force", [False, True], ids=["exclusive", "force"])
def test_a_rename_refused_once_the_grant_is_recorded_says_to_revoke_it(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    grant_argv: list[str],  # noqa: F811 (the fixture)
    force: bool,
    empty_out: Path,  # noqa: F811 (the fixture)
) -> None:
    out_file = empty_out
    real_replace = os.replace

    def refused_replace(source: Any, target: Any, *args: Any, **kwargs: Any) -> None:
        if Path(os.fspath(target)).absolute() == out_file:
            raise PermissionError(errno.EPERM, os.strerror(errno.EPERM), str(source), None, str(target))
        real_replace(source, target, *args, **kwargs)

    monkeypatch.setattr(os, "replace", refused_replace)
    code, out, err = cli(capsys, *grant_argv, *(["--force"] if force else []))
    monkeypatch.undo()
    assert (code, out) == (2, ""), (code, out, err)
    [(grant_id,)] = query(tmp_path / "st.db", "SELECT id FROM agentgate_grants")
    assert err.count("\n") == 1, err
    assert err.startswith("agentgate: error: new.tok: cannot write token: Operation not permitted; "), err
    assert f"grant {grant_id} was recorded and its token not written" in err, err
    assert f"revoke it (agentgate grant revoke {grant_id})" in err, err
    assert out_file.read_bytes() == b""
    assert _leftovers(tmp_path) == []
