"""The backend client (agentgate/dispatch/backends.py): what it reads from a backend and what it
reports about it. Only a complete, well-formed answer is an answer (anything else, a redirect or
a 429 included, is ``BackendFailed``); an error never quotes any piece of the backend's API key;
a metrics page is a scrape only when it is a 200; only the trace context reaches a backend.
"""

from __future__ import annotations

import asyncio
import contextlib
import http.server
import json
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any

import _http
import aiohttp
import httpx
import pytest
from _raw_server import RawServer
from opentelemetry import baggage
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from agentgate.audit.spans import chat_span, get_tracer
from agentgate.dispatch import Inventory, inventory_from_mapping
from agentgate.dispatch.backends import (
    MAX_CHARS_PER_TOKEN,
    MAX_LINE_BYTES,
    MAX_RETRY_AFTER_S,
    BackendClient,
    ChatChunk,
    Timeouts,
    retry_after_s,
    split_lines,
    trace_headers,
)
from agentgate.dispatch.gateway._upstream import UpstreamPool
from agentgate.errors import BackendFailed, DispatchError

KEY = "sk-live-0123456789abcdefghijKLMNOPQRSTUV"
PAYLOAD = {"model": "m", "messages": [{"role": "user", "content": "hello"}], "max_tokens": 8}


async def _read_request(reader: asyncio.StreamReader) -> None:
    """Read one request (head and Content-Length body) off ``reader``: a raw backend's first step."""
    head = await reader.readuntil(b"\r\n\r\n")
    length = next(
        int(line[15:]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length:")
    )
    await reader.readexactly(length)


async def _serving(
    handler: Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]],
) -> tuple[RawServer, Inventory]:
    """A loopback server answering with ``handler``, and an inventory of one vLLM backend ``b0``
    (model ``m``) at its address."""
    server = RawServer(handler)  # its stop() ends every connection (review R72)
    url = f"http://127.0.0.1:{await server.start()}"
    return server, inventory_from_mapping(
        {"backends": [{"name": "b0", "url": url, "engine": "vllm", "models": ["m"]}]}
    )


@contextlib.asynccontextmanager
async def _client_on(
    path: str,
    handler: Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]],
    timeouts: Timeouts | None = None,
) -> AsyncIterator[BackendClient]:
    """A ``BackendClient`` of a loopback backend answering with ``handler`` (``_serving``), over
    ``path``: ``httpx``, ``aiohttp`` or ``gateway-pool`` (the gateway's ``UpstreamPool``); the
    clients, the pool and the server are closed on the way out."""
    server, backend = await _serving(handler)
    pool = UpstreamPool()
    try:
        async with _http.AsyncClient() as http, aiohttp.ClientSession() as session:
            client = BackendClient(
                backend.backends[0], http, timeouts, session=session if path == "aiohttp" else None
            )
            if path == "gateway-pool":
                client.transport = pool
            yield client
    finally:
        await pool.aclose()
        await server.stop()


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
    async with _http.AsyncClient() as http:
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
    async with _http.AsyncClient() as http:
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
    async with _http.AsyncClient() as http:
        with pytest.raises(BackendFailed):
            await _client(raw, http).chat(PAYLOAD)


@pytest.mark.parametrize("status", [301, 302, 307])
async def test_a_redirect_carrying_a_valid_looking_answer_is_backend_failed(raw: Raw, status: int) -> None:
    """Kills: ``_check_status`` letting 3xx through as success (``status < 400``). Rule: a chat
    call does not follow redirects, and a redirect's body is not an answer (docs/dispatch.md)."""
    answer = {"choices": [{"message": {"content": "forged"}, "finish_reason": "stop"}], "usage": {}}
    raw.chat(json.dumps(answer).encode(), status=status, location="http://127.0.0.1:1/")
    async with _http.AsyncClient() as http:
        with pytest.raises(BackendFailed, match=f"HTTP {status}"):
            await _client(raw, http).chat(PAYLOAD)


async def test_a_429_is_a_failed_backend_to_fail_over_from_not_a_bad_request(raw: Raw) -> None:
    """Kills: 429 counted among the caller's errors (``_CALLER_ERRORS``). Rule: a backend that is
    rate limiting is a failed attempt (BackendFailed, failed over), not the caller's fault."""
    raw.chat(b'{"error": {"message": "slow down"}}', status=429)
    async with _http.AsyncClient() as http:
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
    async with _http.AsyncClient() as http:
        with pytest.raises(BackendFailed, match="usage"):
            await _client(raw, http).chat(PAYLOAD)


async def test_a_stream_opening_with_a_byte_order_mark_is_read(raw: Raw) -> None:
    """Review R54: the SSE format lets a stream open with a UTF-8 byte order mark, and the first
    line kept it, so ``\ufeffdata: {...}`` was refused as not SSE and the backend marked down.

    Rule: one byte order mark at the start of a stream is dropped; anywhere else it stays text."""
    body = f"{_delta('hi')}\n\ndata: [DONE]\n\n".encode()
    raw.routes["/v1/chat/completions"] = (200, {"content-type": "text/event-stream"}, b"\xef\xbb\xbf" + body)
    async with _http.AsyncClient() as http:
        assert [chunk.content for chunk in await _chunks(_client(raw, http))] == ["hi"]
        raw.sse(_delta("a"), "\ufeff" + _delta("b"), "data: [DONE]")
        with pytest.raises(BackendFailed, match="not an SSE event"):
            await _chunks(_client(raw, http))


async def test_an_event_spread_over_several_data_lines_is_refused(raw: Raw) -> None:
    """Review R54 (decided, not changed): SSE lets one event span several ``data:`` lines, joined
    with a line end, and no engine sends one (vLLM, SGLang, TGI, llama.cpp and OpenAI write each
    chunk on one line). Reading them would mean ending events at blank lines only, and a stream
    that ends each event at its line end, which this client reads (``Raw.sse`` serves one so),
    would then fail.

    Rule: each ``data:`` line is one whole event; one that is part of an event is a malformed
    event, a ``BackendFailed`` before any of it is passed on (docs/dispatch.md)."""
    raw.sse(
        'data: {"choices": [{"delta": {"content": "x"},', 'data: "finish_reason": null}]}', "", "data: [DONE]"
    )
    passed: list[ChatChunk] = []
    async with _http.AsyncClient() as http:
        with pytest.raises(BackendFailed, match="malformed stream event"):
            async for chunk in _client(raw, http).stream(PAYLOAD):
                passed.append(chunk)
    assert passed == []


async def test_a_plain_text_line_in_a_stream_is_not_skipped(raw: Raw) -> None:
    """Kills: ``_SSE_IGNORED`` matching ``event``/``id``/``retry`` without their colon (a line of
    plain text such as a proxy's ``identity check failed`` skipped as an SSE field, and the stream
    taken as whole). Rule: a line that is neither an SSE field nor a data event fails the stream."""
    raw.sse(_delta("half"), "identity check failed, upstream reset", _delta(" rest"), "data: [DONE]")
    async with _http.AsyncClient() as http:
        with pytest.raises(BackendFailed, match="not an SSE event"):
            await _chunks(_client(raw, http))


@pytest.mark.parametrize("streamed", [True, False], ids=["streamed", "json"])
@pytest.mark.parametrize("path", ["httpx", "aiohttp", "gateway-pool"])
@pytest.mark.parametrize(
    ("status", "error"), [(503, BackendFailed), (400, DispatchError)], ids=["503", "400"]
)
async def test_a_call_refused_with_an_endless_body_quotes_its_start_at_once(
    path: str, status: int, error: type[DispatchError], streamed: bool
) -> None:
    """Kills: ``stream`` and ``chat`` reading an error answer's whole body before quoting its
    first kilobyte: a backend that answers a call with an error status and a body that never
    ends (here a chunked body whose first chunk is sent, the rest never) held the call until its
    first-token deadline, which then failed it as "no answer" (a 400 so became a failed backend, failed over
    and marked down), and one that sends such a body as fast as it can filled the memory of the
    dispatcher's clients for that long (aiohttp and httpx read a streamed call's with no bound,
    a JSON call's up to 64 MiB).

    Rule: an error answer's start is quoted as soon as it arrives, the rest neither waited for
    nor held; a 400 stays the caller's ``DispatchError``, anything else a ``BackendFailed``."""
    release = asyncio.Event()

    async def refuse(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _read_request(reader)
        start = b'{"error": {"message": "engine overloaded"}, "padding": "' + b"x" * 4096
        writer.write(
            b"HTTP/1.1 %d Refused\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n"
            b"%x\r\n%s\r\n" % (status, len(start), start)
        )
        await writer.drain()
        await release.wait()
        writer.close()

    async with _client_on(path, refuse, Timeouts(first_token_s=30, idle_s=30)) as client:
        try:
            with pytest.raises(error) as raised:
                async with asyncio.timeout(10):  # well inside first_token_s: no waiting for the deadline
                    await (_chunks(client) if streamed else client.chat(PAYLOAD))
        finally:
            release.set()  # before the server closes: its handler waits for it
    assert f"HTTP {status}" in str(raised.value) and "engine overloaded" in str(raised.value)


@pytest.mark.parametrize("path", ["httpx", "aiohttp"])
async def test_a_streamed_line_without_end_fails_the_stream_as_it_arrives(path: str) -> None:
    """Kills: the dispatcher's clients reading a stream's lines with no bound of their own: over
    httpx (``aiter_lines``) a line was held whole, however long, until the first-token deadline
    (a backend sending one without end as fast as it can filled the memory for that long); over
    aiohttp, whose reader does refuse it, its ``LineTooLong`` (not a ``ValueError`` since aiohttp
    3.10, nor a ``ClientError``) escaped ``stream`` as itself: no ``BackendFailed``, so no fail
    over, and a raw aiohttp error for the gateway (a 500) or the ``Gate``'s caller.

    Rule: a streamed line over ``MAX_LINE_BYTES`` fails the stream as it arrives, a
    ``BackendFailed`` naming the backend, on every client path (aiohttp's too, read with
    ``split_lines`` since review R52)."""
    release = asyncio.Event()

    async def endless_line(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n")
        writer.write(b"data: " + b"x" * (MAX_LINE_BYTES + (1 << 16)))  # and no line end, ever
        await writer.drain()
        await release.wait()
        writer.close()

    server, backend = await _serving(endless_line)
    try:
        async with _http.AsyncClient() as http, aiohttp.ClientSession() as session:
            client = BackendClient(
                backend.backends[0],
                http,
                Timeouts(first_token_s=30, idle_s=30),
                session=session if path == "aiohttp" else None,
            )
            with pytest.raises(BackendFailed, match=r"b0: .*line is over"):
                async with asyncio.timeout(10):  # well inside first_token_s: refused as it arrives
                    await _chunks(client)
    finally:
        release.set()
        await server.stop()


@pytest.mark.parametrize(
    "chatter",
    [
        pytest.param({"choices": [{"index": 0, "delta": {}, "finish_reason": None}]}, id="empty-delta"),
        pytest.param(
            {"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]}, id="role-only"
        ),
    ],
)
async def test_chunks_that_carry_nothing_do_not_keep_a_stream_alive(chatter: dict[str, Any]) -> None:
    """Kills: every chunk pushing the stream's deadline out, whatever it carried: a backend that
    sent an empty delta (or the role alone) every fraction of a second, and no output ever, held
    the call, its backend slot and its reservation for as long as it kept on (the caller, sent
    each as an event, never stalled either).

    Rule: a chunk that carries nothing of the answer (no content, tool call, finish reason, usage
    or other delta value) is passed on but does not push the deadline out: with no output within
    ``first_token_s``, the stream is a ``BackendFailed``. Content, once it comes, still does."""
    release = asyncio.Event()
    event = b"data: " + json.dumps(chatter).encode() + b"\n\n"
    handlers: list[asyncio.Task[Any]] = []

    async def chatty(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        handlers.append(task)
        await _read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n")
        with contextlib.suppress(ConnectionError):
            while not release.is_set():
                writer.write(event)
                await writer.drain()
                await asyncio.sleep(0.05)
        writer.close()

    server, backend = await _serving(chatty)
    received: list[ChatChunk] = []
    try:
        async with _http.AsyncClient() as http:
            client = BackendClient(backend.backends[0], http, Timeouts(first_token_s=1, idle_s=1))
            with pytest.raises(BackendFailed, match="no first token"):
                async with asyncio.timeout(20):  # the chatter never ends by itself
                    async for chunk in client.stream(PAYLOAD):
                        received.append(chunk)
        assert received and not any(chunk.content for chunk in received)  # passed on, as sent
    finally:
        release.set()
        await asyncio.wait(handlers, timeout=5)  # each closes its writer once released
        await server.stop()


@pytest.mark.parametrize(
    "repeated",
    [
        pytest.param({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}, id="finish-reason"),
        pytest.param({"choices": [], "usage": {"prompt_tokens": 1, "completion_tokens": 1}}, id="usage"),
    ],
)
async def test_a_finish_reason_or_usage_said_again_does_not_keep_a_stream_alive(
    repeated: dict[str, Any],
) -> None:
    """Review R54: a finish reason or a usage pushed the stream's deadline out each time it came,
    and the answer limit counts neither, so a backend that answered one token and then repeated
    ``finish_reason: stop`` (or its usage) every fraction of a second, never ``[DONE]``, held the
    call, its backend slot and its reservation for ever.

    Rule: the first finish reason and the first usage push the deadline out; said again, each is
    chatter, and with no ``[DONE]`` within ``idle_s`` the stream is a ``BackendFailed``."""
    release = asyncio.Event()
    first = (_delta("hi") + "\n\n").encode()
    event = b"data: " + json.dumps(repeated).encode() + b"\n\n"
    handlers: list[asyncio.Task[Any]] = []

    async def repeating(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        handlers.append(task)
        await _read_request(reader)
        writer.write(
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n" + first
        )
        with contextlib.suppress(ConnectionError):
            while not release.is_set():
                writer.write(event)
                await writer.drain()
                await asyncio.sleep(0.05)
        writer.close()

    server, backend = await _serving(repeating)
    received: list[ChatChunk] = []
    try:
        async with _http.AsyncClient() as http:
            client = BackendClient(backend.backends[0], http, Timeouts(first_token_s=1, idle_s=0.5))
            with pytest.raises(BackendFailed, match="silent"):
                async with asyncio.timeout(20):  # the repeats never end by themselves
                    async for chunk in client.stream(PAYLOAD):
                        received.append(chunk)
        assert [chunk.content for chunk in received[:1]] == ["hi"] and len(received) > 2
    finally:
        release.set()
        await asyncio.wait(handlers, timeout=5)
        await server.stop()


@pytest.mark.parametrize("ends", [False, True], ids=["endless", "within-its-limit"])
async def test_a_stream_past_what_its_max_tokens_allows_fails_as_it_arrives(ends: bool) -> None:
    """Kills: a stream read for as long as the backend sent content. A backend that ignores
    ``max_tokens`` and streams without end held the call, its backend slot and its reservation
    for ever, each chunk pushing the idle deadline out (the call is charged ``max_tokens`` at
    most, so nothing else noticed).

    Rule: a stream may bring ``MAX_CHARS_PER_TOKEN`` characters of answer (content, tool call
    fragments, reasoning) per token of ``max_tokens``; past that it is a ``BackendFailed`` that
    says so, raised before the chunk that crosses the limit is passed on. An answer up to the
    limit, ended by ``[DONE]``, is read whole."""
    limit = PAYLOAD["max_tokens"] * MAX_CHARS_PER_TOKEN
    piece = "abcdefgh"
    events = [
        b"data: " + json.dumps({"choices": [{"index": 0, "delta": {name: piece}}]}).encode() + b"\n\n"
        for name in ("content", "reasoning_content")
    ]
    release = asyncio.Event()
    handlers: list[asyncio.Task[Any]] = []

    async def flood(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        handlers.append(task)
        await _read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n")
        sent = 0
        with contextlib.suppress(ConnectionError):
            while not release.is_set() and not (ends and sent == limit):
                writer.write(events[sent // len(piece) % 2])  # content and reasoning both count
                sent += len(piece)
                await writer.drain()
            if ends:
                writer.write(b"data: [DONE]\n\n")
                await writer.drain()
        writer.close()

    server, backend = await _serving(flood)
    received = 0
    try:
        async with _http.AsyncClient() as http:
            client = BackendClient(backend.backends[0], http, Timeouts(first_token_s=5, idle_s=5))
            async with asyncio.timeout(30):  # the flood never ends by itself
                if ends:
                    async for chunk in client.stream(PAYLOAD):
                        received += len(chunk.content) + len(
                            chunk.event["choices"][0]["delta"].get("reasoning_content", "")
                        )
                else:
                    with pytest.raises(BackendFailed, match="ignores max_tokens"):
                        async for _chunk in client.stream(PAYLOAD):
                            received += len(piece)
        assert received == limit  # everything up to the limit passed on, nothing past it
    finally:
        release.set()
        await asyncio.wait(handlers, timeout=5)
        await server.stop()


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
    async with _http.AsyncClient() as http:
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
    async with _http.AsyncClient() as http:
        with pytest.raises(BackendFailed) as raised:
            await _client(raw, http, key=True).chat(PAYLOAD)
    assert KEY[:5] not in str(raised.value)


async def test_an_error_event_is_scrubbed_before_it_is_cut(raw: Raw, monkeypatch: pytest.MonkeyPatch) -> None:
    """Kills: ``_reject_error`` cutting the error's message to 200 characters before scrubbing
    it (7 characters of the key left at the cut). Rule: as above, for an error a backend reports
    with HTTP 200."""
    monkeypatch.setenv("R47_BACKEND_KEY", KEY)
    raw.chat(json.dumps({"error": {"message": "y" * 193 + KEY}}).encode())
    async with _http.AsyncClient() as http:
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
    async with _http.AsyncClient() as http:
        with pytest.raises(BackendFailed) as raised:
            await _chunks(_client(raw, http, key=True))
    assert "not an SSE event" in str(raised.value)
    assert KEY[:5] not in str(raised.value)


# --- metrics scrape and trace headers ---------------------------------------------------------


async def test_a_metrics_page_that_is_not_200_is_a_failed_scrape(raw: Raw) -> None:
    """Kills: ``scrape`` refusing only 5xx (a 404 or 401 page that happens to hold metric lines,
    such as a proxy's, read as the engine's load). Rule: only a 200 answer is a scrape."""
    raw.routes["/metrics"] = (404, {"content-type": "text/plain"}, b"vllm:num_requests_running 0\n")
    async with _http.AsyncClient() as http:
        with pytest.raises(BackendFailed, match="HTTP 404"):
            await _client(raw, http).scrape(1.0)


@pytest.mark.parametrize("charset", ["rot13", "base64", "utf-16"])
async def test_a_metrics_page_is_read_as_utf8_whatever_charset_it_names(raw: Raw, charset: str) -> None:
    """Kills: ``scrape`` decoding the page with the charset its Content-Type names: one that names
    a codec that is not a text encoding (``rot13``, ``base64``) made ``decode`` raise
    ``LookupError``, which escaped ``scrape`` (documented to raise ``BackendFailed`` only), and
    a wrong one (``utf-16`` on UTF-8 bytes) read the engine's load as garbage.

    Rule: Prometheus text is UTF-8 (its exposition format says so); a page is read as UTF-8,
    whatever charset its header names."""
    raw.routes["/metrics"] = (
        200,
        {"content-type": f"text/plain; charset={charset}"},
        b"vllm:num_requests_running 3\n",
    )
    async with _http.AsyncClient() as http:
        assert (await _client(raw, http).scrape(1.0)).running == 3.0


def _tracer(exporter: InMemorySpanExporter) -> Any:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return get_tracer(provider)


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


# --- SSE line ends ------------------------------------------------------------------------


async def _pieces(pieces: list[bytes]) -> AsyncIterator[bytes]:
    for piece in pieces:
        yield piece


@pytest.mark.parametrize(
    ("pieces", "lines"),
    [
        pytest.param([b"a\rb\r\nc\nd"], ["a", "b", "c", "d"], id="all-three-ends"),
        pytest.param([b"a\r", b"\nb\n"], ["a", "b"], id="crlf-across-pieces"),
        pytest.param([b"a\r", b"", b"\nb\n"], ["a", "b"], id="crlf-across-an-empty-piece"),
        pytest.param([b"a\r", b"\r\n"], ["a", ""], id="cr-then-crlf"),
        pytest.param([b"a\r\n\r\nb"], ["a", "", "b"], id="blank-line-then-unended"),
        pytest.param([b"a\n", b"\n"], ["a", ""], id="lf-then-lf-is-two"),
    ],
)
async def test_split_lines_ends_a_line_at_crlf_lf_or_a_bare_cr(pieces: list[bytes], lines: list[str]) -> None:
    """Kills: ``split_lines`` ending lines at ``\\n`` only: a backend (or a proxy) that ends its
    SSE lines with a bare ``\\r``, as the SSE format allows, had its whole stream read as one line,
    not an SSE event (or, past ``MAX_LINE_BYTES``, refused as too long).

    Rule: ``\\r\\n``, ``\\n`` and a bare ``\\r`` each end a line; a ``\\r`` ending one piece and a
    ``\\n`` starting the next are one line end, not two."""
    assert [line async for line in split_lines(_pieces(pieces), 1 << 10)] == lines


@pytest.mark.parametrize("path", ["httpx", "aiohttp", "gateway-pool"])
async def test_a_stream_whose_lines_end_with_a_bare_cr_is_read_on_every_path(path: str) -> None:
    """Kills: the clients splitting streamed lines at ``\\n`` only (the pool and httpx in
    ``split_lines``, aiohttp in its own reader): a stream ending its lines with ``\\r`` failed as
    "not an SSE event". Here one event's ``\\r\\n`` is cut between two writes, too.

    Rule: every client path reads the lines of an SSE stream whatever line ends it uses."""

    async def cr_lines(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n")
        writer.write(_delta("Hel").encode() + b"\r\r: keep-alive\r")
        await writer.drain()
        await asyncio.sleep(0.05)
        writer.write(b"\n" + _delta("lo").encode() + b"\r\n\r\ndata: [DONE]\r\r")
        await writer.drain()
        writer.close()

    async with _client_on(path, cr_lines) as client, asyncio.timeout(10):
        chunks = await _chunks(client)
    assert "".join(chunk.content for chunk in chunks) == "Hello"


# --- Retry-After ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        pytest.param("7", 7.0, id="delta-seconds"),
        pytest.param(" 0 ", 0.0, id="zero"),
        pytest.param("Wed, 21 Oct 2015 07:28:30 GMT", 30.0, id="http-date"),
        pytest.param("Wednesday, 21-Oct-15 07:28:30 GMT", 30.0, id="rfc850-date"),
        pytest.param("Wed, 21 Oct 2015 07:27:00 GMT", 0.0, id="date-past"),
        pytest.param("86400", MAX_RETRY_AFTER_S, id="a-day-capped"),
        pytest.param("9" * 5000, MAX_RETRY_AFTER_S, id="digits-beyond-int-parsing-capped"),
        pytest.param("Wed, 21 Oct 2099 07:28:00 GMT", MAX_RETRY_AFTER_S, id="date-far-capped"),
        pytest.param("-5", None, id="negative"),
        pytest.param("1.5", None, id="fraction"),
        pytest.param("soon", None, id="garbage"),
        pytest.param("", None, id="empty"),
        pytest.param("\u0663", None, id="non-ascii-digit"),
        pytest.param(None, None, id="absent"),
    ],
)
def test_retry_after_reads_seconds_or_a_date_and_ignores_garbage(
    value: str | None, seconds: float | None
) -> None:
    """Rule: ``Retry-After`` is delta-seconds or an HTTP-date (RFC 9110 10.2.3); a date past is 0,
    anything longer than ``MAX_RETRY_AFTER_S`` is that, and any other value is none (ignored)."""
    now = 1445412480.0  # Wed, 21 Oct 2015 07:28:00 GMT
    assert retry_after_s(value, now) == seconds


@pytest.mark.parametrize("streamed", [True, False], ids=["streamed", "json"])
@pytest.mark.parametrize("path", ["httpx", "aiohttp", "gateway-pool"])
@pytest.mark.parametrize(("status", "asked"), [(429, 7.0), (503, 7.0), (500, None)])
async def test_a_busy_answer_carries_its_retry_after_on_every_path(
    path: str, streamed: bool, status: int, asked: float | None
) -> None:
    """Kills: ``Retry-After`` never read (every 429 or 503 a plain ``BackendFailed``, the backend
    then left alone for ``cooldown_s`` whatever it asked), or read on some client paths only.

    Rule: a 429 or 503's ``Retry-After`` is the ``BackendFailed``'s ``retry_after_s`` on every
    client path, streamed or not; another status's is not read."""

    async def busy(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _read_request(reader)
        body = b'{"error": {"message": "busy"}}'
        writer.write(
            b"HTTP/1.1 %d Busy\r\nretry-after: 7\r\ncontent-length: %d\r\nconnection: close\r\n\r\n%s"
            % (status, len(body), body)
        )
        await writer.drain()
        writer.close()

    async with _client_on(path, busy) as client:
        with pytest.raises(BackendFailed) as raised:
            async with asyncio.timeout(10):
                await (_chunks(client) if streamed else client.chat(PAYLOAD))
    assert raised.value.retry_after_s == asked


async def test_a_transport_without_retry_after_is_still_used() -> None:
    """Rule: a ``ChatTransport`` whose ``post`` gives status and body only (no third item) is
    read as one whose answers carry no ``Retry-After``."""

    class TwoItems:
        async def post(self, url: str, body: bytes, authorization: str | None = None) -> tuple[int, bytes]:
            return 429, b"busy"

        def stream(self, url: str, body: bytes, authorization: str | None = None) -> Any:
            raise NotImplementedError

    backend = inventory_from_mapping(
        {"backends": [{"name": "b0", "url": "http://127.0.0.1:9", "engine": "vllm", "models": ["m"]}]}
    ).backends[0]
    async with _http.AsyncClient() as http:
        client = BackendClient(backend, http)
        client.transport = TwoItems()
        with pytest.raises(BackendFailed, match="HTTP 429: busy") as raised:
            await client.chat(PAYLOAD)
    assert raised.value.retry_after_s is None


async def test_a_busy_answer_echoing_the_prompt_keeps_its_retry_after(raw: Raw) -> None:
    """Kills: ``_shown`` rebuilding a scrubbed error from its message alone: a 429 whose body
    echoed the caller's prompt lost its ``Retry-After`` as the prompt was redacted.

    Rule: the error that leaves the client, scrubbed or not, keeps the time the backend asked for."""
    prompt = "Summarise the quarterly report for the board"
    raw.chat(f"slow down: {prompt}".encode(), status=429, **{"Retry-After": "12"})
    payload = {**PAYLOAD, "messages": [{"role": "user", "content": prompt}]}
    async with _http.AsyncClient() as http:
        with pytest.raises(BackendFailed) as raised:
            await _client(raw, http).chat(payload)
    assert "[redacted]" in str(raised.value) and prompt not in str(raised.value)
    assert raised.value.retry_after_s == 12.0


async def test_a_probe_answered_200_with_a_long_model_list_passes(raw: Raw) -> None:
    """Kills: ``_probe`` failing any answer over 64 KiB whatever its status: a hosted endpoint
    probed at ``GET /v1/models`` (its ``health_path`` as docs/dispatch.md advises, and the
    credentials probe of any backend) answers a catalogue of hundreds of models, far over 64 KiB
    (OpenRouter's and Together's are), so its every probe failed: marked down once, it never came
    back, and the calls to it all failed ``NoBackend``.

    Rule: a probe passes on a 200, whatever its length; only its first 64 KiB are read (the rest
    is not held, the connection not reused); any other status fails it, long or short."""
    catalogue = json.dumps(
        {"object": "list", "data": [{"id": f"org/model-{i}", "object": "model"} for i in range(5_000)]}
    ).encode()
    assert len(catalogue) > 3 * 64 * 1024
    raw.routes["/v1/models"] = (200, {"content-type": "application/json"}, catalogue)
    async with _http.AsyncClient() as http:
        client = _client(raw, http)
        assert await client.accepts_credentials()
        raw.routes["/v1/models"] = (503, {"content-type": "application/json"}, catalogue)
        assert not await client.accepts_credentials()
