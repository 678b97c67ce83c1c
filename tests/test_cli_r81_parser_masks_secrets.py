"""Review R81: the command line's parser quotes back what it refuses, and a store's password was
shown in clear there, the one place every other error masks it (docs/operations.md): ``--store``
given to a verb that takes none (``grant check``), or a URL where a command is expected. Rule:
the refusal is the same (exit 2, usage, one line), with the password as ``***``."""

from __future__ import annotations

import pytest
from _cli import cli

SECRET = "APPSECRET"


@pytest.mark.parametrize(
    "argv",
    [
        ["grant", "check", "t.tok", "--as", "a.key", "--trust", "r.pub", "--tool", "x",
         "--store", f"postgresql://app:{SECRET}@127.0.0.1:5432/agentgate"],
        ["grant", "check", "t.tok", "--as", "a.key", "--trust", "r.pub", "--tool", "x",
         "--store", f"POSTGRES://app:{SECRET}@db/agentgate?sslmode=require"],
        ["grant", "check", "t.tok", "--as", "a.key", "--trust", "r.pub", "--tool", "x",
         "--store", f"host=db password={SECRET} dbname=agentgate"],
        [f"postgresql://app:{SECRET}@db/agentgate"],
        ["keys", "new", "k", f"postgresql://db/agentgate?password={SECRET}"],
    ],
    ids=["store_to_a_verb_without_it", "scheme_in_capitals", "conninfo", "url_as_command", "url_parameter"],
)  # fmt: skip
def test_a_refused_command_line_never_shows_a_store_password(
    capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    code, out, err = cli(capsys, *argv)
    assert code == 2 and out == ""
    last = err.splitlines()[-1]
    assert last.startswith("agentgate: error: ") and "***" in last, err
    assert SECRET not in err
