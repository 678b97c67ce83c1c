"""``agentgate audit explain`` and ``audit report`` show an outcome's ``charges`` (what each grant
of the chain was charged, by unit; docs/audit-format.md) where they show its ``budget_delta``.

Until review R61 both showed ``budget_delta`` alone: an auditor reading an overrun across a chain
saw one figure, and had to read ``audit show --json`` to learn what each budget was charged.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from test_audit_cli import audit_cli_store

from agentgate.cli.main import main
from agentgate.store import SQLiteStore
from agentgate.store.audit import AuditLog, open_log_key

ROOT, TIP = "a" * 64, "b" * 64


@pytest.fixture
def overran(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[int, int]:
    """A log with an allow on chain tip ``TIP`` and its outcome, whose cost (50) overran the tip's
    budget (charged 30) but not the root's (charged 50); their indexes."""
    db = audit_cli_store(tmp_path, monkeypatch)
    with SQLiteStore(db) as store:
        log = AuditLog(store, open_log_key(store))
        allow = log.append(
            {
                "kind": "allow",
                "principal": "did:key:zAlice",
                "chain_hash": TIP,
                "resource": "model:small",
                "budget_delta": 10,
            }
        )
        outcome = log.append(
            {
                "kind": "outcome",
                "principal": "did:key:zAlice",
                "chain_hash": TIP,
                "resource": "model:small",
                "status": "ok",
                "ref": allow,
                "budget_delta": 50,
                "reasons": ["overran the usd_micros budget by 20; the budget is exhausted"],
                "charges": {ROOT: {"usd_micros": 50}, TIP: {"calls": 1, "usd_micros": 30}},
            }
        )
    return allow, outcome


def test_explain_shows_each_grants_charge_of_an_outcome(
    overran: tuple[int, int], capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R61: explain of the outcome lists, under its budget delta, what each grant was charged."""
    _allow, outcome = overran
    assert main(["audit", "explain", str(outcome)]) == 0
    out = capsys.readouterr().out
    assert "├── budget delta: 50\n" in out
    assert f"│   ├── charged grant {ROOT}: 50 usd_micros\n" in out
    assert f"│   ├── charged grant {TIP}: 1 calls\n" in out  # one line a unit, the tree's last one closing
    assert f"│   └── charged grant {TIP}: 30 usd_micros\n" in out


def test_explain_of_an_allow_shows_its_outcomes_charges(
    overran: tuple[int, int], capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R61: explain of the allow shows its outcome's charges on the related entry's line."""
    allow, outcome = overran
    assert main(["audit", "explain", str(allow)]) == 0
    out = capsys.readouterr().out
    assert (
        f"├── related entry {outcome}: outcome ok budget 50 "
        f"(charged {ROOT[:12]}: 50 usd_micros; {TIP[:12]}: 1 calls; {TIP[:12]}: 30 usd_micros)\n"
    ) in out


def test_explain_of_an_outcome_without_charges_is_as_before(
    overran: tuple[int, int], capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R61: an entry without charges (an allow, an entry written before R61) shows no line."""
    allow, _outcome = overran
    assert main(["audit", "explain", str(allow)]) == 0
    assert "charged grant" not in capsys.readouterr().out


def test_report_shows_each_grants_charge_in_the_entries_table(
    overran: tuple[int, int], tmp_path: Path
) -> None:
    """Review R61: the report's table shows the outcome's charges beside its budget figure."""
    out = tmp_path / "r.html"
    assert main(["audit", "report", "--out", str(out)]) == 0
    page = out.read_text()
    assert (
        f"<td>50<br><small>charged {ROOT[:12]}: 50 usd_micros; {TIP[:12]}: 1 calls; {TIP[:12]}: 30 usd_micros</small></td>"
        in page
    )
    assert "<td>10</td>" in page  # the allow: no charges, its figure alone
