"""`agentgate audit show` (agentgate/cli/audit.py) shows an outcome's `charges` on its text line,
through `charged_text`, as `audit explain` and `audit report` show them.

Until review R62 `audit show`'s line gave `budget_delta` alone: an overrun across a chain read
`50`, with nothing to say that the tip's budget was charged 30 and the root's 50."""

from __future__ import annotations

import pytest
from test_budget_r61b_audit_charges import ROOT, TIP, overran

from agentgate.cli.main import main

__all__ = ["overran"]  # the fixture, imported: a log with an allow and its overrunning outcome


def test_show_gives_an_outcomes_charges_beside_its_budget_delta(
    overran: tuple[int, int], capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R62: the outcome's line in `audit show` carries `(charged ID12: N UNIT; ...)` after
    its budget delta, in `audit explain`'s words; the allow's line, without charges, is as before."""
    allow, outcome = overran
    assert main(["audit", "show"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2
    charged = f"(charged {ROOT[:12]}: 50 usd_micros; {TIP[:12]}: 1 calls; {TIP[:12]}: 30 usd_micros)"
    assert lines[outcome].startswith(f"{outcome:>6}  ")
    assert f" 50 {charged}  overran the usd_micros budget by 20" in lines[outcome], lines[outcome]
    assert lines[allow].startswith(f"{allow:>6}  ") and "charged" not in lines[allow]
    assert lines[allow].endswith("       10  ")


def test_show_json_is_unchanged(overran: tuple[int, int], capsys: pytest.CaptureFixture[str]) -> None:
    """Review R62: `--json` lines stay the logged bytes (the charges are in them already)."""
    _allow, outcome = overran
    assert main(["audit", "show", "--json"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert '"charges":{' in lines[outcome] and "(charged" not in lines[outcome]
