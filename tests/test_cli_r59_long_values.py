"""An error line that quotes a value of 10,000 characters still says what is wrong with it."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentgate.cli.main import main

LONG = "a" * 10_000


@pytest.mark.parametrize(
    ("argv", "why"),
    [
        (["grant", "inspect", LONG], ": cannot read token: File name too long"),
        (["policy", "lint", LONG], ": cannot read policy: File name too long"),
        (["audit", "verify", "--store", LONG], ": File name too long"),
        (["tasks", "breakers", "--store", f"sqlite:///{LONG}"], ": File name too long"),
    ],
    ids=["token-file", "policy-file", "store-path", "store-url"],
)
def test_an_error_quoting_a_very_long_value_keeps_its_reason(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    argv: list[str],
    why: str,
) -> None:
    """Review R59: the line was cut at 2,000 characters of the value alone, and the reason was lost."""
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1, err[-300:]
    assert err.startswith("agentgate: error: ") and err.endswith(f"{why}\n"), err[-300:]
    assert "characters not shown) ..." in err and len(err) < 2100


def test_an_error_line_of_2000_characters_or_so_is_not_cut(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Review R59: only a line too long loses its middle; a path of 1,900 characters is shown whole."""
    monkeypatch.chdir(tmp_path)
    path = "/".join(["b" * 200] * 9) + "/" + "c" * 90  # 1,899 characters: no file there
    assert main(["grant", "inspect", path]) == 2
    err = capsys.readouterr().err
    assert err == f"agentgate: error: {path}: cannot read token: No such file or directory\n"
