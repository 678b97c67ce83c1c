"""``configure_from_env`` reads the OTLP protocol (review R94): ``OTEL_EXPORTER_OTLP_TRACES_PROTOCOL``,
else ``OTEL_EXPORTER_OTLP_PROTOCOL``, ``http/protobuf`` (default) or ``grpc``, any case; another
value, or a protocol whose exporter package is missing, is an ``InputError`` naming the variable
(and the package). Until review R94 the protocol was not read: ``grpc`` (a collector's port 4317)
got the http/protobuf exporter, with no error, and every span was lost.

The OTLP exporter packages are not dependencies of agentgate: stand-in modules take their place."""

from __future__ import annotations

import sys
import types
from collections.abc import Iterator

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider

from agentgate.audit.spans import configure_from_env
from agentgate.errors import InputError

_MODULES = {
    "http/protobuf": "opentelemetry.exporter.otlp.proto.http.trace_exporter",
    "grpc": "opentelemetry.exporter.otlp.proto.grpc.trace_exporter",
}
_VARIABLES = ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL")


def _stand_in(protocol: str) -> types.ModuleType:
    from opentelemetry.sdk.trace.export import SpanExportResult

    class OTLPSpanExporter:
        def export(self, spans: object) -> SpanExportResult:
            return SpanExportResult.SUCCESS

        def shutdown(self) -> None:
            pass

        def force_flush(self, timeout_millis: int = 0) -> bool:
            return True

    OTLPSpanExporter.protocol = protocol  # type: ignore[attr-defined]
    module = types.ModuleType(_MODULES[protocol])
    module.OTLPSpanExporter = OTLPSpanExporter  # type: ignore[attr-defined]
    return module


@pytest.fixture
def env(monkeypatch: pytest.MonkeyPatch) -> Iterator[pytest.MonkeyPatch]:
    """``OTEL_TRACES_EXPORTER=otlp``, no protocol set, both stand-in exporters importable, and no
    provider installed for good: ``trace.set_tracer_provider`` is caught."""
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "otlp")
    for variable in _VARIABLES:
        monkeypatch.delenv(variable, raising=False)
    for protocol, module in _MODULES.items():
        monkeypatch.setitem(sys.modules, module, _stand_in(protocol))
    monkeypatch.setattr(trace, "get_tracer_provider", trace.ProxyTracerProvider)
    monkeypatch.setattr(trace, "set_tracer_provider", lambda provider: None)
    yield monkeypatch


def _protocol_exported(provider: trace.TracerProvider) -> str:
    assert isinstance(provider, TracerProvider)
    try:
        (processor,) = provider._active_span_processor._span_processors
        return type(processor.span_exporter).protocol  # type: ignore[attr-defined, no-any-return]
    finally:
        provider.shutdown()


@pytest.mark.parametrize(
    ("traces", "general", "expected"),
    [
        (None, None, "http/protobuf"),
        (None, "grpc", "grpc"),
        (None, " GRPC\r", "grpc"),
        ("grpc", "http/protobuf", "grpc"),
        ("http/protobuf", "grpc", "http/protobuf"),
        ("", "grpc", "grpc"),  # empty is unset
    ],
)
def test_the_otlp_exporter_is_the_protocol_the_environment_names(
    env: pytest.MonkeyPatch, traces: str | None, general: str | None, expected: str
) -> None:
    for variable, value in zip(_VARIABLES, (traces, general), strict=True):
        if value is not None:
            env.setenv(variable, value)
    assert _protocol_exported(configure_from_env()) == expected


@pytest.mark.parametrize(
    ("traces", "general", "named"),
    [
        (None, "http/json", "OTEL_EXPORTER_OTLP_PROTOCOL='http/json'"),
        ("carrier-pigeon", "grpc", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL='carrier-pigeon'"),
    ],
)
def test_an_unsupported_protocol_is_refused_naming_its_variable(
    env: pytest.MonkeyPatch, traces: str | None, general: str, named: str
) -> None:
    if traces is not None:
        env.setenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", traces)
    env.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", general)
    with pytest.raises(InputError, match=f"^{named} is not supported"):
        configure_from_env()


def test_grpc_without_its_package_is_refused_naming_the_variable_and_the_package(
    env: pytest.MonkeyPatch,
) -> None:
    env.setitem(sys.modules, _MODULES["grpc"], None)  # import raises ImportError
    env.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
    with pytest.raises(InputError) as refused:
        configure_from_env()
    assert "OTEL_EXPORTER_OTLP_PROTOCOL='grpc'" in str(refused.value)
    assert "pip install opentelemetry-exporter-otlp-proto-grpc" in str(refused.value)
