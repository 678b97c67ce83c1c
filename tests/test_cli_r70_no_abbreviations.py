"""Flags are taken only as spelled in full (docs/cli.md, Conventions): argparse's default reads
a prefix (`--iss`) as the one flag it begins, so a script's shortened flag silently means
whatever it prefixes today and may mean another flag, or be refused, once one is added."""

from __future__ import annotations

import pytest
from _cli import cli

from agentgate.cli.main import build_parser


@pytest.mark.parametrize(
    ("argv", "refusal"),
    [
        (
            ["grant", "issue", "--iss", "root.key", "--to", "did:key:z", "--allow", "x", "--ttl", "1h"],
            "unrecognized arguments: --iss (did you mean '--issuer'?)",
        ),
        (
            ["grant", "revoke", "--hold", "did:key:z"],
            "unrecognized arguments: --hold (did you mean '--holder'?)",
        ),
        (
            ["audit", "verify", "--sto", "sqlite:///nowhere.db"],
            "unrecognized arguments: --sto sqlite:///nowhere.db (did you mean '--store'?)",
        ),
        (["policy", "lint", "policy.yaml", "--js"], "unrecognized arguments: --js (did you mean '--json'?)"),
        (["approval", "list", "--js"], "unrecognized arguments: --js (did you mean '--json'?)"),
    ],
)
def test_a_shortened_flag_is_refused(
    argv: list[str], refusal: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R70: every parser took a unique prefix of a flag for the flag (`grant issue --iss
    KEY` ran as `--issuer KEY`, `approval list --js` printed JSON); it is now refused with
    argparse's usage and exit 2, before anything is read; since review R74 the refusal names the
    shortened flag (not the required one it left missing) and the flag it begins."""
    code, out, err = cli(capsys, *argv)
    assert (code, out) == (2, ""), err
    assert err.startswith("usage: agentgate "), err
    assert err.splitlines()[-1] == f"agentgate: error: {refusal}", err


def test_no_parser_reads_prefixes() -> None:
    """Review R70: every parser and subparser of the whole command line is built without
    abbreviations, so a verb added later inherits it."""
    seen = 0
    pending = [build_parser()]
    while pending:
        parser = pending.pop()
        seen += 1
        assert parser.allow_abbrev is False, parser.prog
        for action in parser._actions:
            choices = getattr(action, "choices", None)
            if isinstance(choices, dict):
                pending.extend(choices.values())
    assert seen > 30
