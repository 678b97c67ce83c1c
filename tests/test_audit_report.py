"""The HTML report of the audit log (agentgate/audit/report.py): what it says of the log's
verification."""

from __future__ import annotations

from agentgate.audit.entry import AuditEntry
from agentgate.audit.report import render_report


def test_a_render_with_one_problem_does_not_say_verified() -> None:
    """Kills: ``_verification`` saying "Verified intact" for one problem (``len(problems) <= 1``).
    Rule: any problem at all makes the page say TAMPERED, never verified."""
    page = render_report([], None, ["entry 3: bytes do not match the stored leaf hash"])
    assert "TAMPERED" in page and "Verified intact" not in page
    assert "Verified intact" in render_report([], None, [])
    assert "was not verified" in render_report([], None, None)


def _outcome(index: int, principal: str, budget_delta: int) -> AuditEntry:
    return AuditEntry.build(
        index=index,
        time="2026-12-02T10:00:00.000000Z",
        kind="outcome",
        principal=principal,
        status="ok",
        ref=0,
        budget_delta=budget_delta,
    )


def test_a_budget_delta_beyond_a_double_draws_the_burn_down_without_an_overflow() -> None:
    """Kills: the burn-down's ``height * v / top`` (an ``OverflowError``: ``audit report`` ended in
    a traceback) for a principal whose spend is negative beyond a double's range and whose
    ``top`` is 1. Rule: ``budget_delta`` is any integer (the API writes one, so can a tamperer
    after the last checkpoint); the page is written all the same, the point drawn at the foot of
    the chart, and the total printed exactly."""
    page = render_report([_outcome(0, "did:key:zA", -(10**400))], None, [])
    assert f"<code>did:key:zA</code>: {-(10**400)} spent" in page


def test_a_total_beyond_the_digits_python_prints_is_written_as_its_magnitude() -> None:
    """Kills: the legend's and the axis's ``str`` of a total (a ``ValueError``: Python prints at
    most 4300 digits of an integer) when two entries, each within that, add up beyond it. Rule:
    the page is written; such a total is shown as its order of magnitude."""
    big = 10**4300 - 1
    page = render_report([_outcome(0, "did:key:zA", big), _outcome(1, "did:key:zA", big)], None, [])
    assert "<code>did:key:zA</code>: about 10^4300 spent" in page
    assert "(max about 10^4300)" in page
