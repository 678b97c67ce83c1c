"""OpenTelemetry spans that follow the GenAI semantic conventions, plus ``agentgate.*`` attributes.

Followed: the GenAI agent, tool and model-call spans of OpenTelemetry semantic conventions
``SEMCONV_VERSION`` (the tracer carries ``SCHEMA_URL``):

- ``invoke_agent {name}`` (INTERNAL): ``gen_ai.operation.name=invoke_agent``, ``gen_ai.agent.name``,
  ``gen_ai.agent.id``;
- ``execute_tool {name}`` (INTERNAL): ``gen_ai.operation.name=execute_tool``, ``gen_ai.tool.name``,
  ``gen_ai.tool.call.id`` (its first ``MAX_CALL_ID_CHARS`` characters), ``gen_ai.tool.type``; ``gen_ai.tool.call.arguments`` and
  ``gen_ai.tool.call.result`` only when content capture is opted in (argument
  ``record_content=True`` or ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true``), and
  then only what the caller passes (pass ``redact``-ed arguments), each at most
  ``MAX_CONTENT_BYTES`` of UTF-8 (a longer one cut, and marked
  ``agentgate.content.truncated.<attribute>=true``);
- ``chat {model}`` (CLIENT): ``gen_ai.operation.name=chat``, ``gen_ai.request.model``,
  ``gen_ai.provider.name``, and ``gen_ai.usage.input_tokens`` / ``output_tokens`` via
  ``record_usage``;
- ``{action} {resource}`` (INTERNAL, ``decision_span``): a decision on another kind of resource
  (``lease gpu:h100``), with ``agentgate.resource`` and ``agentgate.action`` and no ``gen_ai.*``;
- ``revoke grant`` and ``revoke holder`` (INTERNAL, ``revoke_span``): a revocation, with the
  grant revoked and the index of its ``revoke`` entry (``record_revocation``);
- ``approve {resource}`` (INTERNAL, ``approval_span``): one approver's counted yes, with the
  approver, the request and the index of its ``approval_given`` entry;
- ``{status} {resource}`` (INTERNAL, ``lease_outcome_span``): what happened to a GPU lease after
  its decision (``lease_granted gpu:h100``), with the index of its ``outcome`` entry;
- ``issue agent:{name}`` and ``delegate agent:{name}`` (INTERNAL, ``grant_span``): a grant decision
  (``Gate.issue``, ``Gate.delegate``), the same form with ``agentgate.grant.issuer`` and
  ``agentgate.grant.audience`` (dids), ``agentgate.grant.parent`` (the grant delegated from) and
  ``agentgate.grant.resources`` (what the capabilities name); GenAI's ``create_agent`` is the
  creation of an agent at a provider, not a grant of authority, so it is not used. The new
  grant, once made, is ``agentgate.capability.id``; no token or key is recorded.

``record_decision`` adds ``agentgate.decision``, ``agentgate.policy.id``,
``agentgate.capability.id``, ``agentgate.chain.depth`` and ``agentgate.audit.index`` (the index
of the signed audit entry, so a trace links to the evidence), ``agentgate.budget.remaining``
for a caller that passes it, and ``agentgate.finding.kinds`` / ``agentgate.finding.codes`` for
a caller that passes the decision's findings (their messages are not recorded). The ``Gate`` does not: its reservation is one conditional update of
the budget's row that does not read what is left, and reading it would cost a store read per
decision (``Gate.remaining`` reads it; until review R60 this docstring listed it as set). A
deny sets the span status to ERROR and ``error.type=agentgate.denied``. An exception escaping a
span sets ERROR and ``error.type`` to the exception's class name (its message is not
exported), unless the span already records a deny (which it keeps, reasons and all) or an outcome
(``record_outcome``: how the call ended, a pause included, which the exception only carries out).
``record_outcome`` adds ``agentgate.outcome`` and marks a call that ran and failed ERROR (the
``Gate`` also gives an allowed call that never runs, ``Gate.abandon`` or a run refused while it
closes, its span, ended at once with the ``error`` outcome its audit entry records). Allowed
calls that succeed keep the status UNSET, as the conventions ask of instrumentation libraries (OK
is for applications to set). The ``Gate`` holds a call's span until its ``outcome`` entry is
written (``await_outcome``): the span says ``agentgate.outcome`` only once the log holds it,
and ends then, at the time the call ended; an outcome that will not be written (the store
refused it for good, or the ``Gate`` had closed) leaves the span ERROR with
``agentgate.outcome.lost=true`` and no ``agentgate.outcome`` (``outcome_not_written``); no
other span says it (until review R70 an ``outcome_lost {resource}`` child said it again).

Under a low attribute count limit (``OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT``; the SDK drops the oldest
attribute to make room for a new one) the ``ESSENTIAL`` attributes, ``agentgate.audit.index``,
``agentgate.outcome.lost``, ``agentgate.decision``, ``agentgate.outcome`` and ``error.type``, are
set again as the span ends, last: a limit of five keeps them all. The status (ERROR, and a
deny's reasons as its description) is no attribute and is kept under any limit. Whether a span
already records a deny or an outcome is read from what it was given, not from what the limit
left of its attributes (``_RECORDED``).

Exporters: whatever ``TracerProvider`` the application installed; ``configure_from_env`` installs
one from the standard ``OTEL_*`` variables for applications that have none. A span is evidence of
a decision, never a condition of it: a span processor or sampler that raises as a span starts or
ends (the SDK calls them in the caller's thread and lets what they raise out) is logged as a
warning on the ``agentgate.audit.spans`` logger, and the call goes on as if untraced (a span that
could not start is ``INVALID_SPAN``, which records nothing).

What the helpers are given: every text is cut and escaped (``_cut``), every integer checked
(``_attribute_int``). A value recorded on a span that is not what it should be (a non-integer
count, and since review R92 a non-text id, model, reason, status or error type, ``call_id=5``
or ``record_outcome(span, None)``) is left off (``_text``): the ``record_*`` functions run after
the caller's work did, and what they are given must not turn a call that ran into an exception.
The text that names a span (``invoke_agent_span``'s ``name``, ``execute_tool_span``'s ``name``,
``chat_span``'s ``model``, ``decision_span``'s ``resource`` and ``action``, ``grant_span``'s
``action`` and ``name``, ``approval_span``'s ``resource``, ``lease_outcome_span``'s ``resource``
and ``status``) is no attribute to leave off: a non-text one is an ``InputError`` naming the
parameter, raised as the ``with`` statement enters, before the block (the caller's work) starts
and before any span does (``_name``). The ``Gate`` never passes one (``Call`` refuses a
non-text resource or action); until review R92 each of these raised a bare ``TypeError`` from
``_cut``, from a ``record_*`` function inside the caller's block after the call had run.
"""

from __future__ import annotations

import contextlib
import importlib
import itertools
import json
import logging
import os
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar, Token
from typing import TYPE_CHECKING, Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import (
    INVALID_SPAN,
    Link,
    Span,
    SpanContext,
    SpanKind,
    Status,
    StatusCode,
    Tracer,
)
from opentelemetry.util.types import AttributeValue

from agentgate._json import canonical_json
from agentgate.errors import InputError
from agentgate.findings import Finding

if TYPE_CHECKING:
    from opentelemetry.sdk.trace.export import SpanExporter

SEMCONV_VERSION = "1.44.0"
SCHEMA_URL = f"https://opentelemetry.io/schemas/{SEMCONV_VERSION}"
CAPTURE_CONTENT_ENV = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
DENIED = "agentgate.denied"
FAILED = "agentgate.failed"
OUTCOME_LOST = "agentgate.outcome_lost"
"""The ``error.type`` of a call's span whose call succeeded (or paused) and whose outcome was not
written because the gate had closed (``outcome_not_written``)."""
MAX_CALL_ID_CHARS = 200
"""Most characters of a call id a span records: the id is the caller's (a model's tool call id,
whatever its text) and has no bound of its own, and one oversized attribute can make an
exporter's whole batch too large to send. The same bound holds for every other text a helper
here puts on a span, captured content aside (``MAX_CONTENT_BYTES``): an agent's, a tool's or
model's name, a resource, an action, a did, a grant id, a status (``_cut``)."""
MAX_CONTENT_BYTES = 16 * 1024
"""Most bytes of UTF-8 of one captured content value a span records (``gen_ai.tool.call.arguments``,
``gen_ai.tool.call.result``): a tool's arguments and results are the caller's, of any size, and
one span holding a 10 MB result makes its exporter's whole batch too large to send (the
Collector's OTLP gRPC receiver takes 4 MiB a message by default), the other spans of the batch
lost with it. A longer value is cut on a character boundary and its
``agentgate.content.truncated.<attribute>`` is ``true`` (``_bounded_content``)."""
TRUNCATED = "agentgate.content.truncated."
"""The prefix of the attribute that marks a captured value cut to ``MAX_CONTENT_BYTES``: the
captured attribute's name follows (``agentgate.content.truncated.gen_ai.tool.call.result``)."""
MAX_GRANT_RESOURCES = 32
"""Most resources a grant's span lists (the first, each once): a delegation names as many
capabilities as its caller passes, and each resource is at most 200 characters already."""
MAX_SPAN_FINDINGS = 16
"""Most findings a decision's span lists (``agentgate.finding.kinds`` and ``.codes``, the first, in
order): a refusal has one or two; the bound keeps a decision that gathered many within bounds."""
MAX_ATTRIBUTE_INT = 2**63 - 1
"""The largest integer an attribute may hold: OTLP carries integers as signed 64 bits, and its
encoder refuses a larger one, failing the export of the whole batch the span is in."""
ESSENTIAL = (
    "agentgate.audit.index",
    "agentgate.outcome.lost",
    "agentgate.decision",
    "agentgate.outcome",
    "error.type",
)
"""The attributes that say what a span decided and how it ended, in the order ``_span`` sets them
again as the span ends when its attribute limit dropped any (``_keep_essentials``): the
OpenTelemetry SDK drops the oldest attribute to make room for a new one, so these, set last, are
kept under any limit of ``len(ESSENTIAL)`` or more, and under a lower one the last of them
(``error.type`` first of all)."""
_RECORDED: weakref.WeakKeyDictionary[Span, dict[str, AttributeValue]] = weakref.WeakKeyDictionary()
"""The ``ESSENTIAL`` attributes each span was given (``_record``), kept beside the span: its own
attributes may have lost them to the limit, and what ``_span`` does with an exception (leave a
deny or an outcome alone) is read here. Until review R57 it was read from the span's attributes,
and with ``error.type`` dropped an exception relabelled a deny's span as a failure."""
_ENDS_HELD: ContextVar[tuple[int, list[Callable[[], None]]] | None] = ContextVar(
    "agentgate_span_ends_held", default=None
)
"""The thread that holds span ends back (``ends_held``) and the ends it holds, in order."""
_CALLER_SPAN = otel_context.create_key("agentgate-caller-span")
"""The context key of a remote caller's span context (``caller_linked``): the span a root span
started under it links to."""
_log = logging.getLogger(__name__)
_EXPORTERS = ("none", "console", "otlp")
"""The values ``configure_from_env`` reads in ``OTEL_TRACES_EXPORTER`` (any case)."""
_OTLP_PROTOCOLS = {
    "http/protobuf": (
        "opentelemetry.exporter.otlp.proto.http.trace_exporter",
        "opentelemetry-exporter-otlp-proto-http",
    ),
    "grpc": (
        "opentelemetry.exporter.otlp.proto.grpc.trace_exporter",
        "opentelemetry-exporter-otlp-proto-grpc",
    ),
}
"""The OTLP protocols ``configure_from_env`` reads (any case) in ``OTEL_EXPORTER_OTLP_TRACES_PROTOCOL``,
else ``OTEL_EXPORTER_OTLP_PROTOCOL`` (``http/protobuf`` when neither is set): the module of each
one's span exporter, and the package that holds it (``opentelemetry-exporter-otlp`` holds both).
OpenTelemetry's ``http/json`` has no Python exporter."""


def _cut(text: str) -> str:
    """``text`` as a span holds a name its caller gave: its first ``MAX_CALL_ID_CHARS``
    characters. A refused call built by hand (``Call(resource, action, args)``) may name a
    resource of any length (its action is at most ``MAX_NAME_LENGTH`` since review R56), and its
    span is the one that must reach the exporter;
    until review R56 only call ids were cut, and a refusal's span carried a 100,000-character
    action twice (its name and ``agentgate.action``). Until review R60 the helpers still set
    some of the text they are given whole: ``approval_span``'s resource, ``lease_outcome_span``'s
    resource and status, ``grant_span``'s action, dids, parent and resources, ``invoke_agent_span``'s
    agent id, ``chat_span``'s provider, ``record_usage``'s response model, ``record_revocation``'s
    grant, ``record_decision``'s policy and capability ids and a deny's reason (the span's status
    description), ``record_outcome``'s error type and an exception's class name; every one is cut
    here now. What is not valid Unicode (a lone surrogate: a model's name in a gateway request's
    JSON, ``"\\ud800"``) is escaped as the audit log records it (``\\ud800``, as
    ``gate._records.recordable`` does), then cut again: OTLP carries text as UTF-8, and until
    review R67 a refusal's span held the surrogate raw, which an OTLP exporter cannot encode, the
    other spans of its batch lost with it."""
    cut = text[:MAX_CALL_ID_CHARS]
    if cut.isascii():  # the usual case, known without encoding a copy
        return cut
    try:
        cut.encode()
    except UnicodeEncodeError:
        # Each character is escaped alone, so this is the first characters of the log's text.
        return cut.encode("utf-8", "backslashreplace").decode()[:MAX_CALL_ID_CHARS]
    return cut


def _text(value: object) -> str | None:
    """``value`` as a span records it (``_cut``) when it is text; else ``None``: the attribute is
    left off, as ``_attribute_int`` leaves off what is no integer OTLP carries."""
    return _cut(value) if isinstance(value, str) else None


def _name(parameter: str, value: object) -> str:
    """``value``, the text that names a span, cut (``_cut``); an ``InputError`` naming
    ``parameter`` when it is not text (a span opener calls this before its span starts)."""
    if not isinstance(value, str):
        raise InputError(f"{parameter}: a span's name is text, got {type(value).__name__}")
    return _cut(value)


def _bounded_content(attribute: str, text: str) -> dict[str, Any]:
    """The attributes that record ``text`` as the captured content ``attribute``: at most
    ``MAX_CONTENT_BYTES`` of its UTF-8 (``text`` is valid Unicode), cut where a character ends,
    and when cut ``agentgate.content.truncated.<attribute>=true`` beside it. Until review R56 a
    captured value was recorded whole, whatever its size."""
    if len(text) <= MAX_CONTENT_BYTES // 4:  # no character takes more than 4 bytes
        return {attribute: text}
    data = text.encode()
    if len(data) <= MAX_CONTENT_BYTES:
        return {attribute: text}
    # "ignore" drops only the partial character the cut may leave at the end.
    return {
        attribute: data[:MAX_CONTENT_BYTES].decode("utf-8", "ignore"),
        TRUNCATED + attribute: True,
    }


def get_tracer(provider: trace.TracerProvider | None = None) -> Tracer:
    """agentgate's tracer, from ``provider`` or the globally installed one."""
    return trace.get_tracer("agentgate", schema_url=SCHEMA_URL, tracer_provider=provider)


def _capture(record_content: bool | None) -> bool:
    if record_content is not None:
        return record_content
    return os.environ.get(CAPTURE_CONTENT_ENV, "").strip().lower() == "true"


@contextmanager
def _span(name: str, kind: SpanKind, attributes: Mapping[str, Any], tracer: Tracer | None) -> Iterator[Span]:
    """The span ``name`` made current for the block, ended once as the block leaves it, whatever
    the tracer's span processors or sampler do (``_started``, ``_end``). A span that could not
    start is ``INVALID_SPAN`` and the block runs with the current span as it was: the spans made
    inside it stay in their trace."""
    clean = {k: v for k, v in attributes.items() if v is not None}
    span = _started(tracer or get_tracer(), name, kind, clean)
    if span is None:
        yield INVALID_SPAN
        return
    try:
        # Only the exception's type is exported: its message (and a recorded exception event with
        # the message and stack) may hold a tool's arguments or a secret the audit log would redact.
        with trace.use_span(span, record_exception=False, set_status_on_exception=False):
            try:
                yield span
            except BaseException as exc:
                # A call recorded as paused (LangGraph's interrupt() raises to pause a tool) has
                # not failed; one whose outcome is recorded says how it ended (a stream cut
                # because its caller left: CallerGone, not the CancelledError that ends the
                # span); and a refusal recorded on the span (a refused delegation raises its
                # AuthorityError through it) keeps agentgate.denied and its reasons: the
                # exception that carries any of them out leaves the status alone.
                recorded = _RECORDED.get(span) or {}
                if "agentgate.outcome" not in recorded and recorded.get("error.type") != DENIED:
                    failure = _cut(type(exc).__qualname__)
                    _record(span, {"error.type": failure})
                    span.set_status(Status(StatusCode.ERROR, failure))
                raise
    finally:
        waiting = _AWAITING.get(span)
        if waiting is None or not waiting.left(time.time_ns()):
            _keep_essentials(span)
            _end_soon(span, name)


def _end_soon(span: Span, name: str, end_time: int | None = None) -> None:
    """End ``span`` now, or as the ``ends_held`` block of this thread leaves."""
    held = _ENDS_HELD.get()
    if held is not None and held[0] == threading.get_ident():
        held[1].append(lambda: _end(span, name, end_time))
    else:
        _end(span, name, end_time)


class _Awaited:
    """A call span whose end waits for its ``outcome`` entry (``await_outcome``): the status of
    the outcome, until it is written; when the span's block left (its end time); whether the
    outcome's fate is known (``settled``)."""

    __slots__ = ("_lock", "left_at", "name", "settled", "status")

    def __init__(self, name: str) -> None:
        self._lock = threading.Lock()
        self.name = name
        self.status: str | None = None
        self.left_at: int | None = None
        self.settled = False

    def left(self, at: int) -> bool:
        """The span's block left at ``at``: whether its end waits (the outcome's fate unknown)."""
        with self._lock:
            self.left_at = at
            return not self.settled

    def settle(self, span: Span, lost: str | None) -> None:
        """The outcome is written (``lost`` None), or will not be (``lost``: why, a store error's
        class name, or ``""`` for a gate that had closed): say so on ``span``, and end it if its
        block has left. Said under the lock ``left`` takes, so a block that leaves meanwhile ends
        the span with it said."""
        with self._lock:
            if self.settled:
                return
            self.settled = True
            left_at = self.left_at
            if lost is None:
                if self.status is not None:
                    _record(span, {"agentgate.outcome": self.status})
            else:
                recorded = _RECORDED.get(span)
                if recorded is not None:
                    recorded.pop("agentgate.outcome", None)
                why = _cut(lost)
                kind = (recorded or {}).get("error.type") or why or OUTCOME_LOST
                _record(span, {"agentgate.outcome.lost": True, "error.type": kind})
                span.set_status(
                    Status(StatusCode.ERROR, f"outcome not recorded: {why or 'the gate had closed'}")
                )
        if left_at is not None:
            _keep_essentials(span)
            _end_soon(span, self.name, left_at)


_AWAITING: weakref.WeakKeyDictionary[Span, _Awaited] = weakref.WeakKeyDictionary()
"""The spans whose end waits for their call's ``outcome`` entry (``await_outcome``)."""


def await_outcome(span: Span) -> None:
    """Hold ``span`` (a call's span, made by one of the helpers here) until its call's
    ``outcome`` entry is written (``outcome_written``) or known not to be
    (``outcome_not_written``): its block may leave before, its end then waits, and it ends at
    the time its block left. Meanwhile ``record_outcome`` keeps the outcome's status off the
    span: a span says ``agentgate.outcome`` only for an outcome the log holds (review R69: a
    call's span said ``agentgate.outcome=ok`` before its entry was written, and kept saying it
    when the store refused the entry). A span that records nothing is not held."""
    if span.is_recording() and span not in _AWAITING:
        _AWAITING[span] = _Awaited(getattr(span, "name", ""))


def outcome_written(span: Span) -> None:
    """The outcome ``span`` waits for (``await_outcome``) is in the log: ``agentgate.outcome``
    is set, and the span ends if its block has left."""
    waiting = _AWAITING.get(span)
    if waiting is not None:
        waiting.settle(span, None)


def outcome_not_written(span: Span, error_type: str | None = None) -> None:
    """The outcome ``span`` waits for (``await_outcome``) will not be in the log (``error_type``:
    the class name of the store error that refused it, or of what the ``Gate``'s last commit at
    ``close`` raised; ``None``: the gate had closed): the span
    is ERROR with ``agentgate.outcome.lost=true`` and no ``agentgate.outcome``; its
    ``error.type`` is the call's own failure if it failed, else ``error_type``, else
    ``agentgate.outcome_lost``. It ends if its block has left."""
    waiting = _AWAITING.get(span)
    if waiting is not None:
        waiting.settle(span, error_type or "")


class ends_held:  # lower case: called as the function it replaced was, as contextlib's nullcontext is
    """Hold back the end of every span whose block leaves inside this one, in this thread, and
    end them (in the order their blocks left) as this block leaves, raising or not. The ``Gate``
    holds its store lock inside it (``_serialized``): a span's end runs the span processors in
    the caller's thread (a ``SimpleSpanProcessor`` exports there and then), and until review R60
    an exporter that blocked as a refusal's span ended held every other thread's decision until
    the export returned. Nested, the outermost block ends them; another thread (a context
    copied into it) ends its spans itself.

    A class, not a ``@contextmanager`` generator: every ``Gate`` entry point enters one, and a
    generator's context manager costs twice as much (review R62, sixteenth performance pass,
    docs/langgraph.md)."""

    __slots__ = ("_ends", "_token")

    def __enter__(self) -> None:
        outer = _ENDS_HELD.get()
        ident = threading.get_ident()
        if outer is not None and outer[0] == ident:
            self._token: Token[tuple[int, list[Callable[[], None]]] | None] | None = None
            return
        self._ends: list[Callable[[], None]] = []
        self._token = _ENDS_HELD.set((ident, self._ends))

    def __exit__(self, *exc: object) -> None:
        if self._token is None:
            return
        _ENDS_HELD.reset(self._token)
        for end in self._ends:
            end()


def caller_linked(caller: otel_context.Context) -> otel_context.Context:
    """The current context, for work done for a remote, unauthenticated caller whose W3C trace
    context ``caller`` holds (a propagator's ``extract`` into an empty ``Context``): a span started
    in it with no span above it is a root of a trace of its own, sampled by the tracer
    provider's own sampler, with a ``Link`` to the caller's span (its trace id, span id, flags and
    ``tracestate``). A span continued the caller's trace until review R94, and an SDK sampler
    follows a remote parent's sampled flag (``ParentBased``, the default) or reads its trace id
    (``TraceIdRatioBased``): a caller that sent ``traceparent ...-00`` had no span made for its
    calls, its refusals included, and one that sent ``-01`` had every call sampled. With no
    valid span in ``caller`` (no header, or one the propagator refused), the current context
    as it is: the span starts a trace of its own, linked to nothing."""
    remote = trace.get_current_span(caller).get_span_context()
    if not remote.is_valid:
        return otel_context.get_current()
    return otel_context.set_value(_CALLER_SPAN, remote, trace.set_span_in_context(INVALID_SPAN))


def _caller_links() -> tuple[Link, ...] | None:
    """The ``Link`` to a remote caller's span (``caller_linked``) of a span starting now as a root,
    else None (a child span has its parent, which links it already)."""
    caller = otel_context.get_value(_CALLER_SPAN)
    if not isinstance(caller, SpanContext) or trace.get_current_span().get_span_context().is_valid:
        return None
    return (Link(caller),)


def _started(tracer: Tracer, name: str, kind: SpanKind, attributes: Mapping[str, Any]) -> Span | None:
    """The span ``name`` started, or None when starting it raised: the SDK calls every span
    processor's ``on_start`` (and the sampler) in the caller's thread and lets what they raise out.
    A span is evidence of a decision, never a condition of it: until review R60 a processor that raised made ``Gate.run`` raise before its tool ran,
    leaving the allow used up and its reservation held, and ``Gate.issue`` raise with the grant
    recorded. A root span started for a remote caller links the caller's span (``caller_linked``)."""
    try:
        return tracer.start_span(
            name,
            kind=kind,
            attributes=attributes,
            links=_caller_links(),
            record_exception=False,
            set_status_on_exception=False,
        )
    except Exception:
        _log.warning("agentgate: span %r was not started: the tracer raised", name, exc_info=True)
        return None


def _end(span: Span, name: str, end_time: int | None = None) -> None:
    """End ``span``; what its span processors raise (the SDK calls each one's ``on_end``, and
    a ``SimpleSpanProcessor``'s export, in the caller's thread) is logged, never raised: until
    review R60 it replaced the result of the call the span recorded (``Gate.run`` raised after
    its tool ran and its outcome was written, ``Gate.issue`` after its grant was recorded)."""
    try:
        span.end(end_time)
    except Exception:
        _log.warning("agentgate: a span processor raised as span %r ended", name, exc_info=True)


def _record(span: Span, values: Mapping[str, AttributeValue]) -> None:
    """Set ``values`` on ``span`` (one call: the SDK takes its lock once) and keep the
    ``ESSENTIAL`` ones beside it (``_RECORDED``)."""
    span.set_attributes(values)
    _remember(span, values)


def _remember(span: Span, values: Mapping[str, Any]) -> None:
    """Keep the ``ESSENTIAL`` attributes of ``values``, set on ``span``, beside it (``_RECORDED``)."""
    if span.is_recording():  # a span that records nothing keeps nothing (``INVALID_SPAN`` is shared)
        kept = _RECORDED.get(span)
        if kept is None:
            kept = _RECORDED[span] = {}
        kept.update((name, values[name]) for name in ESSENTIAL if values.get(name) is not None)


def _keep_essentials(span: Span) -> None:
    """Set the ``ESSENTIAL`` attributes recorded on ``span`` again, in that order, if its
    attribute limit (``OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT``, 128 by default) dropped any of its
    attributes: they are then its newest, which the SDK drops last. A span that dropped nothing
    costs one read."""
    if not getattr(span, "dropped_attributes", 0):
        return
    recorded = _RECORDED.get(span)
    if recorded:
        span.set_attributes({name: recorded[name] for name in ESSENTIAL if name in recorded})


@contextmanager
def invoke_agent_span(
    name: str, *, agent_id: str | None = None, tracer: Tracer | None = None
) -> Iterator[Span]:
    """A span for one run of the agent ``name`` (``agent_id``: its did, for example; the name cut
    to ``MAX_CALL_ID_CHARS`` characters)."""
    name = _name("name", name)
    attributes = {
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.agent.name": name,
        "gen_ai.agent.id": _text(agent_id),
    }
    with _span(f"invoke_agent {name}", SpanKind.INTERNAL, attributes, tracer) as span:
        yield span


@contextmanager
def execute_tool_span(
    name: str,
    *,
    call_id: str | None = None,
    tool_type: str = "function",
    arguments: Mapping[str, Any] | None = None,
    record_content: bool | None = None,
    tracer: Tracer | None = None,
) -> Iterator[Span]:
    """A span for one tool call. ``arguments`` are recorded only if content capture is opted in;
    ``name``, ``call_id`` and ``tool_type`` up to ``MAX_CALL_ID_CHARS`` characters (``_cut``;
    until review R68 ``tool_type`` was set as given)."""
    name = _name("name", name)
    attributes: dict[str, Any] = {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": name,
        "gen_ai.tool.call.id": _text(call_id),
        "gen_ai.tool.type": _text(tool_type),
    }
    if arguments is not None and _capture(record_content):
        # Arguments without a canonical form (NaN, a lone surrogate...) are not recorded; the call goes on.
        with contextlib.suppress(InputError):
            attributes |= _bounded_content(
                "gen_ai.tool.call.arguments", canonical_json(dict(arguments)).decode()
            )
    with _span(f"execute_tool {name}", SpanKind.INTERNAL, attributes, tracer) as span:
        yield span


def record_tool_result(span: Span, result: Any, *, record_content: bool | None = None) -> None:
    """Set ``gen_ai.tool.call.result`` if content capture is opted in; otherwise record nothing.
    A result JSON cannot encode (keys of mixed types, a cycle, nesting past the recursion limit),
    one holding an object whose ``str()`` raises (what JSON cannot encode is written as its
    ``str()``), or text that is not valid Unicode (a lone surrogate) is not recorded: the call
    goes on, as with arguments. Until review R60 an object whose ``str()`` raised (a
    ``RuntimeError``, say) raised out of this function after the tool had run."""
    if not _capture(record_content):
        return
    try:
        text = result if isinstance(result, str) else json.dumps(result, default=str, sort_keys=True)
        text.encode()  # UnicodeEncodeError (a ValueError): not UTF-8, as OTLP carries text
    except Exception:  # whatever a result's own __str__ raises, as well as json's TypeError, ValueError
        return
    span.set_attributes(_bounded_content("gen_ai.tool.call.result", text))


@contextmanager
def chat_span(model: str, *, provider: str | None = None, tracer: Tracer | None = None) -> Iterator[Span]:
    """A span for one chat model call to ``model`` (``provider``: e.g. ``openai``, ``vllm``; the
    model's name cut to ``MAX_CALL_ID_CHARS`` characters)."""
    model = _name("model", model)
    attributes = {
        "gen_ai.operation.name": "chat",
        "gen_ai.request.model": model,
        "gen_ai.provider.name": _text(provider),
    }
    with _span(f"chat {model}", SpanKind.CLIENT, attributes, tracer) as span:
        yield span


@contextmanager
def decision_span(resource: str, action: str, *, tracer: Tracer | None = None) -> Iterator[Span]:
    """A span for a decision on a resource that is neither a tool nor a model (``gpu:h100``
    leases): ``{action} {resource}`` (INTERNAL) with ``agentgate.resource`` and
    ``agentgate.action``, each cut to ``MAX_CALL_ID_CHARS`` characters; no ``gen_ai.*``
    attribute, since it is no GenAI operation."""
    resource, action = _name("resource", resource), _name("action", action)
    attributes = {"agentgate.resource": resource, "agentgate.action": action}
    with _span(f"{action} {resource}", SpanKind.INTERNAL, attributes, tracer) as span:
        yield span


@contextmanager
def grant_span(
    action: str,
    name: str,
    *,
    issuer: str,
    audience: str,
    parent: str | None = None,
    resources: Iterable[str] = (),
    tracer: Tracer | None = None,
) -> Iterator[Span]:
    """A span for one grant decision: ``{action} agent:{name}`` (INTERNAL; ``action`` is
    ``issue`` or ``delegate``), as ``decision_span`` makes for ``agent:{name}``, with the grant's
    ``issuer`` and ``audience`` (dids), the ``parent`` grant it is delegated from, and the first
    ``MAX_GRANT_RESOURCES`` distinct ``resources`` of its capabilities. ``name`` (the caller's,
    of any length) is cut to ``MAX_CALL_ID_CHARS`` characters. The decision is
    ``record_decision``'s: the new grant as ``capability_id``, or the refusal."""
    action, resource = _name("action", action), f"agent:{_name('name', name)}"
    listed: dict[str, None] = {}
    for named in resources or ():
        if len(listed) == MAX_GRANT_RESOURCES:
            break
        text = _text(named)
        if text is not None:
            listed[text] = None
    attributes = {
        "agentgate.resource": resource,
        "agentgate.action": action,
        "agentgate.grant.issuer": _text(issuer),
        "agentgate.grant.audience": _text(audience),
        "agentgate.grant.parent": _text(parent),
        "agentgate.grant.resources": list(listed) or None,
    }
    with _span(f"{action} {resource}", SpanKind.INTERNAL, attributes, tracer) as span:
        yield span


@contextmanager
def revoke_span(by: str, *, holder: bool = False, tracer: Tracer | None = None) -> Iterator[Span]:
    """A span for one revocation (``Gate.revoke``): ``revoke grant`` (INTERNAL); with ``holder``,
    the revocation of every grant of a key (``Gate.revoke_holder``): ``revoke holder``, holding a
    ``revoke grant`` span per grant it revoked (the caller adds ``agentgate.grant.audience``, the
    key's did, and the counts). ``agentgate.action`` is ``revoke``; ``agentgate.revoke.by`` who
    revokes (as the ``revoke`` entry's principal, cut to ``MAX_CALL_ID_CHARS`` characters). The
    reason is not recorded (free text). What was revoked is ``record_revocation``'s."""
    attributes = {"agentgate.action": "revoke", "agentgate.revoke.by": _text(by)}
    with _span("revoke holder" if holder else "revoke grant", SpanKind.INTERNAL, attributes, tracer) as span:
        yield span


@contextmanager
def approval_span(
    resource: str, approver: str, request_id: str, *, audit_index: int, tracer: Tracer | None = None
) -> Iterator[Span]:
    """A span for one approver's counted yes (an ``approval_given`` entry): ``approve {resource}``
    (INTERNAL) with ``agentgate.action=approve``, ``agentgate.resource`` (the call's),
    ``agentgate.approval.approver`` (the approver's did, the entry's principal),
    ``agentgate.approval.request`` (the request answered; both cut to ``MAX_CALL_ID_CHARS``
    characters) and ``agentgate.audit.index`` (its ``approval_given`` entry). No
    ``agentgate.decision``: the decision is the call's, on the call's own span."""
    resource = _name("resource", resource)
    attributes = {
        "agentgate.action": "approve",
        "agentgate.resource": resource,
        "agentgate.approval.approver": _text(approver),
        "agentgate.approval.request": _text(request_id),
        "agentgate.audit.index": _attribute_int(audit_index),
    }
    with _span(f"approve {resource}", SpanKind.INTERNAL, attributes, tracer) as span:
        _remember(span, attributes)
        yield span


@contextmanager
def lease_outcome_span(
    resource: str,
    status: str,
    *,
    lease_id: str,
    audit_index: int,
    ref: int | None = None,
    tracer: Tracer | None = None,
) -> Iterator[Span]:
    """A span for one thing that happened to a GPU lease after its decision (an ``outcome`` entry
    of ``GatedBroker``): ``{status} {resource}`` (INTERNAL; ``lease_granted gpu:h100``,
    ``lease_released gpu:h100``, ...) with ``agentgate.resource``, ``agentgate.action=lease``,
    ``agentgate.lease.id`` (the request's id, cut to ``MAX_CALL_ID_CHARS`` characters),
    ``agentgate.outcome`` (the status), ``agentgate.audit.index`` (the ``outcome`` entry) and
    ``agentgate.audit.ref`` (the decision it refers to, when it has one). An ``error`` outcome
    marks the span ERROR (``record_outcome``). No ``agentgate.decision``: the decision is on
    its own ``lease {resource}`` span."""
    resource, status = _name("resource", resource), _name("status", status)
    attributes = {
        "agentgate.resource": resource,
        "agentgate.action": "lease",
        "agentgate.lease.id": _text(lease_id),
        "agentgate.audit.index": _attribute_int(audit_index),
        "agentgate.audit.ref": _attribute_int(ref),
    }
    with _span(f"{status} {resource}", SpanKind.INTERNAL, attributes, tracer) as span:
        _remember(span, attributes)
        record_outcome(span, status)
        yield span


def record_revocation(
    span: Span,
    grant_id: str,
    *,
    already: bool,
    descendants: int | None = None,
    audit_index: int | None = None,
) -> None:
    """The grant a ``revoke grant`` span revoked: ``agentgate.capability.id`` (the grant, as the
    ``revoke`` entry's ``chain_hash``), ``agentgate.revoke.already`` (it was revoked before:
    nothing was written, and there is no ``agentgate.audit.index``), ``agentgate.revoke.descendants``
    (how many grants recorded below it are dead with it) and ``agentgate.audit.index`` (its
    ``revoke`` entry)."""
    values: dict[str, Any] = {
        "agentgate.capability.id": _text(grant_id),
        "agentgate.revoke.already": already,
        "agentgate.revoke.descendants": _attribute_int(descendants),
        "agentgate.audit.index": _attribute_int(audit_index),
    }
    _record(span, {k: v for k, v in values.items() if v is not None})


def record_agent_name(span: Span, name: str) -> None:
    """The name of the agent whose decision the span records, as ``gen_ai.agent.name`` (cut and
    escaped as every name: ``_cut``). Until review R67 the ``Gate`` set the name's first
    characters itself, and the refusal of an identity built by hand under a name holding a lone
    surrogate put the surrogate on its span."""
    text = _text(name)
    if text is not None:
        span.set_attribute("gen_ai.agent.name", text)


def record_usage(
    span: Span, input_tokens: int, output_tokens: int, *, response_model: str | None = None
) -> None:
    """Token usage of a model call, as ``gen_ai.usage.*`` (and the model that answered).

    Only two token counts are recorded: integers from 0 to ``MAX_ATTRIBUTE_INT``. Anything else
    (a negative count, a fraction, a bool, text, a count past what OTLP carries) records no usage:
    the ``Gate`` charges such a call as reserved and its audit outcome says why, so the span must
    not show a count the log refused. Until review R56 ``int()`` of either was set (``"7"`` as 7,
    ``True`` as 1, 2.9 as 2, -5 as is, and 2**63, which an OTLP exporter cannot encode: its whole
    batch of spans was dropped)."""
    if _token_count(input_tokens) and _token_count(output_tokens):
        span.set_attribute("gen_ai.usage.input_tokens", input_tokens)
        span.set_attribute("gen_ai.usage.output_tokens", output_tokens)
    model = _text(response_model)
    if model is not None:
        span.set_attribute("gen_ai.response.model", model)


def _attribute_int(value: object) -> int | None:
    """``value`` when it is an ``int`` (not a bool) OTLP carries, a signed 64-bit integer; else
    ``None`` (the attribute is left off): one integer past that range fails the OTLP export of
    the whole batch its span is in."""
    if type(value) is int and -MAX_ATTRIBUTE_INT - 1 <= value <= MAX_ATTRIBUTE_INT:
        return value
    return None


def _token_count(value: object) -> bool:
    """Whether ``value`` is a token count a span can carry: an ``int`` (not a bool) from 0 to
    ``MAX_ATTRIBUTE_INT``."""
    return type(value) is int and 0 <= value <= MAX_ATTRIBUTE_INT


def record_decision(
    span: Span,
    decision: str,
    *,
    policy_id: str | None = None,
    capability_id: str | None = None,
    chain_depth: int | None = None,
    budget_remaining: int | None = None,
    audit_index: int | None = None,
    reason: str | None = None,
    findings: Iterable[Finding] = (),
) -> None:
    """The authority decision behind the span (``budget_remaining``: what the caller knows is
    left of the caller's budget; the ``Gate`` passes none). A ``deny`` marks the span ERROR,
    ``agentgate.denied``, with ``reason`` (its first ``MAX_CALL_ID_CHARS`` characters) as the status description.
    ``findings`` (the decision's, as its audit entry lists them ``kind:code``) are
    ``agentgate.finding.kinds`` and ``agentgate.finding.codes``, two lists in the same order, the
    first ``MAX_SPAN_FINDINGS`` of them, each code cut to ``MAX_CALL_ID_CHARS`` characters; their
    messages, which may quote an argument, are not recorded (review R62: until then a refusal's
    kind was only in its description).
    ``agentgate.decision``, ``agentgate.audit.index`` and a deny's ``error.type`` are
    ``ESSENTIAL``: set last, and again as an agentgate span ends if its attribute limit dropped
    any, so that a low limit keeps them; an exception that leaves the span later does not
    relabel a deny. ``decision`` is cut as every name; ``chain_depth``, ``budget_remaining`` and
    ``audit_index`` are set only when each is an integer OTLP carries (``_attribute_int``): until
    review R68 a count past 2**63 - 1, a bool, a fraction or text was set as given."""
    values: dict[str, Any] = {
        "agentgate.policy.id": _text(policy_id),
        "agentgate.capability.id": _text(capability_id),
        "agentgate.chain.depth": _attribute_int(chain_depth),
        "agentgate.budget.remaining": _attribute_int(budget_remaining),
        "agentgate.audit.index": _attribute_int(audit_index),
    }
    # None or an element that is no ``Finding`` is left off as every value not what it should be
    # (review R92: a TypeError or AttributeError in the caller's block, after its work ran).
    findings = (f for f in findings or () if isinstance(f, Finding))
    listed = [(str(f.kind), _cut(f.code)) for f in itertools.islice(findings, MAX_SPAN_FINDINGS)]
    if listed:
        values["agentgate.finding.kinds"] = [kind for kind, _ in listed]
        values["agentgate.finding.codes"] = [code for _, code in listed]
    essential = {k: v for k, v in values.items() if v is not None}
    decided = _text(decision)
    if decided is not None:
        essential["agentgate.decision"] = decided
    if decided == "deny":  # the text's ``==``, not a value's own (review R92)
        essential["error.type"] = DENIED
        span.set_status(Status(StatusCode.ERROR, _text(reason) or "denied by agentgate"))
    _record(span, essential)


def record_outcome(span: Span, status: str, *, error_type: str | None = None) -> None:
    """How a call that ran ended, as its audit outcome says: ``agentgate.outcome`` is ``status``
    (``ok``, ``error``, ``paused``). An ``error`` marks the span ERROR with ``error.type``:
    ``error_type`` (an exception's class name, cut as every name) or ``agentgate.failed`` (the
    call returned a failure). ``status`` is cut as every name (until review R68 it was set as
    given); one that is not text records nothing, a non-text ``error_type`` is
    ``agentgate.failed`` (``_text``, review R92). ``ok`` and ``paused`` leave the status as it is, and after
    ``paused`` an exception leaving the span (the one that carries the pause out) does not mark
    it ERROR."""
    text = _text(status)
    if text is None:
        return
    status = text
    waiting = _AWAITING.get(span)
    if waiting is not None and not waiting.settled:
        # Set once the outcome is written (``outcome_written``); known here, for ``_span``.
        waiting.status = status
        _remember(span, {"agentgate.outcome": status})
        outcome: dict[str, AttributeValue] = {}
    else:
        outcome = {"agentgate.outcome": status}
    if status == "error":
        kind = _text(error_type) or FAILED
        _record(span, {**outcome, "error.type": kind})
        span.set_status(Status(StatusCode.ERROR, kind))
    else:
        _record(span, outcome)


def _otlp_exporter(exporters: str) -> SpanExporter:
    """The OTLP span exporter of the protocol the environment names (``_OTLP_PROTOCOLS``), made
    with no argument: the exporter reads its endpoint, headers and the rest from ``OTEL_*``
    itself. Raises ``InputError`` naming the variable for a protocol not in ``_OTLP_PROTOCOLS``,
    and naming the package to install when the protocol's exporter is not importable. Until
    review R94 the protocol was not read: ``grpc`` (a collector's port 4317) got the
    http/protobuf exporter, and every span was lost."""
    protocol, named = "http/protobuf", "its protocol the default, http/protobuf"
    for name in ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"):
        if value := os.environ.get(name, "").strip():  # empty is unset, as the specification reads it
            protocol, named = value, f"{name}={value!r}"
            break
    if protocol.lower() not in _OTLP_PROTOCOLS:
        raise InputError(f"{named} is not supported ({', '.join(_OTLP_PROTOCOLS)})")
    module, package = _OTLP_PROTOCOLS[protocol.lower()]
    try:  # optional package: imported by name so that agentgate does not require it
        otlp = importlib.import_module(module)
    except ImportError as exc:
        raise InputError(
            f"OTEL_TRACES_EXPORTER={exporters!r} names otlp, and {named}, which needs: "
            f"pip install {package} (or opentelemetry-exporter-otlp, which holds both protocols)"
        ) from exc
    exporter: SpanExporter = otlp.OTLPSpanExporter()
    return exporter


def configure_from_env() -> trace.TracerProvider:
    """Install a TracerProvider built from the standard ``OTEL_*`` variables, and return it.

    ``OTEL_SERVICE_NAME`` and ``OTEL_RESOURCE_ATTRIBUTES`` name the resource;
    ``OTEL_TRACES_EXPORTER`` is ``none`` (default, also when empty), ``console`` or ``otlp``, or a
    comma-separated list of them, in any case (the OpenTelemetry specification reads enumerated
    values case-insensitively; surrounding white space, a CRLF env file's carriage return among it, is
    ignored); ``otlp`` exports by the protocol ``OTEL_EXPORTER_OTLP_TRACES_PROTOCOL``, else
    ``OTEL_EXPORTER_OTLP_PROTOCOL``, names: ``http/protobuf`` (default) or ``grpc`` (any case),
    and needs that protocol's exporter package (``opentelemetry-exporter-otlp`` holds both). Any
    other exporter name or protocol, or ``otlp`` without the package, is an ``InputError``
    naming the variable and its value, raised before anything is built or installed (no
    exporter thread is left running). Applications that
    configure OpenTelemetry themselves should not call this; if a provider is installed already
    (an earlier call, the application's own), that one is returned and nothing is built:
    OpenTelemetry never replaces an installed provider, so a second one would export nothing and
    keep its exporter's thread alive.
    """
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter

    installed = trace.get_tracer_provider()
    if not isinstance(installed, trace.ProxyTracerProvider):
        return installed
    raw = os.environ.get("OTEL_TRACES_EXPORTER", "none")
    # Each named once, in the order given ("console,console" would print every span twice).
    names = list(dict.fromkeys(e.strip().lower() for e in raw.split(",") if e.strip()))
    unknown = [name for name in names if name not in _EXPORTERS]
    if unknown:
        raise InputError(
            f"OTEL_TRACES_EXPORTER={raw!r}: {unknown[0]!r} is not supported (none, console, otlp)"
        )
    # Every exporter is made before any processor starts its thread: a failure (``otlp`` without
    # its package) leaves nothing running.
    exporters: list[SpanExporter] = []
    for name in names:
        if name == "console":
            exporters.append(ConsoleSpanExporter())
        elif name == "otlp":
            exporters.append(_otlp_exporter(raw))
    provider = TracerProvider(resource=Resource.create())
    for exporter in exporters:
        provider.add_span_processor(BatchSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    return provider
