"""A ``tasks dead-letters --tool`` or ``broker ... --broker`` name that is not UTF-8 is refused
naming the flag and the value, as ``audit show --tool`` refuses it (review R88): before, the
store's line said only that "a text value is not UTF-8 text", naming neither."""

from __future__ import annotations

from pathlib import Path

import pytest
from _cli import cli

NOT_UTF8 = b"\xff".decode("utf-8", "surrogateescape")


@pytest.mark.parametrize(
    ("argv", "flag"),
    [
        (["tasks", "dead-letters", "--tool", NOT_UTF8], "--tool"),
        (["broker", "leases", "--broker", NOT_UTF8], "--broker"),
    ],
    ids=["dead-letters-tool", "broker"],
)
def test_a_name_that_is_not_utf8_is_refused_naming_the_flag(
    argv: list[str], flag: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = str(tmp_path / "s.db")
    code, _, err = cli(capsys, "store", "init", "--store", store)
    assert code == 0, err
    code, out, err = cli(capsys, *argv, "--store", store)
    assert code == 2
    assert out == ""
    assert err.endswith(f"agentgate: error: argument {flag}: \\udcff: not UTF-8 text\n")
