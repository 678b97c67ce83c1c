"""A gateway caller's W3C ``traceparent`` must not decide whether the gateway's decision spans are
recorded (review R94): the header is unauthenticated, and it reaches the gateway before the
bearer is read. The gateway's ``chat`` span is a root of a trace of its own, sampled by the
gateway's tracer provider alone, and links the caller's span (docs/gateway.md, "Metrics").

Until review R94 the gateway made the span the caller's child: the SDK's default sampler
(``ParentBased``) follows a remote parent's flag, so ``traceparent ...-00`` left every call of
that caller, refusals of a forged bearer included, with no exported span, and ``...-01`` had
every call sampled whatever the gateway's sampler said."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import _http
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF, ParentBased
from test_gateway import MODEL
from test_observability_one_trace import model_backend, traced_gateway  # noqa: F401 (a fixture)

from agentgate.dispatch.gateway import invocation_headers
from agentgate.sim import SimServer

TRACE = "0af7651916cd43dd8448eb211c80319c"
PARENT = "b7ad6b7169203331"
BODY = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}


def _decisions(tmp_path: Path, backend: SimServer, sampler: Any, traceparent: str) -> list[tuple[int, Any]]:
    """The answers to a forged bearer (401), a call over its grant (403) and an allowed call
    (200), each sent with ``traceparent``, and the ``chat`` spans exported: (status, span)."""
    with traced_gateway(tmp_path, backend, sampler) as gateway:
        url = f"{gateway.server.url}/chat/completions"
        over = {**BODY, "max_tokens": 1000}
        sent = [
            (BODY, {"Authorization": "Bearer ag1.forged"}),
            (over, invocation_headers(gateway.agent.key, gateway.agent.chain, over)),
            (BODY, invocation_headers(gateway.agent.key, gateway.agent.chain, BODY)),
        ]
        statuses = [
            _http.post(
                url, json=body, headers={**headers, "traceparent": traceparent}, timeout=20
            ).status_code
            for body, headers in sent
        ]
        gateway.gate.flush()  # a call's span ends once its outcome is written
        spans = [s for s in gateway.exporter.get_finished_spans() if s.name == f"chat {MODEL}"]
    assert statuses == [401, 403, 200]
    return [((s.attributes or {}).get("agentgate.decision"), s) for s in spans]


def test_an_unsampled_traceparent_does_not_hide_the_gateway_s_decision_spans(
    tmp_path: Path,
    model_backend: SimServer,  # noqa: F811
) -> None:
    """``traceparent ...-00`` with the SDK's default sampler: each call, the forged bearer's 401
    and the 403 included, still has its ``chat`` span, a root linked to the caller's span."""
    decided = _decisions(tmp_path, model_backend, None, f"00-{TRACE}-{PARENT}-00")
    assert [decision for decision, _ in decided] == ["deny", "deny", "allow"]
    for _, span in decided:
        assert span.parent is None
        (link,) = span.links
        assert (f"{link.context.trace_id:032x}", f"{link.context.span_id:016x}") == (TRACE, PARENT)
        assert not link.context.trace_flags.sampled


def test_a_sampled_traceparent_does_not_override_the_gateway_s_sampler(
    tmp_path: Path,
    model_backend: SimServer,  # noqa: F811
) -> None:
    """``traceparent ...-01`` to a gateway whose sampler records nothing of its own
    (``ParentBased(ALWAYS_OFF)``): no span; the caller does not decide what the gateway traces."""
    assert _decisions(tmp_path, model_backend, ParentBased(ALWAYS_OFF), f"00-{TRACE}-{PARENT}-01") == []
