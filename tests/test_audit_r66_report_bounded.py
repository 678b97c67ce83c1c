"""Review R66: ``audit report`` kept every principal it read (each series of the burn-down, each
principal under a grant chain tip): its memory and its page grew with the number of principals
in the log. Now both are bounded, and what is not shown is counted (agentgate/audit/report.py)."""

from __future__ import annotations

import tracemalloc
from collections.abc import Iterator

from agentgate.audit.entry import AuditEntry
from agentgate.audit.report import render_report

TIME = "2026-12-04T00:00:00.000000Z"


def _spends(n: int) -> Iterator[AuditEntry]:
    """``n`` spend entries, each by a principal of its own, all on one grant chain tip."""
    for i in range(n):
        yield AuditEntry(
            index=i, time=TIME, kind="spend", principal=f"did:key:z{i:08d}", chain_hash="tip", budget_delta=1
        )


def _peak(n: int) -> tuple[str, int]:
    """The page for ``_spends(n)`` and the most memory rendering it held, in bytes."""
    tracemalloc.start()
    page = render_report(_spends(n), None, [])
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return page, peak


def test_a_report_of_many_principals_holds_the_same_memory_as_one_of_a_few_hundred() -> None:
    """Review R66: 20,000 spend entries by 20,000 principals wrote a page of 5.2 MB, eight times
    what 2,000 did, and held memory in proportion: every series was kept and drawn, every
    principal listed under the tip. Rule: the page and the memory are what 2,000 principals take
    (within a margin), and the page counts the rest."""
    small_page, small_peak = _peak(2_000)
    page, peak = _peak(20_000)
    assert len(page) < 2 * len(small_page)
    assert peak < 2 * small_peak
    assert "19800 more spend entries, by other principals or in other units, are not drawn" in page
    assert "19950 more entries act as other principals on the tips shown" in page
    assert "did:key:z00000199" in page and "did:key:z00000200<" not in page
