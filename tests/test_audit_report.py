"""The HTML report of the audit log (agentgate/audit/report.py): what it says of the log's
verification."""

from __future__ import annotations

from agentgate.audit.report import render_report


def test_a_render_with_one_problem_does_not_say_verified() -> None:
    """Kills: ``_verification`` saying "Verified intact" for one problem (``len(problems) <= 1``).
    Rule: any problem at all makes the page say TAMPERED, never verified."""
    page = render_report([], None, ["entry 3: bytes do not match the stored leaf hash"])
    assert "TAMPERED" in page and "Verified intact" not in page
    assert "Verified intact" in render_report([], None, [])
    assert "was not verified" in render_report([], None, None)
