"""The spans of the Gate's decisions end after its store lock is released, and say what the audit
log says of a call (review R60, second pass)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from test_observability import SWEEP_POLICY

from agentgate.capabilities import Call
from agentgate.gate import AgentIdentity, Gate
from agentgate.keys import SigningKey
from agentgate.policy import parse_policy
from agentgate.store import SQLiteStore


class _Blocking(SpanExporter):
    """Blocks the export of the span named ``name`` until ``release`` is set (``entered`` says
    it is blocked), as a ``SimpleSpanProcessor``'s exporter does on a slow collector."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.entered = threading.Event()
        self.release = threading.Event()

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        if any(span.name == self.name for span in spans):
            self.entered.set()
            self.release.wait(10)
        return SpanExportResult.SUCCESS


@pytest.fixture
def traced(tmp_path: Path) -> Iterator[tuple[Gate, AgentIdentity, dict[str, SigningKey], TracerProvider]]:
    keys = {n: SigningKey.generate() for n in ("root", "boss", "helper", "dana")}
    policy = parse_policy(SWEEP_POLICY.format(**{n: k.did for n, k in keys.items()}), source="s.yaml")
    provider = TracerProvider()
    gate = Gate(policy, SQLiteStore(tmp_path / "a.db"), tracer=provider.get_tracer("r60b"))
    boss = gate.issue(keys["root"], name="boss", key=keys["boss"], role="boss")
    yield gate, boss, keys, provider
    gate.close()


def _refuse(gate: Gate, boss: AgentIdentity, keys: dict[str, SigningKey]) -> None:
    gate.authorize(boss, Call.tool("vault", {"pin": "99"}), call_id="c3")


def _issue(gate: Gate, boss: AgentIdentity, keys: dict[str, SigningKey]) -> None:
    gate.issue(keys["root"], name="helper", key=keys["helper"], role="helper")


def _revoke(gate: Gate, boss: AgentIdentity, keys: dict[str, SigningKey]) -> None:
    helper = gate.issue(keys["root"], name="helper", key=keys["helper"], role="helper")
    gate.revoke(helper.grant_id, by="dana", reason="leaked")


@pytest.mark.parametrize(
    ("blocked", "act"),
    [("execute_tool vault", _refuse), ("issue agent:helper", _issue), ("revoke grant", _revoke)],
)
def test_a_blocked_export_holds_no_other_decision(
    traced: tuple[Gate, AgentIdentity, dict[str, SigningKey], TracerProvider],
    blocked: str,
    act: Callable[[Gate, AgentIdentity, dict[str, SigningKey]], None],
) -> None:
    """Review R60: a refusal's, an issue's or a revocation's span ended under the Gate's store lock, so an exporter that blocked held every other thread's decision."""
    gate, boss, keys, provider = traced
    exporter = _Blocking(blocked)
    kept = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(kept))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    first = threading.Thread(target=act, args=(gate, boss, keys))
    first.start()
    try:
        assert exporter.entered.wait(10)
        decided = threading.Event()

        def other() -> None:
            if gate.authorize(boss, Call.tool("lookup", {"id": "1"}), call_id="c1").allowed:
                decided.set()

        second = threading.Thread(target=other)
        second.start()
        assert decided.wait(10), "the other thread's allow waited for the blocked export"
        assert first.is_alive()  # still in its export: the allow did not wait for it
    finally:
        exporter.release.set()
        first.join(10)
    second.join(10)
    ended = [s for s in kept.get_finished_spans() if s.name == blocked]
    assert ended and ended[-1].attributes is not None
    assert "agentgate.audit.index" in ended[-1].attributes  # what it carried, it still carries
    if blocked == "execute_tool vault":
        assert ended[-1].attributes["agentgate.decision"] == "deny"


def _boom() -> str:
    raise RuntimeError("login failed with 99")


def _unreadable(result: str) -> bool:
    raise ValueError("no usage in " + result)


@pytest.mark.parametrize(
    ("fn", "failed", "error_type"),
    [(_boom, None, "RuntimeError"), (lambda: "open", _unreadable, "ValueError")],
)
def test_a_call_that_raised_has_the_error_outcome_on_its_span(
    traced: tuple[Gate, AgentIdentity, dict[str, SigningKey], TracerProvider],
    fn: Callable[[], str],
    failed: Callable[[str], bool] | None,
    error_type: str,
) -> None:
    """Review R60: a call that raised (or whose result could not be read) had no agentgate.outcome on its span, while its audit outcome is error."""
    gate, boss, _, provider = traced
    kept = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(kept))
    auth = gate.authorize(boss, Call.tool("lookup", {"id": "1"}), call_id="c1")
    with pytest.raises(Exception, match=r"99|usage"):
        gate.run(auth, fn, call_id="c1", failed=failed)
    gate.flush()
    (span,) = [s for s in kept.get_finished_spans() if s.name == "execute_tool lookup"]
    assert span.attributes is not None
    assert span.attributes["agentgate.outcome"] == "error"
    assert span.attributes["error.type"] == error_type
    assert span.status.status_code.name == "ERROR"
    assert span.status.description == error_type  # the exception's message is never exported
    allowed = span.attributes["agentgate.audit.index"]
    (outcome,) = [e for e in gate.audit.entries() if e.kind == "outcome" and e.ref == allowed]
    assert outcome.status == "error"  # what the span says
