"""Review R92: the public span helpers (agentgate/audit/spans.py) given a value that is not text.
A value recorded on a span (a ``record_*`` argument, an opener's id or provider) is left off, as
a non-integer count is, and the caller's block goes on: the ``record_*`` functions run after the
caller's work did. The text that names a span is an ``InputError`` naming the parameter, raised
as the ``with`` statement enters, before the block runs and before any span starts. Until the fix
each raised a bare ``TypeError`` from ``_cut``, the ``record_*`` ones inside the caller's block."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

import pytest
import test_audit_spans
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Span, StatusCode, Tracer

from agentgate.audit.spans import (
    approval_span,
    chat_span,
    decision_span,
    execute_tool_span,
    grant_span,
    invoke_agent_span,
    lease_outcome_span,
    record_agent_name,
    record_decision,
    record_outcome,
    record_revocation,
    record_usage,
    revoke_span,
)
from agentgate.errors import InputError

exporter = test_audit_spans.exporter  # the fixtures, shared: a tracer exporting into memory
tracer = test_audit_spans.tracer

Opener = Callable[[Tracer], AbstractContextManager[Span]]  # a span opener given the tracer


RECORDS: list[Any] = [
    pytest.param(
        lambda s: record_usage(s, 1, 2, response_model=7), "gen_ai.response.model", id="response_model"
    ),
    pytest.param(lambda s: record_decision(s, 5), "agentgate.decision", id="decision"),
    pytest.param(lambda s: record_decision(s, "allow", policy_id=3), "agentgate.policy.id", id="policy_id"),
    pytest.param(
        lambda s: record_decision(s, "allow", capability_id=b"g"), "agentgate.capability.id", id="cap"
    ),
    pytest.param(lambda s: record_outcome(s, None), "agentgate.outcome", id="status"),  # type: ignore[arg-type]
    pytest.param(lambda s: record_agent_name(s, 9), "gen_ai.agent.name", id="agent_name"),
    pytest.param(lambda s: record_revocation(s, 9, already=False), "agentgate.capability.id", id="grant_id"),
]


@pytest.mark.parametrize(("record", "attribute"), RECORDS)
def test_a_non_text_value_recorded_after_the_call_is_left_off(
    tracer: Tracer, exporter: InMemorySpanExporter, record: Callable[[Span], None], attribute: str
) -> None:
    ran_on = []
    with execute_tool_span("lookup", tracer=tracer) as span:
        record(span)
        ran_on.append(True)
    assert ran_on == [True]
    (finished,) = exporter.get_finished_spans()
    assert attribute not in (finished.attributes or {})
    assert finished.status.status_code is StatusCode.UNSET
    assert "error.type" not in (finished.attributes or {})


def test_a_deny_with_a_non_text_reason_keeps_the_deny(tracer: Tracer, exporter: InMemorySpanExporter) -> None:
    with execute_tool_span("lookup", tracer=tracer) as span:
        record_decision(span, "deny", reason=5)  # type: ignore[arg-type]
    (finished,) = exporter.get_finished_spans()
    assert finished.status.status_code is StatusCode.ERROR
    assert finished.status.description == "denied by agentgate"
    assert (finished.attributes or {})["error.type"] == "agentgate.denied"


def test_an_error_outcome_with_a_non_text_error_type_is_a_failure(
    tracer: Tracer, exporter: InMemorySpanExporter
) -> None:
    with execute_tool_span("lookup", tracer=tracer) as span:
        record_outcome(span, "error", error_type=7)  # type: ignore[arg-type]
    (finished,) = exporter.get_finished_spans()
    assert (finished.attributes or {})["error.type"] == "agentgate.failed"


OPENER_ATTRIBUTES: list[Any] = [
    pytest.param(lambda t: execute_tool_span("t", call_id=5, tracer=t), "gen_ai.tool.call.id", id="call_id"),
    pytest.param(lambda t: execute_tool_span("t", tool_type=1, tracer=t), "gen_ai.tool.type", id="tool_type"),
    pytest.param(lambda t: invoke_agent_span("a", agent_id=5, tracer=t), "gen_ai.agent.id", id="agent_id"),
    pytest.param(lambda t: chat_span("m", provider=5, tracer=t), "gen_ai.provider.name", id="provider"),
    pytest.param(lambda t: revoke_span(5, tracer=t), "agentgate.revoke.by", id="by"),
    pytest.param(
        lambda t: grant_span("issue", "a", issuer=1, audience="did:x", tracer=t),
        "agentgate.grant.issuer",
        id="issuer",
    ),
    pytest.param(
        lambda t: approval_span("tool:x", 1, "r", audit_index=1, tracer=t),
        "agentgate.approval.approver",
        id="approver",
    ),
    pytest.param(
        lambda t: lease_outcome_span("gpu:h100", "ok", lease_id=1, audit_index=1, tracer=t),
        "agentgate.lease.id",
        id="lease_id",
    ),
]


@pytest.mark.parametrize(("opener", "attribute"), OPENER_ATTRIBUTES)
def test_a_non_text_attribute_of_an_opener_is_left_off(
    tracer: Tracer,
    exporter: InMemorySpanExporter,
    opener: Opener,
    attribute: str,
) -> None:
    with opener(tracer):
        pass
    (finished,) = exporter.get_finished_spans()
    assert attribute not in (finished.attributes or {})
    assert finished.status.status_code is not StatusCode.ERROR


def test_a_grant_span_lists_only_its_text_resources(tracer: Tracer, exporter: InMemorySpanExporter) -> None:
    with grant_span("issue", "a", issuer="did:i", audience="did:a", resources=["tool:x", 5], tracer=tracer):  # type: ignore[list-item]
        pass
    (finished,) = exporter.get_finished_spans()
    assert list((finished.attributes or {})["agentgate.grant.resources"]) == ["tool:x"]  # type: ignore[arg-type]


NAMES: list[Any] = [
    pytest.param(lambda t: invoke_agent_span(1, tracer=t), "name", id="invoke_agent"),
    pytest.param(lambda t: execute_tool_span(123, tracer=t), "name", id="execute_tool"),
    pytest.param(lambda t: chat_span(None, tracer=t), "model", id="chat"),
    pytest.param(lambda t: decision_span(1, "lease", tracer=t), "resource", id="decision-resource"),
    pytest.param(lambda t: decision_span("gpu:h100", 1, tracer=t), "action", id="decision-action"),
    pytest.param(
        lambda t: grant_span(1, "a", issuer="i", audience="a", tracer=t), "action", id="grant-action"
    ),
    pytest.param(
        lambda t: grant_span("issue", 1, issuer="i", audience="a", tracer=t), "name", id="grant-name"
    ),
    pytest.param(lambda t: approval_span(1, "d", "r", audit_index=1, tracer=t), "resource", id="approval"),
    pytest.param(
        lambda t: lease_outcome_span(1, "ok", lease_id="l", audit_index=1, tracer=t),
        "resource",
        id="lease-resource",
    ),
    pytest.param(
        lambda t: lease_outcome_span("gpu:h100", None, lease_id="l", audit_index=1, tracer=t),
        "status",
        id="lease-status",
    ),
]


@pytest.mark.parametrize(("opener", "parameter"), NAMES)
def test_a_non_text_span_name_is_an_input_error_before_the_block(
    tracer: Tracer,
    exporter: InMemorySpanExporter,
    opener: Opener,
    parameter: str,
) -> None:
    ran = []
    with pytest.raises(InputError, match=f"^{parameter}: a span's name is text"), opener(tracer):
        ran.append(True)
    assert ran == []
    assert exporter.get_finished_spans() == ()


class _EqualsAll:
    """A value whose own ``==`` says yes to everything (as ``mock.ANY``)."""

    def __eq__(self, other: object) -> bool:
        return True

    __hash__ = object.__hash__


class _EqualsRaises:
    def __eq__(self, other: object) -> bool:
        raise RuntimeError("its == ran")

    __hash__ = object.__hash__


@pytest.mark.parametrize("decision", [_EqualsAll(), _EqualsRaises()], ids=["equals-all", "equals-raises"])
def test_a_non_text_decision_is_not_compared_with_its_own_equality(
    tracer: Tracer, exporter: InMemorySpanExporter, decision: object
) -> None:
    """R92's regression review: the deny check compared the raw value, so an object equal to
    everything marked the span a deny with no decision on it, and one whose ``==`` raises raised
    in the caller's block after its work ran."""
    with execute_tool_span("lookup", tracer=tracer) as span:
        record_decision(span, decision)  # type: ignore[arg-type]
    (finished,) = exporter.get_finished_spans()
    assert finished.status.status_code is StatusCode.UNSET
    assert "error.type" not in (finished.attributes or {})


@pytest.mark.parametrize("findings", [None, ["scope_creep:x", 5]], ids=["none", "not-findings"])
def test_findings_that_are_none_or_not_findings_are_left_off(
    tracer: Tracer, exporter: InMemorySpanExporter, findings: Any
) -> None:
    with execute_tool_span("lookup", tracer=tracer) as span:
        record_decision(span, "allow", findings=findings)
    (finished,) = exporter.get_finished_spans()
    attributes = finished.attributes or {}
    assert attributes["agentgate.decision"] == "allow"
    assert "agentgate.finding.codes" not in attributes


def test_a_grant_span_with_resources_none_lists_none(tracer: Tracer, exporter: InMemorySpanExporter) -> None:
    with grant_span("issue", "a", issuer="did:i", audience="did:a", resources=None, tracer=tracer):  # type: ignore[arg-type]
        pass
    (finished,) = exporter.get_finished_spans()
    assert "agentgate.grant.resources" not in (finished.attributes or {})
