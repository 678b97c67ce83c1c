"""Times a person reads (agentgate/_time.py): shown in UTC, in finding messages too (a grant
expired or not yet valid), and a time no calendar holds kept as the number given."""

from __future__ import annotations

import time

import pytest

from agentgate._time import utc_text, when
from agentgate.authority import issue
from agentgate.authority._chain_findings import time_finding
from agentgate.keys import SigningKey


def test_a_time_a_person_reads_is_utc_and_a_time_no_calendar_holds_is_kept_as_given() -> None:
    assert utc_text(1796169600) == when(1796169600) == "2026-12-02T00:00:00Z"
    assert utc_text(2**62) is None
    assert when(2**62) == f"{2**62} (Unix seconds)"
    assert when(-(2**62)) == f"{-(2**62)} (Unix seconds)"


@pytest.mark.parametrize("now_offset", [10_000, -10_000])
def test_an_expired_or_early_grant_is_reported_in_utc(now_offset: int) -> None:
    root = SigningKey.generate()
    chain = issue(root, audience=SigningKey.generate().public.did, capabilities=["tool:x"], ttl=3600)
    now = int(time.time()) + now_offset
    finding = time_finding(chain, now)
    assert finding is not None and finding.code in {"grant_expired", "grant_not_yet_valid"}
    assert when(now) in finding.message and str(now) not in finding.message
