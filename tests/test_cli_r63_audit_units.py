"""`agentgate audit show` and `audit explain` give a budget figure its unit where the log records
it, as `audit report`'s entries table does (`budget_figure` in agentgate/audit/report.py, shared):
an outcome's from its `charges`, an allow's from its outcome's; bare where neither says it.

Until review R63 both printed the figure bare (`300000`: micro-dollars? calls?), while the
report wrote `300000 usd_micros`."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_audit_cli import audit_cli_store

from agentgate.audit.report import render_report
from agentgate.cli.main import main
from agentgate.store import SQLiteStore
from agentgate.store.audit import AuditLog, open_log_key

TIP, OTHER = "c" * 64, "d" * 64


@pytest.fixture
def log(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Entries 0..5: a tool call reserved 1 (0) and its outcome charged 1 calls (2), a model call
    reserved 300000 (1) and its outcome charged 250000 usd_micros (3), an allow with no outcome
    (4), and a spend entry (5), whose unit the log does not record."""
    db = audit_cli_store(tmp_path, monkeypatch)
    who = {"principal": "did:key:zAlice"}
    with SQLiteStore(db) as store:
        audit = AuditLog(store, open_log_key(store))
        tool = audit.append(
            {"kind": "allow", **who, "chain_hash": TIP, "resource": "tool:x", "budget_delta": 1}
        )
        model = audit.append(
            {"kind": "allow", **who, "chain_hash": OTHER, "resource": "model:m", "budget_delta": 300000}
        )
        audit.append(
            {"kind": "outcome", **who, "chain_hash": TIP, "resource": "tool:x", "status": "ok", "ref": tool,
             "budget_delta": 1, "charges": {TIP: {"calls": 1}}}
        )  # fmt: skip
        audit.append(
            {"kind": "outcome", **who, "chain_hash": OTHER, "resource": "model:m", "status": "ok", "ref": model,
             "budget_delta": 250000, "charges": {OTHER: {"usd_micros": 250000}}}
        )  # fmt: skip
        audit.append({"kind": "allow", **who, "chain_hash": TIP, "resource": "tool:y", "budget_delta": 7})
        audit.append({"kind": "spend", **who, "chain_hash": TIP, "resource": "tool:x", "budget_delta": 5})
    return db


def _show(capsys: pytest.CaptureFixture[str], *flags: str) -> dict[int, str]:
    assert main(["audit", "show", *flags]) == 0
    return {int(line.split()[0]): line for line in capsys.readouterr().out.splitlines()}


def test_show_gives_each_budget_figure_its_unit(log: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Review R63: show's allow line names the unit its outcome records (`300000 usd_micros`,
    `1 calls`), the outcome's from its charges; an allow without an outcome and a spend entry stay
    bare, as in the report."""
    lines = _show(capsys)
    assert " 300000 usd_micros  " in lines[1] and " 1 calls  " in lines[0], lines
    assert " 1 calls (charged cccccccccccc: 1 calls)" in lines[2], lines[2]
    assert " 250000 usd_micros (charged dddddddddddd: 250000 usd_micros)" in lines[3], lines[3]
    assert lines[4].endswith("        7  ") and lines[5].endswith("        5  "), lines


def test_show_finds_an_allows_unit_through_filters_and_last(
    log: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R63: the outcome that says an allow's unit counts though a filter or --last leaves
    it out of the listing."""
    lines = _show(capsys, "--kind", "allow")
    assert sorted(lines) == [0, 1, 4] and " 300000 usd_micros  " in lines[1], lines
    lines = _show(capsys, "--last", "6", "--tool", "m")
    assert sorted(lines) == [1, 3] and " 300000 usd_micros  " in lines[1], lines


def test_show_writes_the_figures_the_report_writes(log: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Review R63: one formatter: each of show's figures is the report table's for that entry."""
    lines = _show(capsys)
    with SQLiteStore(log) as store:
        entries = list(AuditLog(store, open_log_key(store)).entries())
    table = render_report(entries, None, []).split("<h2>Latest entries</h2>", 1)[1]
    rows = {int(row.split("</td>", 1)[0]): row for row in table.split("<tr><td>")[1:]}
    for index, row in rows.items():
        figure = row.split("</td><td>")[5].split("<br>", 1)[0]
        assert f" {figure}  " in lines[index] or f" {figure} (charged" in lines[index], (figure, lines[index])


def test_explain_gives_the_budget_delta_and_a_related_figure_their_units(
    log: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R63: explain's `budget delta:` and a related entry's `budget N` name the unit: an
    allow's from its outcome, an outcome's from its charges; an allow without an outcome is bare."""
    assert main(["audit", "explain", "1"]) == 0
    out = capsys.readouterr().out
    assert "├── budget delta: 300000 usd_micros\n" in out, out
    assert "├── related entry 3: outcome ok budget 250000 usd_micros (charged dddddddddddd: " in out, out
    assert main(["audit", "explain", "2"]) == 0
    out = capsys.readouterr().out
    assert "├── budget delta: 1 calls\n" in out and "related entry 0: allow  budget 1 calls\n" in out, out
    assert main(["audit", "explain", "4"]) == 0
    assert "├── budget delta: 7\n" in capsys.readouterr().out


def test_show_holds_at_most_its_lookahead_and_keeps_the_logs_order(
    log: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Review R63: an allow whose outcome lies beyond the lookahead is printed bare (the lines
    after it are not held without bound), and the lines stay in the log's order either way."""
    monkeypatch.setattr("agentgate.cli.audit._UNIT_LOOKAHEAD", 1)
    lines = _show(capsys)
    assert list(lines) == [0, 1, 2, 3, 4, 5], lines
    assert lines[0].endswith("        1  ") and lines[1].endswith("   300000  "), lines  # outcomes 2 later
    monkeypatch.setattr("agentgate.cli.audit._UNIT_LOOKAHEAD", 2)
    lines = _show(capsys)
    assert (
        list(lines) == [0, 1, 2, 3, 4, 5] and " 1 calls  " in lines[0] and " 300000 usd_micros  " in lines[1]
    )
