"""Review R88d: ``policy explain --as`` and ``--tool`` took a value that is not UTF-8 as a name
(``given_text``), and decided the call for it: a DENY verdict, exit 1, for a principal or tool no
one can name. Both are only compared, so they are refused as ``audit show --tool`` and ``tasks
dead-letters --tool`` refuse such a value (``given_utf8``): exit 2 naming the flag, nothing
decided (docs/cli.md)."""

from __future__ import annotations

from pathlib import Path

import pytest
from _cli import cli

NOT_UTF8 = b"\xff".decode("utf-8", "surrogateescape")
POLICY = str(Path(__file__).resolve().parent.parent / "policies" / "gpu_platform.yaml")


@pytest.mark.parametrize(
    ("argv", "flag"),
    [
        (["--as", NOT_UTF8, "--tool", "x"], "--as"),
        (["--as", "x", "--tool", NOT_UTF8], "--tool"),
    ],
    ids=["as", "tool"],
)
def test_explain_refuses_a_name_that_is_not_utf8(
    argv: list[str], flag: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = cli(capsys, "policy", "explain", POLICY, *argv)
    assert code == 2
    assert out == ""
    assert err.endswith(f"agentgate: error: argument {flag}: \\udcff: not UTF-8 text\n")


def test_explain_still_decides_for_utf8_names(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = cli(capsys, "policy", "explain", POLICY, "--as", "nobody-\u00e9", "--tool", "x")
    assert code == 1
    assert out.startswith("DENY: nobody-\u00e9 calling tool:x")
