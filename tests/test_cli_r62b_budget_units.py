"""`--budget AMOUNT:UNIT` on `agentgate grant issue` and `grant delegate` names a unit the Gate
meters (`usd_micros`, `tokens`, `calls`: the policy schema's closed set) or is refused.

Until review R62 `--budget 5:usd` (a slip for `usd_micros`) made a grant in a unit no policy
uses and the Gate cannot meter: every call on it was refused later ("cannot be metered"), far
from the typo. The token format stays open (docs/token-format.md): only the CLI, which writes the
grant for a person, holds the unit to what agentgate charges."""

from __future__ import annotations

from pathlib import Path
from typing import get_args

import pytest
from test_cli_grant import cli, env

from agentgate.authority import Budget, issue
from agentgate.authority._grant import BUDGET_UNITS
from agentgate.gate._costs import _METERED
from agentgate.keys import load_signing_key
from agentgate.policy._schema import BudgetUnit

__all__ = ["env"]  # the fixture, imported: keys root, alice and bob under k/, a store in tmp_path

ISSUE = ("grant", "issue", "--issuer", "k/root.key", "--to", "k/alice.pub",
         "--allow", "tool:x", "--ttl", "1h")  # fmt: skip
DELEGATE = ("grant", "delegate", "p.tok", "--as", "k/alice.key", "--to", "k/bob.pub",
            "--allow", "tool:x", "--ttl", "30m", "--out", "c.tok")  # fmt: skip


@pytest.mark.parametrize("unit", ["usd", "USD", "micro_usd", "dollars", "call", "token", "x" * 5000])
def test_grant_issue_refuses_a_unit_agentgate_does_not_meter(
    env: Path, capsys: pytest.CaptureFixture[str], unit: str
) -> None:
    """Review R62: `--budget 5:usd` (and a capitalised, singular or absurd unit) is refused on
    one line naming the units agentgate meters, exit 2, no token written."""
    code, out, err = cli(capsys, *ISSUE, "--budget", f"5:{unit}", "--out", "t.tok")
    assert code == 2 and out == "" and not (env / "t.tok").exists(), err
    assert len(err.splitlines()) == 1 and err.startswith("agentgate: error: budget '5:"), err
    assert "use usd_micros, tokens or calls" in err and len(err) < 300, err


@pytest.mark.parametrize("budget", ["5", "5:usd_micros", "5:tokens", "5:calls"])
def test_grant_issue_takes_each_metered_unit(
    env: Path, capsys: pytest.CaptureFixture[str], budget: str
) -> None:
    """Review R62: the three metered units, and the default, still make a grant."""
    assert cli(capsys, *ISSUE, "--budget", budget, "--out", "t.tok")[0] == 0 and (env / "t.tok").exists()


def test_grant_delegate_refuses_an_unmetered_unit_before_the_unit_change(
    env: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R62: `grant delegate --budget 5:usd` under a `usd_micros` parent says the unit is
    not metered (exit 2), not only that it differs from the parent's; `5:tokens` under it is
    the documented `budget_unit_changed` denial (exit 1), `5:usd_micros` is delegated."""
    assert cli(capsys, *ISSUE, "--budget", "1000", "--max-depth", "1", "--out", "p.tok")[0] == 0
    code, out, err = cli(capsys, *DELEGATE, "--budget", "5:usd")
    assert code == 2 and out == "" and not (env / "c.tok").exists()
    assert "budget '5:usd': unit 'usd' is not one agentgate meters; use usd_micros, tokens or calls" in err
    code, out, err = cli(capsys, *DELEGATE, "--budget", "5:tokens")
    assert code == 1 and "budget_unit_changed" in out + err and not (env / "c.tok").exists()
    assert cli(capsys, *DELEGATE, "--budget", "5:usd_micros")[0] == 0 and (env / "c.tok").exists()


def test_a_parents_unmetered_budget_is_kept_by_a_delegation_without_budget(
    env: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R62: a token made by the library in another unit (the format allows it) is still
    delegated by the CLI when no `--budget` is given: the refusal is of what a person types.
    Review R63: with a warning naming the unit, which `grant check` denies and the Gate refuses
    (it was made without a word)."""
    assert cli(capsys, *ISSUE, "--out", "x.tok")[0] == 0  # makes the store grant delegate needs
    root, alice = load_signing_key(env / "k" / "root.key"), load_signing_key(env / "k" / "alice.key")
    chain = issue(root, alice.public, ["tool:x"], ttl=3600, budget=Budget(5, "gpu_seconds"), max_depth=1)
    (env / "p.tok").write_text(chain.token + "\n")
    code, _out, err = cli(capsys, *DELEGATE)
    assert code == 0 and (env / "c.tok").exists(), err
    warnings = [line for line in err.splitlines() if line.startswith("agentgate: warning: ")]
    assert len(warnings) == 1 and "'gpu_seconds'" in warnings[0], err
    assert warnings[0].startswith(
        "agentgate: warning: authority_chain_opacity budget_unit_not_metered [budget]:"
    ), err


def test_the_cli_units_are_the_policy_schemas_and_the_gates() -> None:
    """Review R62: the units `--budget` takes are exactly those a policy may name and the Gate
    charges (its `micro_usd` is an undocumented alias of `usd_micros`): three lists that must
    not drift apart."""
    assert set(BUDGET_UNITS) == set(get_args(BudgetUnit)) == _METERED - {"micro_usd"}
