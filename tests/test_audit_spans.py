"""OpenTelemetry spans (agentgate/audit/spans.py): agent, tool and chat spans follow the GenAI
semantic conventions and carry agentgate's decision attributes; a deny or a failed call is an
error, a paused call is not; an exception leaves its class name on a span, never its message; tool
arguments and results reach a span only when content capture is opted in.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode, Tracer
from test_dispatch_backends import KEY, _tracer

from agentgate.audit.entry import redact
from agentgate.audit.spans import (
    CAPTURE_CONTENT_ENV,
    MAX_CALL_ID_CHARS,
    MAX_GRANT_RESOURCES,
    SCHEMA_URL,
    chat_span,
    decision_span,
    execute_tool_span,
    get_tracer,
    grant_span,
    invoke_agent_span,
    record_decision,
    record_outcome,
    record_tool_result,
    record_usage,
)


@pytest.fixture
def exporter() -> InMemorySpanExporter:
    return InMemorySpanExporter()


@pytest.fixture
def tracer(exporter: InMemorySpanExporter) -> Tracer:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return get_tracer(provider)


def test_agent_tool_and_chat_spans_follow_the_genai_conventions(
    tracer: Tracer, exporter: InMemorySpanExporter
) -> None:
    with invoke_agent_span("researcher", agent_id="did:key:zAgent", tracer=tracer):
        with execute_tool_span("web_search", call_id="call_1", tracer=tracer) as span:
            record_decision(
                span,
                "allow",
                policy_id="p1",
                capability_id="c1",
                chain_depth=2,
                budget_remaining=880,
                audit_index=41,
            )
        with chat_span("llama-3.1-8b", provider="vllm", tracer=tracer) as span:
            record_usage(span, 120, 30, response_model="llama-3.1-8b")
    tool, chat, agent = exporter.get_finished_spans()
    assert agent.name == "invoke_agent researcher" and agent.kind == SpanKind.INTERNAL
    assert agent.attributes == {
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.agent.name": "researcher",
        "gen_ai.agent.id": "did:key:zAgent",
    }
    assert tool.name == "execute_tool web_search" and tool.parent.span_id == agent.context.span_id
    assert tool.attributes["gen_ai.operation.name"] == "execute_tool"
    assert tool.attributes["gen_ai.tool.call.id"] == "call_1"
    assert tool.attributes["agentgate.decision"] == "allow"
    assert tool.attributes["agentgate.audit.index"] == 41
    assert tool.attributes["agentgate.chain.depth"] == 2
    assert tool.attributes["agentgate.budget.remaining"] == 880
    assert tool.status.status_code == StatusCode.UNSET
    assert chat.name == "chat llama-3.1-8b" and chat.kind == SpanKind.CLIENT
    assert chat.attributes["gen_ai.usage.input_tokens"] == 120
    assert chat.attributes["gen_ai.usage.output_tokens"] == 30
    assert tool.instrumentation_scope.schema_url == SCHEMA_URL


def test_a_call_id_of_any_length_is_recorded_within_its_bound(
    tracer: Tracer, exporter: InMemorySpanExporter
) -> None:
    """The call id is the caller's (a model's tool call id) and was recorded whole: a 10 MB id
    made a 10 MB attribute, more than an OTLP exporter's batch may hold (4 MiB over gRPC)."""
    with execute_tool_span("lookup", call_id="call_" + "x" * 10_000_000, tracer=tracer):
        pass
    with execute_tool_span("lookup", call_id="call_1", tracer=tracer):
        pass
    long, short = exporter.get_finished_spans()
    assert long.attributes["gen_ai.tool.call.id"] == ("call_" + "x" * MAX_CALL_ID_CHARS)[:MAX_CALL_ID_CHARS]
    assert short.attributes["gen_ai.tool.call.id"] == "call_1"


def test_deny_sets_error_status_and_type(tracer: Tracer, exporter: InMemorySpanExporter) -> None:
    with execute_tool_span("run_shell", tracer=tracer) as span:
        record_decision(span, "deny", reason="no grant covers tool:run_shell", audit_index=7)
    (span,) = exporter.get_finished_spans()
    assert span.status.status_code == StatusCode.ERROR
    assert span.attributes["error.type"] == "agentgate.denied"
    assert span.status.description == "no grant covers tool:run_shell"


def test_tool_arguments_and_results_are_recorded_only_when_opted_in(
    tracer: Tracer, exporter: InMemorySpanExporter, monkeypatch: pytest.MonkeyPatch
) -> None:
    args = {"query": "weather", "api_key": "sk-secret"}
    monkeypatch.delenv(CAPTURE_CONTENT_ENV, raising=False)
    with execute_tool_span("search", arguments=args, tracer=tracer) as span:
        record_tool_result(span, {"answer": 42})
    monkeypatch.setenv(CAPTURE_CONTENT_ENV, "true")
    with execute_tool_span("search", arguments=redact(args, ["query"]), tracer=tracer) as span:
        record_tool_result(span, {"answer": 42})
    default, opted_in = exporter.get_finished_spans()
    assert "gen_ai.tool.call.arguments" not in default.attributes
    assert "gen_ai.tool.call.result" not in default.attributes
    assert opted_in.attributes["gen_ai.tool.call.arguments"] == '{"query":"weather"}'
    assert opted_in.attributes["gen_ai.tool.call.result"] == '{"answer": 42}'
    assert all("sk-secret" not in str(v) for s in (default, opted_in) for v in s.attributes.values())


def test_an_exception_marks_the_span_with_its_type(tracer: Tracer, exporter: InMemorySpanExporter) -> None:
    with pytest.raises(TimeoutError), execute_tool_span("slow", tracer=tracer):
        raise TimeoutError("deadline")
    (span,) = exporter.get_finished_spans()
    assert span.status.status_code == StatusCode.ERROR and span.attributes["error.type"] == "TimeoutError"


def test_configure_from_env_refuses_an_unknown_exporter(monkeypatch: pytest.MonkeyPatch) -> None:
    from agentgate.audit.spans import configure_from_env
    from agentgate.errors import InputError

    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "carrier-pigeon")
    with pytest.raises(InputError, match="carrier-pigeon"):
        configure_from_env()


@pytest.mark.parametrize("value", [float("nan"), "\ud800", object()])
def test_arguments_without_a_canonical_form_are_left_out_not_a_failed_call(
    tracer: Tracer, exporter: InMemorySpanExporter, value: object
) -> None:
    # Review R9: with content capture on, such an argument raised InputError from the span's
    # opening, before the tool ran: tracing made the call fail.
    with execute_tool_span("search", arguments={"q": value}, record_content=True, tracer=tracer):
        ran = True
    (span,) = exporter.get_finished_spans()
    assert ran and "gen_ai.tool.call.arguments" not in span.attributes


def _cycle() -> list[object]:
    looped: list[object] = []
    looped.append(looped)
    return looped


@pytest.mark.parametrize(
    "result",
    [{1: "one", "a": "b"}, {(1, 2): "pair"}, _cycle(), "\ud800", 10**5000],
    ids=["mixed-keys", "tuple-key", "cycle", "lone-surrogate", "huge-int"],
)
def test_a_result_without_a_json_form_is_left_out_not_a_failed_call(
    tracer: Tracer, exporter: InMemorySpanExporter, result: object
) -> None:
    # With content capture on, record_tool_result raised (TypeError for keys json.dumps cannot
    # sort or write, ValueError for a cycle or an integer past the digit limit) after the tool
    # had run, and the span ended ERROR with that type: tracing made a call that worked fail.
    # Text that is not valid Unicode was recorded as is, though OTLP carries text as UTF-8.
    with execute_tool_span("search", record_content=True, tracer=tracer) as span:
        record_tool_result(span, result, record_content=True)
    (span,) = exporter.get_finished_spans()
    assert "gen_ai.tool.call.result" not in span.attributes
    assert span.status.status_code == StatusCode.UNSET


def test_an_outcome_marks_a_failed_call_error_and_leaves_success_and_pauses_alone(
    tracer: Tracer, exporter: InMemorySpanExporter
) -> None:
    for status, error in (("ok", None), ("paused", None), ("error", None), ("error", "TimeoutError")):
        with execute_tool_span("t", tracer=tracer) as span:
            record_decision(span, "allow")
            record_outcome(span, status, error_type=error)
    ok, paused, failed, raised = exporter.get_finished_spans()
    assert ok.status.status_code == paused.status.status_code == StatusCode.UNSET
    assert "error.type" not in ok.attributes and paused.attributes["agentgate.outcome"] == "paused"
    assert (
        failed.status.status_code == StatusCode.ERROR
        and failed.attributes["error.type"] == "agentgate.failed"
    )
    assert (
        raised.attributes["error.type"] == "TimeoutError"
        and raised.attributes["agentgate.outcome"] == "error"
    )


def test_a_decision_on_another_resource_is_no_genai_span(
    tracer: Tracer, exporter: InMemorySpanExporter
) -> None:
    with decision_span("gpu:h100", "lease", tracer=tracer) as span:
        record_decision(span, "deny", reason="no grant covers gpu:h100")
    (span,) = exporter.get_finished_spans()
    assert span.name == "lease gpu:h100" and span.kind == SpanKind.INTERNAL
    assert (
        span.attributes["agentgate.resource"] == "gpu:h100" and span.attributes["agentgate.action"] == "lease"
    )
    assert not any(key.startswith("gen_ai.") for key in span.attributes)
    assert span.status.status_code == StatusCode.ERROR


def test_a_grant_span_names_its_grant_within_bounds_and_no_genai_operation(
    tracer: Tracer, exporter: InMemorySpanExporter
) -> None:
    """A grant decision (``Gate.issue``, ``Gate.delegate``) is ``{action} agent:{name}``, as other
    decisions on a resource that is no GenAI operation; the sub-agent's name and the capabilities
    listed are the caller's, of any size, and are bounded as the call id is."""
    resources = [f"tool:t{n % 40}" for n in range(100_000)]
    with grant_span(
        "delegate",
        "helper" + "x" * 1_000_000,
        issuer="did:key:zBoss",
        audience="did:key:zHelper",
        parent="g-parent",
        resources=resources,
        tracer=tracer,
    ) as span:
        record_decision(span, "allow", capability_id="g-child", audit_index=3)
    with grant_span("issue", "boss", issuer="did:key:zRoot", audience="did:key:zBoss", tracer=tracer) as span:
        record_decision(span, "deny", reason="not a trust anchor", audit_index=4)
    made, refused = exporter.get_finished_spans()
    resource = "agent:" + ("helper" + "x" * MAX_CALL_ID_CHARS)[:MAX_CALL_ID_CHARS]
    assert made.name == f"delegate {resource}" and made.kind == SpanKind.INTERNAL
    assert (
        made.attributes["agentgate.resource"] == resource
        and made.attributes["agentgate.action"] == "delegate"
    )
    assert made.attributes["agentgate.grant.issuer"] == "did:key:zBoss"
    assert made.attributes["agentgate.grant.audience"] == "did:key:zHelper"
    assert made.attributes["agentgate.grant.parent"] == "g-parent"
    assert made.attributes["agentgate.grant.resources"] == tuple(resources[:MAX_GRANT_RESOURCES])
    assert made.attributes["agentgate.capability.id"] == "g-child"
    assert made.status.status_code == StatusCode.UNSET
    assert not any(key.startswith("gen_ai.") for key in made.attributes)
    assert refused.name == "issue agent:boss" and "agentgate.grant.parent" not in refused.attributes
    assert "agentgate.grant.resources" not in refused.attributes
    assert refused.status.status_code == StatusCode.ERROR
    assert refused.attributes["error.type"] == "agentgate.denied"


def test_configure_from_env_twice_keeps_the_installed_provider() -> None:
    # Review R9: a second call built a provider OpenTelemetry refused to install ("Overriding of
    # current TracerProvider is not allowed"), returned it (spans sent to it went nowhere) and
    # left its batch exporter's thread running. In a child process: the provider is global.
    code = (
        "import threading\n"
        "from opentelemetry import trace\n"
        "from agentgate.audit.spans import configure_from_env\n"
        "first = configure_from_env(); threads = threading.active_count()\n"
        "second = configure_from_env()\n"
        "assert first is second is trace.get_tracer_provider(), 'not the installed provider'\n"
        "assert threading.active_count() == threads, 'a second exporter thread'\n"
    )
    env = {**os.environ, "OTEL_TRACES_EXPORTER": "console"}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "Overriding" not in done.stderr


def test_a_pause_carried_out_by_an_exception_is_not_an_error(
    tracer: Tracer, exporter: InMemorySpanExporter
) -> None:
    class Interrupt(Exception):  # as LangGraph's GraphInterrupt: a pause, raised
        pass

    with pytest.raises(Interrupt), execute_tool_span("ask_human", tracer=tracer) as span:
        record_outcome(span, "paused")
        raise Interrupt
    with pytest.raises(Interrupt), execute_tool_span("ask_human", tracer=tracer):
        raise Interrupt
    paused, failed = exporter.get_finished_spans()
    assert paused.status.status_code == StatusCode.UNSET and "error.type" not in paused.attributes
    assert failed.status.status_code == StatusCode.ERROR and failed.attributes["error.type"].endswith(
        "Interrupt"
    )


def test_an_exception_leaving_a_chat_span_exports_its_type_never_its_message() -> None:
    """Kills: the span status description set to ``str(exc)``, and ``record_exception=True`` (an
    exception event carrying the message and stack). Rule: a span that an exception left holds
    the exception's class name only: its message may quote the prompt or a key."""
    exporter = InMemorySpanExporter()
    tracer = _tracer(exporter)
    with pytest.raises(ValueError), chat_span("m", provider="vllm", tracer=tracer):
        raise ValueError(f"prompt was: tell me the secret {KEY}")
    (span,) = exporter.get_finished_spans()
    assert span.status.status_code is StatusCode.ERROR
    assert span.attributes is not None and span.attributes["error.type"] == "ValueError"
    everything = repr(span.to_json())
    assert KEY not in everything and "tell me the secret" not in everything


def test_an_outcome_recorded_before_an_exception_leaves_the_span_is_kept(
    tracer: Tracer, exporter: InMemorySpanExporter
) -> None:
    """The gateway records a stream cut because its caller left (``CallerGone``) and then lets the
    ``CancelledError`` that cut it end the span: the span said ``error.type=CancelledError``
    while the audit said CallerGone. An outcome on the span says how the call ended; the
    exception that carries it out changes nothing, as with a pause."""
    with pytest.raises(asyncio.CancelledError), chat_span("m", tracer=tracer) as span:
        record_outcome(span, "error", error_type="CallerGone")
        raise asyncio.CancelledError
    (done,) = exporter.get_finished_spans()
    assert done.attributes is not None and done.attributes["error.type"] == "CallerGone"
    assert done.status.status_code is StatusCode.ERROR and done.status.description == "CallerGone"


def test_a_paused_call_is_not_marked_failed_by_the_exception_carrying_the_pause() -> None:
    """Kills: ``_span`` marking ERROR whatever the recorded outcome (``paused`` dropped from the
    exemption). Rule: a tool call paused for an approval has not failed."""
    exporter = InMemorySpanExporter()
    tracer = _tracer(exporter)

    class Interrupt(Exception):
        pass

    with pytest.raises(Interrupt), execute_tool_span("t", tracer=tracer) as span:
        record_outcome(span, "paused")
        raise Interrupt
    (done,) = exporter.get_finished_spans()
    assert done.status.status_code is StatusCode.UNSET
    assert done.attributes is not None and "error.type" not in done.attributes


def test_tool_arguments_are_not_recorded_without_opt_in(monkeypatch: pytest.MonkeyPatch) -> None:
    """Kills: ``_capture`` reading anything but ``true`` as opted in, and ``execute_tool_span``
    recording arguments without asking ``_capture``. Rule: arguments reach a span only when
    content capture is opted in."""
    exporter = InMemorySpanExporter()
    tracer = _tracer(exporter)
    for value in (None, "", "yes", "1", "false"):
        if value is None:
            monkeypatch.delenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", raising=False)
        else:
            monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", value)
        with execute_tool_span("t", arguments={"password": "hunter2"}, tracer=tracer):
            pass
    assert all(
        "gen_ai.tool.call.arguments" not in (s.attributes or {}) for s in exporter.get_finished_spans()
    )
    monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "True")
    with execute_tool_span("t", arguments={"a": 1}, tracer=tracer):
        pass
    assert (exporter.get_finished_spans()[-1].attributes or {})["gen_ai.tool.call.arguments"] == '{"a":1}'


def test_a_chat_span_is_a_client_span_and_a_tool_result_needs_opt_in(monkeypatch: pytest.MonkeyPatch) -> None:
    """Kills: ``chat_span`` made INTERNAL (a model call is a CLIENT span in the GenAI conventions),
    and ``record_tool_result`` recording without asking ``_capture``. Rule: a tool's result
    reaches a span only when content capture is opted in."""
    monkeypatch.delenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", raising=False)
    exporter = InMemorySpanExporter()
    tracer = _tracer(exporter)
    with chat_span("m", tracer=tracer):
        pass
    with execute_tool_span("t", tracer=tracer) as span:
        record_tool_result(span, {"ssn": "123-45-6789"})
    chat, tool = exporter.get_finished_spans()
    assert chat.kind is SpanKind.CLIENT
    assert "gen_ai.tool.call.result" not in (tool.attributes or {})
