"""`audit report` (agentgate/audit/report.py) never puts amounts of different budget units on one
scale or into one sum: the burn-down draws one chart per unit, each scaled to its own largest
total, and the allowed calls without an outcome give each reservation's unit and a total per unit.

Until review R62 one principal's 2 calls were drawn on the scale of its 500000 micro-dollars (a
flat line at the foot of the chart), and the open calls' reservations were summed across units
(1 call and 500000 micro-dollars held read `500001 in all`)."""

from __future__ import annotations

import re

from agentgate.audit.entry import AuditEntry
from agentgate.audit.report import render_report

ALICE = "did:key:zAlice"
CALLS, MONEY = "a" * 64, "b" * 64
"""Alice's two grant chain tips: one with a `calls` budget, one with a `usd_micros` budget."""


def _entry(index: int, kind: str, tip: str, delta: int, **fields: object) -> AuditEntry:
    return AuditEntry.build(
        index=index,
        time="2026-12-02T10:00:00.000000Z",
        kind=kind,
        principal=ALICE,
        chain_hash=tip,
        resource="tool:lookup",
        budget_delta=delta,
        **fields,
    )


def _outcome(index: int, ref: int, tip: str, unit: str, delta: int) -> AuditEntry:
    return _entry(index, "outcome", tip, delta, status="ok", ref=ref, charges={tip: {unit: delta}})


def _log() -> list[AuditEntry]:
    """Alice spends 1 call, then 500000 micro-dollars, then 1 call; then one call on each grant
    is allowed (1 call, 300000 micro-dollars reserved) and has no outcome yet."""
    return [
        _entry(0, "allow", CALLS, 1),
        _outcome(1, 0, CALLS, "calls", 1),
        _entry(2, "allow", MONEY, 500000),
        _outcome(3, 2, MONEY, "usd_micros", 500000),
        _entry(4, "allow", CALLS, 1),
        _outcome(5, 4, CALLS, "calls", 1),
        _entry(6, "allow", CALLS, 1),
        _entry(7, "allow", MONEY, 300000),
    ]


def _section(page: str, title: str) -> str:
    return page.split(f"<h2>{title}</h2>", 1)[1].split("<h2>", 1)[0]


def test_each_unit_of_the_burn_down_is_its_own_chart_on_its_own_scale() -> None:
    """Review R62: the `calls` series is drawn in a chart of its own whose scale tops at 2 (its
    last point at the chart's top, y=10), not at the foot of a 500000 micro-dollar scale; each
    chart says its unit."""
    section = _section(render_report(_log(), None, []), "Budget burn-down per principal")
    charts = section.split("<svg")[1:]
    assert len(charts) == 2, section
    by_unit = {("calls" if "spend in calls" in chart else "usd_micros"): chart for chart in charts}
    assert "cumulative spend in calls (max 2)" in by_unit["calls"]
    assert "cumulative spend in usd_micros (max 500000)" in by_unit["usd_micros"]
    for chart in charts:
        (points,) = re.findall(r'<polyline points="([^"]+)"', chart)
        assert points.split()[-1].endswith(",10.0"), points  # the series' total is its chart's top


def test_open_calls_give_each_reservations_unit_and_a_total_per_unit() -> None:
    """Review R62: the two calls without an outcome hold 1 call and 300000 micro-dollars (the
    units their grants' outcomes record), shown per row and totalled per unit, never 300001."""
    section = _section(render_report(_log(), None, []), "Allowed calls without an outcome")
    assert "2 allowed calls have no outcome" in section
    assert "300001" not in section
    assert "(1 in all, in calls; 300000 in all, in usd_micros)" in section, section
    assert "<td>1 calls</td>" in section and "<td>300000 usd_micros</td>" in section


def test_an_open_call_whose_unit_no_outcome_records_says_so() -> None:
    """Review R62: an allowed call on a grant no outcome of which records its charges (a log
    written before review R61) is totalled apart, its unit said to be unknown."""
    section = _section(
        render_report([_entry(0, "allow", CALLS, 7)], None, []), "Allowed calls without an outcome"
    )
    assert "(7 in all, in a unit no outcome records)" in section, section
    assert "<td>7 (unit not recorded)</td>" in section


def test_the_entries_table_gives_each_budget_figure_its_unit() -> None:
    """Review R62: the table's budget figure of an allow and of an outcome says its unit (the
    one the outcomes of its resource on its grant record): `300000 usd_micros`, `1 calls`, never a bare number
    that could be micro-dollars or calls; a figure whose unit is not recorded stays bare."""
    page = render_report([*_log(), _entry(8, "allow", "c" * 64, 9)], None, [])
    table = page.split("<h2>Latest entries</h2>", 1)[1]
    rows = {int(row.split("</td>", 1)[0]): row for row in table.split("<tr><td>")[1:]}
    assert "<td>300000 usd_micros</td>" in rows[7] and "<td>1 calls</td>" in rows[6]
    assert "<td>500000 usd_micros<br><small>charged" in rows[3]
    assert "<td>9</td>" in rows[8]


def test_an_allows_unit_is_learnt_per_grant_and_resource() -> None:
    """Review R62: on a chain whose tip has a `tokens` budget under a root's `calls` budget, a
    tool call's figure is in calls (a tool costs nothing in tokens) and a model call's in tokens:
    an open call is given the unit of the outcomes of the same resource on its grant, never
    another resource's."""
    tip = "d" * 64

    def call(index: int, resource: str, delta: int, kind: str = "allow", **fields: object) -> AuditEntry:
        return AuditEntry.build(
            index=index,
            time="2026-12-02T10:00:00.000000Z",
            kind=kind,
            principal=ALICE,
            chain_hash=tip,
            resource=resource,
            budget_delta=delta,
            **fields,
        )

    log = [
        call(0, "tool:lookup", 1),
        call(1, "tool:lookup", 1, kind="outcome", status="ok", ref=0, charges={CALLS: {"calls": 1}}),
        call(2, "model:m", 50),
        call(
            3,
            "model:m",
            50,
            kind="outcome",
            status="ok",
            ref=2,
            charges={tip: {"tokens": 50}, CALLS: {"calls": 1}},
        ),
        call(4, "model:m", 40),
        call(5, "tool:lookup", 1),
    ]
    section = _section(render_report(log, None, []), "Allowed calls without an outcome")
    assert "(1 in all, in calls; 40 in all, in tokens)" in section, section
