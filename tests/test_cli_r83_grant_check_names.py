"""Review R83: ``grant check`` reads ``--tool`` and ``--model`` alike: a name holding bytes that
are not UTF-8 is exit 2 naming the flag, before any file is read (it failed while the invocation
was signed, with a codec message naming neither flag and a position in an internal payload)."""

from __future__ import annotations

import pytest

from agentgate.cli.main import main


@pytest.mark.parametrize("flag", ["--tool", "--model"])
def test_a_name_not_utf8_is_exit_2_naming_the_flag(flag: str, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["grant", "check", "missing.tok", "--as", "missing.key", "--trust", "missing.pub"]
    with pytest.raises(SystemExit) as stop:
        main([*argv, flag, "m\udcff"])
    out, err = capsys.readouterr()
    assert stop.value.code == 2 and out == ""
    assert err.splitlines()[-1] == f"agentgate: error: argument {flag}: m\\udcff: not UTF-8 text", err
