"""A Gate's own spans list a refusal's findings (``agentgate.finding.kinds`` and
``agentgate.finding.codes``), as its audit entry does: review R62 gave ``record_decision`` the
parameter, and the Gate's call and grant spans now pass it. Before, a refused call's or refused
delegation's kind was only in the span's description text."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from test_observability import Sweep

from agentgate.capabilities import Call
from agentgate.errors import ScopeCreep


@pytest.fixture
def sweep(tmp_path: Path) -> Iterator[Sweep]:
    made = Sweep(tmp_path)
    yield made
    made.gate.close()


def _finding_attributes(sweep: Sweep, name: str) -> tuple[object, object]:
    sweep.gate.flush()  # a call's span ends once its outcome is written (review R69)
    (span,) = [s for s in sweep.exporter.get_finished_spans() if s.name == name]
    attributes = dict(span.attributes or {})
    return attributes.get("agentgate.finding.kinds"), attributes.get("agentgate.finding.codes")


def _entry_findings(sweep: Sweep, index: int | None) -> list[str]:
    """The ``kind:code`` reasons of the audit entry at ``index``, in their order."""
    assert index is not None
    kinds = ("scope_creep", "implicit_trust_inheritance", "non_revocable_grant", "authority_chain_opacity")
    reasons = list(sweep.gate.audit.entries())[index].reasons
    return [r for r in reasons if r.partition(":")[0] in kinds]


def test_a_refused_calls_span_lists_its_findings_as_its_audit_entry_does(sweep: Sweep) -> None:
    refused = sweep.gate.authorize(sweep.boss, Call.tool("vault", {"pin": "99"}), call_id="d")
    assert refused.verdict == "deny" and refused.findings
    kinds, codes = _finding_attributes(sweep, "execute_tool vault")
    assert kinds == tuple(f.kind for f in refused.findings)
    assert codes == tuple(f.code for f in refused.findings)
    assert [f"{k}:{c}" for k, c in zip(kinds, codes, strict=True)] == _entry_findings(
        sweep, refused.audit_index
    )


def test_an_allowed_calls_span_lists_no_findings(sweep: Sweep) -> None:
    allowed = sweep.gate.authorize(sweep.boss, Call.tool("vault", {"pin": "1234"}), call_id="a")
    assert allowed.verdict == "allow" and not allowed.findings
    assert sweep.gate.run(allowed, lambda: "open", call_id="a") == "open"
    assert _finding_attributes(sweep, "execute_tool vault") == (None, None)


def test_a_refused_delegations_span_lists_its_scope_creep_finding(sweep: Sweep) -> None:
    with pytest.raises(ScopeCreep) as creep:
        sweep.gate.delegate(
            sweep.boss,
            name="helper",
            key=sweep.keys["helper"],
            capabilities=["tool:vault"],
            ttl=timedelta(minutes=5),
        )
    kinds, codes = _finding_attributes(sweep, "delegate agent:helper")
    assert kinds == ("scope_creep",) and isinstance(codes, tuple) and len(codes) == 1
    assert [f"{kinds[0]}:{codes[0]}"] == _entry_findings(sweep, creep.value.audit_index)
