"""Review R70: an outcome the store refused for good had two spans saying so: the call's own
(ERROR, ``agentgate.outcome.lost=true``, since review R69) and an ``outcome_lost {resource}``
child (review R68) with nothing the call's span lacks (its ``agentgate.audit.ref`` is the call
span's ``agentgate.audit.index``). A refusal counted by span was counted twice. The child is no
longer made: the call's span alone says it."""

from __future__ import annotations

from pathlib import Path

from opentelemetry.trace import StatusCode
from test_observability import Sweep
from test_observability_r68_outcome_lost import _refuse_outcomes
from test_observability_r68_outcome_lost import sweep as sweep  # the fixture the tests take

from agentgate.capabilities import Call


def test_a_refused_outcome_is_said_once_on_the_calls_own_span(sweep: Sweep, tmp_path: Path) -> None:
    """Review R70: the refusal is on the call's span, with the decision's entry, and on no other
    span (until R70 an ``outcome_lost tool:lookup`` child said it again)."""
    _refuse_outcomes(tmp_path)
    auth = sweep.gate.authorize(sweep.boss, Call.tool("lookup", {"id": "1"}), call_id="c1")
    sweep.gate.run(auth, lambda: "found", call_id="c1")
    sweep.gate.flush()
    spans = sweep.exporter.get_finished_spans()
    lost = [s for s in spans if (s.attributes or {}).get("agentgate.outcome.lost") is True]
    assert [s.name for s in lost] == ["execute_tool lookup"], [s.name for s in spans]
    (call,) = lost
    attributes = dict(call.attributes or {})
    assert attributes["error.type"] == "AuditError"
    assert attributes["agentgate.audit.index"] == auth.audit_index
    assert call.status.status_code == StatusCode.ERROR
    assert call.status.description == "outcome not recorded: AuditError"
    assert "outcomes refused" not in call.to_json()  # the store's message is not exported
