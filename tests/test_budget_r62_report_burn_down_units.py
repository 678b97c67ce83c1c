"""The report's budget burn-down (agentgate/audit/report.py) keeps each unit apart: a principal
that spent 1 of a `calls` budget and 500000 of a `usd_micros` one did not spend 500001 of
anything.

Until review R62 the burn-down summed every `budget_delta` of a principal into one figure, its
legend `500001 spent`, whatever the units; the unit of an outcome's `budget_delta` is known from
its `charges` (since review R61), and a figure whose unit the entry does not record says so."""

from __future__ import annotations

from pathlib import Path

from test_gate_once import _new, _policy_text

from agentgate.audit.entry import AuditEntry
from agentgate.audit.report import render_report
from agentgate.capabilities import Call
from agentgate.gate import Gate
from agentgate.policy import parse_policy
from agentgate.store import SQLiteStore

ALICE = "did:key:zAlice"


def _outcome(index: int, tip: str, delta: int, charges: dict[str, dict[str, int]] | None) -> AuditEntry:
    return AuditEntry.build(
        index=index,
        time="2026-12-02T10:00:00.000000Z",
        kind="outcome",
        principal=ALICE,
        chain_hash=tip,
        status="ok",
        ref=0,
        budget_delta=delta,
        charges=charges,
    )


def test_a_principals_spend_in_two_units_is_two_figures_never_one_sum() -> None:
    """Review R62: 1 call and 500000 micro-dollars of one principal show as `1 calls spent` and
    `500000 usd_micros spent` (until now `500001 spent`); a second call adds to its unit's."""
    a, b = "a" * 64, "b" * 64
    page = render_report(
        [
            _outcome(0, a, 1, {a: {"calls": 1}}),
            _outcome(1, b, 500000, {b: {"usd_micros": 500000}}),
            _outcome(2, a, 1, {a: {"calls": 1}}),
        ],
        None,
        [],
    )
    assert f"<code>{ALICE}</code>: 2 calls spent" in page
    assert f"<code>{ALICE}</code>: 500000 usd_micros spent" in page
    assert "500001" not in page and "500002" not in page


def test_a_figure_whose_unit_is_not_recorded_is_kept_apart_and_says_so() -> None:
    """Review R62: an outcome without `charges` (written before review R61, or that charged
    nothing it could name) is summed apart from those with a known unit, its figure marked."""
    a = "a" * 64
    page = render_report([_outcome(0, a, 3, {a: {"calls": 3}}), _outcome(1, a, 40, None)], None, [])
    assert f"<code>{ALICE}</code>: 3 calls spent" in page
    assert f"<code>{ALICE}</code>: 40 spent (unit not recorded)" in page


def test_a_gates_outcome_is_summed_in_its_budgets_unit(tmp_path: Path) -> None:
    """Review R62: the outcome a Gate writes for a call on a `calls` budget is shown as
    `1 calls spent` on the page of its real log."""
    keys, path, agent = _new(tmp_path)
    with Gate(parse_policy(_policy_text(keys), source="once.yaml"), SQLiteStore(path)) as gate:
        auth = gate.authorize(agent, Call.tool("lookup", {"id": "o-1"}))
        gate.run(auth, lambda: None)
        gate.flush()
        page = render_report(gate.audit.entries(), None, [])
    assert f"<code>{agent.did}</code>: 1 calls spent" in page
