"""A name given only to compare (``audit show --principal/--tool``, ``audit verify-proof
--origin``) must be UTF-8 text, as every name argument must (docs/cli.md, Standard streams)."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentgate.cli.main import main

NOT_UTF8 = "ab\udcff"  # the argument $'ab\xff', as Python's argv carries it


@pytest.fixture
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A store whose log holds one entry, and a proof bundle of it (p.bundle)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("AGENTGATE_STORE", str(tmp_path / "store.db"))
    for argv in (
        ["keys", "new", "root", "--dir", "k"],
        ["store", "init"],
        ["grant", "issue", "--issuer", "k/root.key", "--to", "k/root.pub", "--allow", "tool:x", "--ttl", "1h", "--out", "a.tok"],
        ["grant", "revoke", "a.tok"],
        ["audit", "prove", "0", "--out", "p.bundle"],
    ):  # fmt: skip
        assert main(argv) == 0, argv
    return tmp_path


@pytest.mark.parametrize(
    "argv",
    [
        ["audit", "show", "--tool", NOT_UTF8],
        ["audit", "show", "--principal", NOT_UTF8],
        ["audit", "verify-proof", "p.bundle", "--key", "log.pub", "--origin", NOT_UTF8],
    ],
    ids=["show-tool", "show-principal", "verify-proof-origin"],
)
def test_a_name_that_is_not_utf8_is_exit_2(
    world: Path, capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    """Review R59: such a name matched nothing (audit show listed nothing, exit 0; verify-proof said INVALID, exit 1)."""
    capsys.readouterr()
    with pytest.raises(SystemExit) as exited:  # argparse's usage line, then one error line
        main(argv)
    assert exited.value.code == 2
    out, err = capsys.readouterr()
    assert out == "" and err.splitlines()[-1].endswith(": ab\\udcff: not UTF-8 text"), err
