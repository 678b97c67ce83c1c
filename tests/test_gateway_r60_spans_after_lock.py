"""The gateway's decisions end their spans after its store lock is released (review R60): a
``SimpleSpanProcessor`` exports in the thread that ends a span, so an exporter that blocked on one
refusal's span held every other gateway decision until the export returned, as the Gate's did
before ``ends_held`` (tests/test_gate_r60b_spans.py)."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from pathlib import Path

from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult
from test_gateway_authority import CHAT_POLICY

from agentgate.authority import Invocation
from agentgate.capabilities import Call
from agentgate.dispatch.gateway import GatewayGate
from agentgate.keys import SigningKey
from agentgate.policy import parse_policy
from agentgate.store import SQLiteStore


class _BlocksTheFirst(SpanExporter):
    """Blocks the first export it is given until ``release`` is set (``entered`` says it is
    blocked), as a slow collector does; later exports go through."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        if not self.entered.is_set():
            self.entered.set()
            self.release.wait(10)
        return SpanExportResult.SUCCESS


def test_a_blocked_export_of_a_refusal_holds_no_other_gateway_decision(tmp_path: Path) -> None:
    """Review R60: GatewayGate.authorize ended its spans holding the store lock, so one blocked export held every decision."""
    keys = {n: SigningKey.generate() for n in ("root", "agent")}
    policy = parse_policy(CHAT_POLICY.format(**{n: k.did for n, k in keys.items()}), source="p.yaml")
    provider = TracerProvider()
    gate = GatewayGate(policy, SQLiteStore(tmp_path / "agentgate.db"), tracer=provider.get_tracer("r60"))
    try:
        agent = gate.issue(keys["root"], name="agent", key=keys["agent"], role="chat")
        exporter = _BlocksTheFirst()
        provider.add_span_processor(SimpleSpanProcessor(exporter))

        def decide(call: Call) -> int:
            invocation = Invocation.sign(agent.key, agent.chain, call)
            return gate.authorize_invocation(agent.chain.token, invocation.encode(), call, (1, 1)).status

        refused: list[int] = []
        first = threading.Thread(target=lambda: refused.append(decide(Call.model("not-granted"))))
        first.start()
        try:
            assert exporter.entered.wait(10), "the refusal made no span"
            allowed: list[int] = []
            second = threading.Thread(target=lambda: allowed.append(decide(Call.model("m"))))
            second.start()
            second.join(5)
            assert allowed == [200], "the other decision waited for the blocked export"
        finally:
            exporter.release.set()
            first.join(10)
        assert refused and refused[0] in (401, 403)
    finally:
        gate.close()
