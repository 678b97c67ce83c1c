"""A call the scheduler gave up on after a failed attempt (its retry refused by the breaker the
failure opened) has an outcome that names the tool's error class beside the refusal,
``CircuitOpen (after ConnectionRefusedError)``: review R62 chained the tool's last error to the
refusal (``__cause__``), and until then the outcome read ``CircuitOpen`` alone, the tool's error
being in the dead letter only. The error's text is not recorded, as for a tool's own error."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_gate_evidence_completeness import Setup, _make, _outcome_of

from agentgate.capabilities import Call
from agentgate.errors import CircuitOpen
from agentgate.tasks import BreakerPolicy, RetryPolicy, ToolLimits


def _opening(tmp_path: Path) -> Setup:
    retry = RetryPolicy(attempts=3, backoff_initial_s=0.0, retry_on=("transient", "connection"))
    return _make(
        tmp_path,
        tools={"boom": ToolLimits(idempotent=True, retry=retry)},
        breaker=BreakerPolicy(failure_threshold=1, reset_timeout_s=600),
    )


async def test_a_retry_refused_by_the_breaker_names_the_tools_error_in_the_outcome(tmp_path: Path) -> None:
    s = _opening(tmp_path)
    try:

        async def refused() -> str:
            raise ConnectionRefusedError("port 5432 refused: secret-host")

        auth = s.gate.authorize(s.boss, Call.tool("boom"), call_id="b1")
        assert auth.allowed, auth.reasons
        with pytest.raises(CircuitOpen) as caught:
            await s.gate.arun(auth, refused, call_id="b1")
        assert isinstance(caught.value.__cause__, ConnectionRefusedError)
        outcome = _outcome_of(s, auth.audit_index)
        assert outcome.status == "error"
        assert outcome.reasons[0] == "CircuitOpen (after ConnectionRefusedError)", outcome.reasons
        assert not any("secret-host" in r for r in outcome.reasons)
        assert s.verified()
    finally:
        s.gate.close()


def test_a_refusal_with_no_failed_attempt_reads_as_before(tmp_path: Path) -> None:
    s = _opening(tmp_path)
    try:

        def refused() -> str:
            raise ConnectionRefusedError("down")

        first = s.gate.authorize(s.boss, Call.tool("boom"), call_id="b1")
        with pytest.raises(CircuitOpen):
            s.gate.run(first, refused, call_id="b1")
        second = s.gate.authorize(s.boss, Call.tool("boom"), call_id="b2")
        with pytest.raises(CircuitOpen) as caught:
            s.gate.run(second, refused, call_id="b2")  # the breaker is open: never attempted
        assert caught.value.__cause__ is None
        assert _outcome_of(s, first.audit_index).reasons[0] == "CircuitOpen (after ConnectionRefusedError)"
        assert _outcome_of(s, second.audit_index).reasons[0] == "CircuitOpen"
    finally:
        s.gate.close()
