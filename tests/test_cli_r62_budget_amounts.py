"""`--budget AMOUNT[:UNIT]` on `agentgate grant issue` and `grant delegate` (docs/cli.md, AMOUNT),
given what a hurried or hostile hand types: each is refused on one line, exit 2, nothing written,
or has its documented meaning (a child's budget in another unit than its parent's is a
`scope_creep budget_unit_changed` denial, exit 1).

Review R62, a hostile pass: these held already; the cases keep them held."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_cli_grant import cli, env

__all__ = ["env"]  # the fixture, imported: keys root, alice and bob under k/, a store in tmp_path

ISSUE = ("grant", "issue", "--issuer", "k/root.key", "--to", "k/alice.pub",
         "--allow", "tool:x", "--ttl", "1h")  # fmt: skip


@pytest.mark.parametrize(
    ("budget", "said"),
    [
        ("1e3", "budget '1e3': the amount must be a whole, non-negative number"),
        ("0x10", "budget '0x10': the amount must be a whole, non-negative number"),
        ("\uff11\uff10\uff10", "budget '\uff11\uff10\uff10': the amount must be a whole"),  # full-width 100
        ("\u0663", "the amount must be a whole"),  # an Arabic-Indic digit, which int() would read
        ("100 ", "budget '100 ': the amount must be a whole"),
        (" 100", "budget ' 100': the amount must be a whole"),
        ("100\n", "the amount must be a whole"),
        ("1_000", "budget '1_000': the amount must be a whole"),
        ("-0", "budget '-0': the amount must be a whole"),
        ("+5", "budget '+5': the amount must be a whole"),
        ("9223372036854775808", "the amount is too large; the largest is 9223372036854775807"),
        ("5 USD", "budget '5 USD': the amount must be a whole"),
        ("5:USD", "budget '5:USD': unit 'USD' is not one agentgate meters; use usd_micros, tokens or calls"),
        ("5:calls ", "unit 'calls ' is not one agentgate meters"),
        ("5:tokens:x", "unit 'tokens:x' is not one agentgate meters"),
        ("100:", "budget '100:': name the unit after ':'"),
        (":tokens", "budget ':tokens': the amount must be a whole"),
        ("", "budget '': the amount must be a whole"),
    ],
)
def test_a_hostile_budget_is_one_line_exit_2_nothing_written(
    env: Path, capsys: pytest.CaptureFixture[str], budget: str, said: str
) -> None:
    """Review R62: exponents, hexadecimal, full-width and other non-ASCII digits, spaces, signs
    (`-0` too), 2**63 and a unit glued with a space or in capitals are refused: exit 2, one
    `agentgate: error:` line naming the value, no token written; never read as a number."""
    code, out, err = cli(capsys, *ISSUE, "--budget", budget, "--out", "t.tok")
    assert code == 2 and out == "" and not (env / "t.tok").exists()
    assert len(err.splitlines()) == 1 and err.startswith("agentgate: error: ") and said in err, err


def test_a_child_budget_in_another_unit_than_its_parents_is_denied(
    env: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R62: `--budget 5` (usd_micros) or `5:calls` under a parent's tokens budget is the
    documented `budget_unit_changed` denial (exit 1), no token written; `5:tokens` is delegated."""
    assert cli(capsys, *ISSUE, "--budget", "1000:tokens", "--max-depth", "1", "--out", "p.tok")[0] == 0
    delegate = ("grant", "delegate", "p.tok", "--as", "k/alice.key", "--to", "k/bob.pub")
    delegate += ("--allow", "tool:x", "--ttl", "30m", "--out", "c.tok")
    for budget, unit in (("5", "usd_micros"), ("5:usd_micros", "usd_micros"), ("5:calls", "calls")):
        code, out, err = cli(capsys, *delegate, "--budget", budget)
        assert code == 1 and not (env / "c.tok").exists(), (budget, err)
        assert "scope_creep budget_unit_changed [budget]" in out + err
        assert f"child budget is in {unit}, the parent's in tokens" in out + err
    assert cli(capsys, *delegate, "--budget", "5:tokens")[0] == 0 and (env / "c.tok").exists()
