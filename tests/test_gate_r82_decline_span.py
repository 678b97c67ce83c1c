"""Review R82: the span of a call refused by ``Gate.decline`` linked the wrong audit entry, or
none, and had no tool call id. ``decline`` built its refusal from the authorization it was given,
asked-again markers included: one asked again (the LangGraph middleware declines the one its
resumed node decided, ``Command(resume="deny")``) had its ``deny`` span link the entry that
asking recorded (an approval that did not count: an ``approval_required`` entry), or none at
all. Now the span links the ``deny`` entry it stands for (``agentgate.audit.index``) and names
the call by its id (``gen_ai.tool.call.id``), as the call's other spans do."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from test_gate_r82_decline_expired import POLICY as DECLINE_POLICY
from test_gate_r82_decline_expired import REFUND

from agentgate.gate import AgentIdentity, Approval, Gate
from agentgate.keys import SigningKey
from agentgate.policy import parse_policy
from agentgate.store import SQLiteStore

POLICY = DECLINE_POLICY.replace("expiry_s: 60", "expiry_s: 600").replace(
    '  lead: {{kind: human, did: "{lead}"}}\n',
    '  lead: {{kind: human, did: "{lead}"}}\n  eve: {{kind: human, did: "{eve}"}}\n',
)
"""The decline test's policy, with ``eve``, a person who is no approver."""


@dataclass
class Traced:
    gate: Gate
    agent: AgentIdentity
    keys: dict[str, SigningKey]
    exporter: InMemorySpanExporter

    def deny_span(self) -> ReadableSpan:
        """The last span of a refusal."""
        return [
            s for s in self.exporter.get_finished_spans() if s.attributes["agentgate.decision"] == "deny"
        ][-1]


@pytest.fixture
def traced(tmp_path: Path) -> Iterator[Traced]:
    keys = {name: SigningKey.generate() for name in ("root", "agent", "lead", "eve")}
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    policy = parse_policy(POLICY.format(**{n: k.did for n, k in keys.items()}))
    with Gate(policy, SQLiteStore(tmp_path / "agentgate.db"), tracer=provider.get_tracer("r82")) as gate:
        agent = gate.issue(keys["root"], name="agent", key=keys["agent"], role="worker")
        yield Traced(gate, agent, keys, exporter)


def test_a_request_asked_again_and_declined_has_its_span_link_the_deny(traced: Traced) -> None:
    """The resumed node asks again (one request, no new entry), and the answer is no."""
    gate = traced.gate
    gate.authorize(traced.agent, REFUND, call_id="c1", run_id="r")
    again = gate.authorize(traced.agent, REFUND, call_id="c1", run_id="r")

    declined = gate.decline(again, "the human said no")

    span = traced.deny_span()
    assert declined.audit_index is not None
    assert gate.audit.entry(declined.audit_index).kind == "deny"
    assert span.attributes["agentgate.audit.index"] == declined.audit_index
    assert span.attributes["gen_ai.tool.call.id"] == "c1"


def test_a_request_asked_again_after_an_uncounted_approval_and_declined_links_the_deny(
    traced: Traced,
) -> None:
    """Asked again with an approval no approver gave (eve is none), which records an entry of
    its own, then declined: the span links the ``deny``, not that entry."""
    gate = traced.gate
    first = gate.authorize(traced.agent, REFUND, call_id="c2", run_id="r")
    uncounted = Approval.sign(first.approval_payload(), traced.keys["eve"])
    again = gate.authorize(traced.agent, REFUND, call_id="c2", run_id="r", approval=uncounted)
    assert again.needs_approval

    declined = gate.decline(again, "no")

    span = traced.deny_span()
    assert declined.audit_index is not None
    assert span.attributes["agentgate.audit.index"] == declined.audit_index
    assert gate.audit.entry(declined.audit_index).kind == "deny"
    assert span.attributes["gen_ai.tool.call.id"] == "c2"
