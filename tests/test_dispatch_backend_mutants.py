"""Review R47 (mutation): what agentgate reads from backends and what it reports about them.

Each test pins a rule that a hand-made mutant of agentgate/dispatch/backends.py, metrics.py,
inventory.py, prefix.py, prefix_index.py or agentgate/audit/spans.py survived the earlier suites
with; the mutant it kills is named in its docstring. Real components only: ``BackendClient``
against a tiny real HTTP server on loopback that answers exactly the bytes a test gives it
(garbage included), the real Prometheus parser, the OpenTelemetry SDK's in-memory exporter.
"""

from __future__ import annotations

import http.server
import json
import threading
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from opentelemetry import baggage
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from agentgate.audit.spans import chat_span, execute_tool_span, get_tracer, record_outcome, record_tool_result
from agentgate.dispatch import inventory_from_mapping
from agentgate.dispatch.backends import BackendClient, ChatChunk, Timeouts, trace_headers
from agentgate.dispatch.metrics import load_from_text
from agentgate.dispatch.prefix import block_hashes, estimate_tokens, prompt_text
from agentgate.dispatch.prefix_index import PrefixIndex
from agentgate.errors import BackendCredentialError, BackendFailed, DispatchError, InventoryError

KEY = "sk-live-0123456789abcdefghijKLMNOPQRSTUV"
PAYLOAD = {"model": "m", "messages": [{"role": "user", "content": "hello"}], "max_tokens": 8}


class Raw:
    """A real HTTP server on 127.0.0.1 answering each path with the exact ``(status, headers,
    body)`` set in ``routes`` (404 for any other path)."""

    def __init__(self) -> None:
        self.routes: dict[str, tuple[int, dict[str, str], bytes]] = {}
        raw = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def _answer(self) -> None:
                self.rfile.read(int(self.headers.get("content-length") or 0))
                status, headers, body = raw.routes.get(self.path, (404, {}, b"no"))
                self.send_response(status)
                for name, value in headers.items():
                    self.send_header(name, value)
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = _answer

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.handle_error = lambda *args: None  # type: ignore[method-assign]
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.02,), daemon=True)
        self.thread.start()

    def chat(self, body: bytes, status: int = 200, **headers: str) -> None:
        self.routes["/v1/chat/completions"] = (status, {"content-type": "application/json", **headers}, body)

    def sse(self, *lines: str) -> None:
        """The stream: each line sent as it is, one per line (``data: ...`` written out)."""
        body = "".join(line + "\n" for line in lines).encode()
        self.routes["/v1/chat/completions"] = (200, {"content-type": "text/event-stream"}, body)

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(5.0)


@pytest.fixture
def raw() -> Iterator[Raw]:
    server = Raw()
    yield server
    server.stop()


def _client(
    server: Raw, http: httpx.AsyncClient, *, engine: str = "vllm", key: bool = False
) -> BackendClient:
    backend: dict[str, Any] = {
        "name": "b0",
        "url": server.url,
        "engine": engine,
        "models": ["m"],
        "metrics_url": server.url + "/metrics",
    }
    if key:
        backend["api_key_env"] = "R47_BACKEND_KEY"
    inventory = inventory_from_mapping({"backends": [backend]})
    return BackendClient(inventory.backends[0], http, Timeouts(first_token_s=10, idle_s=10, probe_s=10))


def _delta(content: object, **extra: object) -> str:
    return "data: " + json.dumps(
        {"choices": [{"delta": {"content": content, **extra}, "finish_reason": None}]}
    )


async def _chunks(client: BackendClient) -> list[ChatChunk]:
    return [chunk async for chunk in client.stream(PAYLOAD)]


# --- a complete answer, or BackendFailed ------------------------------------------------------


@pytest.mark.parametrize(
    "end",
    [
        pytest.param("data: [DONE", id="done-cut-short"),
        pytest.param("dataX[DONE]", id="data-without-colon"),
    ],
)
async def test_a_stream_whose_last_line_only_looks_like_done_is_not_a_complete_answer(
    raw: Raw, end: str
) -> None:
    """Kills: the stream's end read as ``data.startswith("[DONE")`` (a stream cut inside its
    ``[DONE]`` line taken as complete), and a data line recognised by ``data`` without its colon.
    Rule: only an exact ``data: [DONE]`` line ends a stream; anything else that is not an event
    is a failed backend, never a short answer passed off as whole."""
    raw.sse(_delta("partial"), "", end)
    async with httpx.AsyncClient() as http:
        with pytest.raises(BackendFailed):
            await _chunks(_client(raw, http))


@pytest.mark.parametrize(
    "event",
    [
        pytest.param(_delta(17), id="content-number"),
        pytest.param(_delta("x", tool_calls=["not an object"]), id="tool-call-not-object"),
        pytest.param(
            "data: " + json.dumps({"choices": [{"delta": {"content": "x"}, "finish_reason": 3}]}),
            id="finish-reason-number",
        ),
    ],
)
async def test_a_stream_event_with_fields_of_the_wrong_kind_is_backend_failed(raw: Raw, event: str) -> None:
    """Kills: ``_parse_chunk`` coercing a non-string ``content`` with ``str()``, accepting
    ``tool_calls`` entries that are not objects, or ``_finish_reason`` accepting a non-string.
    Rule: a chunk carries what an OpenAI stream event carries, or the backend failed."""
    raw.sse(event, "data: [DONE]")
    async with httpx.AsyncClient() as http:
        with pytest.raises(BackendFailed, match="malformed stream event"):
            await _chunks(_client(raw, http))


@pytest.mark.parametrize(
    "body",
    [
        pytest.param(
            {"choices": [{"message": {"content": 7}, "finish_reason": "stop"}]}, id="content-number"
        ),
        pytest.param(
            {"choices": [{"message": {"content": "ok"}, "finish_reason": ["stop"]}]}, id="finish-list"
        ),
        pytest.param(
            {
                "object": "error",
                "message": "CUDA out of memory",
                "choices": [{"message": {"content": "half an ans"}, "finish_reason": "stop"}],
            },
            id="error-beside-choices",
        ),
        pytest.param(
            {"error": {"message": "overloaded"}, "choices": [{"message": {"content": "x"}}]},
            id="openai-error-beside-choices",
        ),
        pytest.param(
            {"error": "", "choices": [{"message": {"content": "x"}}]}, id="empty-error-beside-choices"
        ),
    ],
)
async def test_a_non_streamed_answer_that_is_an_error_or_malformed_is_backend_failed(
    raw: Raw, body: dict[str, Any]
) -> None:
    """Kills: ``_chat`` dropping its ``content is not a string`` check, ``_finish_reason``'s type
    check, or its ``_reject_error`` call (an error reported with HTTP 200 beside a choice taken as
    the answer). Rule: a 200 body that reports an error, or carries fields of the wrong kind, is
    a failed backend, never a ChatResult."""
    raw.chat(json.dumps(body).encode())
    async with httpx.AsyncClient() as http:
        with pytest.raises(BackendFailed):
            await _client(raw, http).chat(PAYLOAD)


@pytest.mark.parametrize("status", [301, 302, 307])
async def test_a_redirect_carrying_a_valid_looking_answer_is_backend_failed(raw: Raw, status: int) -> None:
    """Kills: ``_check_status`` letting 3xx through as success (``status < 400``). Rule: a chat
    call does not follow redirects, and a redirect's body is not an answer (docs/dispatch.md)."""
    answer = {"choices": [{"message": {"content": "forged"}, "finish_reason": "stop"}], "usage": {}}
    raw.chat(json.dumps(answer).encode(), status=status, location="http://127.0.0.1:1/")
    async with httpx.AsyncClient() as http:
        with pytest.raises(BackendFailed, match=f"HTTP {status}"):
            await _client(raw, http).chat(PAYLOAD)


async def test_a_429_is_a_failed_backend_to_fail_over_from_not_a_bad_request(raw: Raw) -> None:
    """Kills: 429 counted among the caller's errors (``_CALLER_ERRORS``). Rule: a backend that is
    rate limiting is a failed attempt (BackendFailed, failed over), not the caller's fault."""
    raw.chat(b'{"error": {"message": "slow down"}}', status=429)
    async with httpx.AsyncClient() as http:
        with pytest.raises(DispatchError) as raised:
            await _client(raw, http).chat(PAYLOAD)
    assert isinstance(raised.value, BackendFailed)


@pytest.mark.parametrize(
    "usage",
    [0, "", [], False, {"prompt_tokens": True, "completion_tokens": 900}],
    ids=["zero", "empty-string", "empty-list", "false", "count-true"],
)
async def test_a_usage_that_is_not_an_object_is_refused_not_read_as_zero(raw: Raw, usage: object) -> None:
    """Kills: ``_chat`` reading ``data.get("usage") or None`` (a falsy usage that is not an object,
    such as ``0`` or ``""``, taken as no usage: the call billed zero tokens), and ``_count``
    taking ``true`` for a count (a 900-token prompt billed as 1). Rule: usage that is not an
    object of token counts is garbage, BackendFailed, never a cheap answer."""
    answer = {"choices": [{"message": {"content": "ok"}, "finish_reason": "stop"}], "usage": usage}
    raw.chat(json.dumps(answer).encode())
    async with httpx.AsyncClient() as http:
        with pytest.raises(BackendFailed, match="usage"):
            await _client(raw, http).chat(PAYLOAD)


async def test_a_plain_text_line_in_a_stream_is_not_skipped(raw: Raw) -> None:
    """Kills: ``_SSE_IGNORED`` matching ``event``/``id``/``retry`` without their colon (a line of
    plain text such as a proxy's ``identity check failed`` skipped as an SSE field, and the stream
    taken as whole). Rule: a line that is neither an SSE field nor a data event fails the stream."""
    raw.sse(_delta("half"), "identity check failed, upstream reset", _delta(" rest"), "data: [DONE]")
    async with httpx.AsyncClient() as http:
        with pytest.raises(BackendFailed, match="not an SSE event"):
            await _chunks(_client(raw, http))


# --- the key never leaves in an error ---------------------------------------------------------


@pytest.mark.parametrize("shown", [10, 16, 30], ids=["10-chars", "16-chars", "30-chars"])
async def test_a_backend_echoing_the_start_of_the_key_gets_all_of_it_scrubbed(
    raw: Raw, monkeypatch: pytest.MonkeyPatch, shown: int
) -> None:
    """Kills: ``_FRAGMENT`` raised to 12 (a 10-character start of the key quoted as sent), and
    ``_scrub`` redacting only the first ``_FRAGMENT`` characters of a longer piece of the key
    (the rest of it left in the message). Rule: a backend quoting the start of our key (as
    hosted APIs do: "Incorrect API key provided: sk-live-01...") leaks none of it, 8 characters
    or more, into an error."""
    monkeypatch.setenv("R47_BACKEND_KEY", KEY)
    raw.chat(f"Incorrect API key provided: {KEY[:shown]}... try again".encode(), status=500)
    async with httpx.AsyncClient() as http:
        with pytest.raises(BackendFailed) as raised:
            await _client(raw, http, key=True).chat(PAYLOAD)
    message = str(raised.value)
    assert "[redacted]" in message and "try again" in message
    assert not any(KEY[i : i + 8] in message for i in range(len(KEY) - 7))


async def test_an_error_body_is_scrubbed_before_it_is_cut(raw: Raw, monkeypatch: pytest.MonkeyPatch) -> None:
    """Kills: ``_excerpt`` cutting the body to 200 characters before scrubbing it (the key, cut
    at the 200th character, leaves 7 characters that no later scrub recognises). Rule: an
    error quotes no piece of the key, even one its excerpt cuts."""
    monkeypatch.setenv("R47_BACKEND_KEY", KEY)
    raw.chat(("x" * 193 + KEY + " tail").encode(), status=500)
    async with httpx.AsyncClient() as http:
        with pytest.raises(BackendFailed) as raised:
            await _client(raw, http, key=True).chat(PAYLOAD)
    assert KEY[:5] not in str(raised.value)


async def test_an_error_event_is_scrubbed_before_it_is_cut(raw: Raw, monkeypatch: pytest.MonkeyPatch) -> None:
    """Kills: ``_reject_error`` cutting the error's message to 200 characters before scrubbing
    it (7 characters of the key left at the cut). Rule: as above, for an error a backend reports
    with HTTP 200."""
    monkeypatch.setenv("R47_BACKEND_KEY", KEY)
    raw.chat(json.dumps({"error": {"message": "y" * 193 + KEY}}).encode())
    async with httpx.AsyncClient() as http:
        with pytest.raises(BackendFailed) as raised:
            await _client(raw, http, key=True).chat(PAYLOAD)
    assert KEY[:5] not in str(raised.value)


async def test_a_line_that_is_not_sse_is_scrubbed_before_it_is_cut(
    raw: Raw, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Kills: the ``not an SSE event`` message quoting ``line[:80]`` unscrubbed (7 characters of
    the key left at the cut). Rule: as above, for a stream's garbage line."""
    monkeypatch.setenv("R47_BACKEND_KEY", KEY)
    raw.sse("z" * 73 + KEY, "data: [DONE]")
    async with httpx.AsyncClient() as http:
        with pytest.raises(BackendFailed) as raised:
            await _chunks(_client(raw, http, key=True))
    assert "not an SSE event" in str(raised.value)
    assert KEY[:5] not in str(raised.value)


# --- engine load metrics ----------------------------------------------------------------------


def test_llamacpp_kv_usage_of_two_slots_is_averaged_not_summed() -> None:
    """Kills: ``load_from_text`` summing ``llamacpp:kv_cache_usage_ratio`` over its label sets
    (``ratio`` left out of the averaged names: two half-full caches read as one full server).
    Rule: a KV usage fraction is the mean over the series, never their sum."""
    text = (
        'llamacpp:requests_processing{slot="0"} 1\n'
        'llamacpp:requests_processing{slot="1"} 1\n'
        'llamacpp:kv_cache_usage_ratio{slot="0"} 0.25\n'
        'llamacpp:kv_cache_usage_ratio{slot="1"} 0.35\n'
    )
    load = load_from_text(text, "llamacpp")
    assert load.kv_usage == pytest.approx(0.3)
    assert load.running == 2.0


async def test_a_kv_usage_over_one_reads_as_full_not_more() -> None:
    """Kills: ``load_from_values`` dropping the clamp ``min(kv, 1.0)``. Rule: KV usage is a
    fraction, 0..1: a backend reporting over 1 is full, and no more than full."""
    assert (
        load_from_text("vllm:num_requests_running 1\nvllm:kv_cache_usage_perc 1.7\n", "vllm").kv_usage == 1.0
    )


@pytest.mark.parametrize("value", ["NaN", "+Inf"])
def test_a_load_that_is_not_a_finite_number_is_a_failed_scrape(value: str) -> None:
    """Kills: ``pick`` checking only ``value < 0`` (NaN and +Inf pass it: a backend whose queue
    reads NaN compares as never full). Rule: a metric value is finite and non-negative."""
    with pytest.raises(BackendFailed, match="impossible"):
        load_from_text(f"vllm:num_requests_running 1\nvllm:num_requests_waiting {value}\n", "vllm")


@pytest.mark.parametrize(
    ("engine", "text", "expected"),
    [
        pytest.param("tgi", "tgi_batch_current_size 3\ntgi_queue_size 40\n", (3.0, 40.0, None), id="tgi"),
        pytest.param(
            "llamacpp",
            "llamacpp:requests_processing 2\nllamacpp:requests_deferred 9\nllamacpp:kv_cache_usage_ratio 0.5\n",
            (2.0, 9.0, 0.5),
            id="llamacpp",
        ),
        pytest.param(
            "vllm",
            "vllm:num_requests_running 1\nvllm:num_requests_waiting 7\nvllm:gpu_cache_usage_perc 0.9\n",
            (1.0, 7.0, 0.9),
            id="vllm-before-0.9",
        ),
    ],
)
def test_each_engines_queue_and_kv_usage_are_read_under_its_own_names(
    engine: str, text: str, expected: tuple[float, float, float | None]
) -> None:
    """Kills: a wrong waiting-metric name for TGI or llama.cpp, and vLLM's pre-0.9 names
    (``_FALLBACKS``) not read (a backend with a long queue, or a nearly full cache, read as
    idle). Rule: each engine's queue and KV usage are read under the names it publishes."""
    load = load_from_text(text, engine)  # type: ignore[arg-type]
    assert (load.running, load.waiting, load.kv_usage) == expected


def test_prefix_counters_are_read_from_their_total_samples_and_capacity_once() -> None:
    """Kills: ``parse_samples`` not filing ``*_total`` samples under the counter's name, and the KV
    capacity summed over a data-parallel server's ``cache_config_info`` samples. Rule: vLLM's
    ``prefix_cache_queries_total`` is the prefix query counter; the capacity is one sample's."""
    text = (
        "# TYPE vllm:prefix_cache_queries counter\n"
        "vllm:prefix_cache_queries_total 1000\n"
        "# TYPE vllm:prefix_cache_hits counter\n"
        "vllm:prefix_cache_hits_total 250\n"
        'vllm:num_requests_running{engine="0"} 1\n'
        'vllm:num_requests_running{engine="1"} 2\n'
        'vllm:cache_config_info{engine="0",block_size="16",num_gpu_blocks="2000"} 1\n'
        'vllm:cache_config_info{engine="1",block_size="16",num_gpu_blocks="2000"} 1\n'
    )
    load = load_from_text(text, "vllm")
    assert (load.prefix_queries, load.prefix_hits) == (1000.0, 250.0)
    assert load.running == 3.0
    assert load.kv_capacity_tokens == 32000


async def test_a_metrics_page_that_is_not_200_is_a_failed_scrape(raw: Raw) -> None:
    """Kills: ``scrape`` refusing only 5xx (a 404 or 401 page that happens to hold metric lines,
    such as a proxy's, read as the engine's load). Rule: only a 200 answer is a scrape."""
    raw.routes["/metrics"] = (404, {"content-type": "text/plain"}, b"vllm:num_requests_running 0\n")
    async with httpx.AsyncClient() as http:
        with pytest.raises(BackendFailed, match="HTTP 404"):
            await _client(raw, http).scrape(1.0)


def test_a_negative_block_count_in_cache_config_info_is_a_failed_scrape() -> None:
    """Kills: ``_kv_capacity`` checking only ``block_size`` for a negative value (a negative
    ``num_gpu_blocks`` made a negative capacity that sized the prefix index). Rule: a negative
    size in ``vllm:cache_config_info`` is garbage: BackendFailed."""
    text = 'vllm:num_requests_running 1\nvllm:cache_config_info{block_size="16",num_gpu_blocks="-100"} 1\n'
    with pytest.raises(BackendFailed, match="negative"):
        load_from_text(text, "vllm")


def test_a_huge_waiting_count_is_garbage_not_a_load() -> None:
    """Kills: the ``MAX_REQUESTS`` bound checked for the running count only. Rule: a waiting
    count over 10**7 is garbage (BackendFailed), whichever series carries it."""
    with pytest.raises(BackendFailed, match="requests"):
        load_from_text("vllm:num_requests_running 1\nvllm:num_requests_waiting 1e12\n", "vllm")


def test_kv_usage_alone_is_not_a_load_report() -> None:
    """Kills: ``load_from_values`` accepting a page with KV usage but neither running nor waiting
    count (an engine's queue unknown, read as empty). Rule: an engine that publishes request
    counts and published neither failed its scrape."""
    with pytest.raises(BackendFailed, match="none of"):
        load_from_text("vllm:kv_cache_usage_perc 0.99\n", "vllm")


# --- cache locality ---------------------------------------------------------------------------


def test_block_hashes_are_chained_so_a_shared_middle_block_is_no_match() -> None:
    """Kills: ``block_hashes`` hashing each block alone (not chained to the blocks before it: two
    prompts that differ in their first block but share the second would match there). Rule: equal
    hashes mean equal prefixes."""
    a = block_hashes("A" * 64 + "B" * 64, 16)
    b = block_hashes("C" * 64 + "B" * 64, 16)
    assert len(a) == len(b) == 2
    assert a[1] != b[1]
    index = PrefixIndex(100)
    index.record(a)
    assert index.match(b) == 0


def test_only_full_blocks_are_hashed() -> None:
    """Kills: ``block_hashes`` hashing a partial trailing block. Rule: a block is ``block_tokens``
    x 4 characters; a tail shorter than that is no block (the engine caches full blocks only)."""
    assert len(block_hashes("x" * (64 * 3 - 1), 16)) == 2
    assert len(block_hashes("x" * 64 * 3, 16)) == 3


def test_the_role_is_part_of_the_prompt_text() -> None:
    """Kills: ``prompt_text`` leaving the role out (a system prompt and a user message of the
    same words would share a cache prefix they do not share on the engine). Rule: the canonical
    text carries each message's role."""
    assert prompt_text([{"role": "system", "content": "x"}]) != prompt_text(
        [{"role": "user", "content": "x"}]
    )


def test_token_estimates_round_up() -> None:
    """Kills: ``estimate_tokens`` rounding down (a 5-character prompt estimated at 1 token, an
    estimate that reserves too little). Rule: a partial token counts as a token."""
    assert estimate_tokens("abcde") == 2
    assert estimate_tokens("a" * 400 + "b") == 101


def test_the_index_evicts_a_prompts_tail_before_its_head() -> None:
    """Kills: ``PrefixIndex.record`` inserting blocks head first (the head made the oldest, so
    eviction lost the whole prefix while the engine still held it). Rule: past capacity, the
    tail of a prompt goes first and its head still matches."""
    index = PrefixIndex(3)
    index.record([1, 2, 3, 4])
    assert index.match([1, 2, 3, 4]) == 3


def test_a_shrunk_index_evicts_down_to_its_new_capacity() -> None:
    """Kills: ``PrefixIndex.resize`` setting the capacity without evicting. Rule: once the engine
    reports a smaller cache, the index believes no more blocks cached than fit there."""
    index = PrefixIndex(10)
    index.record(list(range(1, 9)))
    index.resize(2)
    assert len(index) == 2
    assert index.match(list(range(1, 9))) == 2


def test_a_match_stops_at_the_first_missing_block() -> None:
    """Kills: ``PrefixIndex.match`` skipping a missing block (counting blocks after a miss that a
    chained cache can never hit). Rule: matches count the leading blocks only."""
    index = PrefixIndex(10)
    index.record([1, 2, 3])
    assert index.match([1, 9, 3]) == 1


def test_confidence_settles_at_the_engines_share_of_the_index_matches() -> None:
    """Kills: ``PrefixIndex.calibrate`` taking the discounted prediction for the index's own rate
    (``confidence`` left out of the ratio: it settles at the square root of the engine's share,
    0.5 where the engine hits a quarter of what the index matched, over-crediting cache locality).
    Rule: with the engine hitting a quarter of the index's matches, confidence settles at 0.25."""
    index = PrefixIndex(10)
    own, engine = 0.8, 0.2
    for _ in range(200):
        index.calibrate(index.confidence * own, engine)
    assert index.confidence == pytest.approx(0.25, abs=1e-3)


# --- spans ------------------------------------------------------------------------------------


def _tracer(exporter: InMemorySpanExporter) -> Any:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return get_tracer(provider)


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


def test_trace_headers_carry_the_trace_context_never_baggage() -> None:
    """Kills: ``trace_headers`` injecting with the global propagator (OpenTelemetry's default is
    trace context and baggage: the application's baggage, a user id or a tenant's secret, sent to
    every backend). Rule: only ``traceparent`` (and ``tracestate``) reach a backend."""
    exporter = InMemorySpanExporter()
    tracer = _tracer(exporter)
    with chat_span("m", tracer=tracer):
        context = baggage.set_baggage("user.email", "alice@example.com")
        headers = trace_headers(context)
    assert "traceparent" in headers
    assert not any("alice" in v for v in headers.values()) and "baggage" not in headers


# --- inventory credentials --------------------------------------------------------------------


@pytest.mark.parametrize("key", ["sk-clé-non-ascii-1234", "sk-\u00a0nbsp-1234567"], ids=["non-ascii", "nbsp"])
def test_a_key_an_authorization_header_cannot_carry_is_refused_at_load(
    monkeypatch: pytest.MonkeyPatch, key: str
) -> None:
    """Kills: the key check loosened to ``isprintable`` (a non-ASCII key accepted at load, to fail
    inside every call's header encoding). Rule: the key is printable ASCII or the inventory is
    refused, naming the variable, never the key."""
    monkeypatch.setenv("R47_BACKEND_KEY", key)
    backend = {"name": "b0", "url": "http://127.0.0.1:9", "models": ["m"], "api_key_env": "R47_BACKEND_KEY"}
    with pytest.raises(BackendCredentialError) as raised:
        inventory_from_mapping({"backends": [backend]})
    assert "R47_BACKEND_KEY" in str(raised.value) and key not in str(raised.value)


def test_a_url_with_a_user_name_is_refused() -> None:
    """Kills: ``_usable_url`` refusing only a password (``http://token@host`` passed: the user
    part is where a bare token goes, and HTTP clients log the URL). Rule: no credentials in a
    backend URL, user name included."""
    backend = {"name": "b0", "url": "http://sk-secret-token@127.0.0.1:9", "models": ["m"]}
    with pytest.raises(InventoryError) as raised:
        inventory_from_mapping({"backends": [backend]})
    assert "credentials" in str(raised.value)
