"""The dispatcher (agentgate/dispatch/dispatcher.py) over real HTTP: streaming, cancellation,
accounting, failover and refusals; a request id is refused while a call holding it is in flight
and free again however that call ended."""

from __future__ import annotations

import asyncio
import http.server
import json
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from agentgate.dispatch import Dispatcher, Router, inventory_from_mapping
from agentgate.dispatch.inventory import Inventory
from agentgate.dispatch.prefix import IMAGE_TOKENS, estimate_prompt_tokens
from agentgate.errors import BackendFailed, DispatchError, NoBackend, Shed, UnknownModel
from agentgate.sim import SimServer

MODEL = "llama-3.1-8b"


async def test_stream_cancelled_by_the_caller_frees_the_backend_and_the_count() -> None:
    with SimServer(time_scale=0.1) as server:
        inv = inventory_from_mapping({"backends": [{"name": "b0", "url": server.url, "models": [MODEL]}]})
        router = Router(inv)
        async with Dispatcher(inv, router) as d:
            body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 5000}
            stream = d.stream(body)
            async for chunk in stream:
                assert chunk.content.startswith("tok")
                break
            await stream.aclose()
            assert router.in_flight("b0") == 0
            deadline = time.monotonic() + 3
            while server.engine.has_work() and time.monotonic() < deadline:
                await asyncio.sleep(0.02)
            assert not server.engine.has_work()


async def test_completed_calls_leave_no_in_flight_work_and_report_usage() -> None:
    with SimServer(time_scale=0.05) as a, SimServer(time_scale=0.05) as b:
        inv = inventory_from_mapping(
            {"backends": [{"name": n, "url": s.url, "models": [MODEL]} for n, s in (("a", a), ("b", b))]}
        )
        router = Router(inv)
        async with Dispatcher(inv, router) as d:
            body = {"model": MODEL, "messages": [{"role": "user", "content": "x " * 200}], "max_tokens": 3}
            results = await asyncio.gather(*(d.chat(body, slo_ttft_s=10.0) for _ in range(10)))
            assert all(r.usage.completion_tokens == 3 for r in results)
            assert router.in_flight("a") == router.in_flight("b") == 0


async def test_refusals_are_typed() -> None:
    with SimServer(time_scale=0.05) as server:
        inv = inventory_from_mapping({"backends": [{"name": "b0", "url": server.url, "models": [MODEL]}]})
        router = Router(inv)
        async with Dispatcher(inv, router) as d:
            with pytest.raises(DispatchError, match="messages"):
                await d.chat({"model": MODEL, "messages": []})
            with pytest.raises(NoBackend, match="serves model"):
                await d.chat({"model": "other", "messages": [{"role": "user", "content": "x"}]})
            with pytest.raises(NoBackend, match="may use none"):
                await d.chat(
                    {"model": MODEL, "messages": [{"role": "user", "content": "x"}]}, allowed=lambda b: False
                )


# --- request ids: an id is refused while a call holding it is in flight, an automatic id never
# collides with a caller's, an id that is not text gets a DispatchError, and an id is free again
# however its call ended (a stream abandoned, a call cancelled, failed over, or failed on every
# backend). Real SimServer backends. ---------------------------------------------------------


def _body(tokens: int) -> dict[str, object]:
    return {"model": MODEL, "messages": [{"role": "user", "content": "x " * 20}], "max_tokens": tokens}


def _dead_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"


async def test_a_call_without_an_id_is_not_refused_for_a_callers_id() -> None:
    with SimServer(time_scale=0.05) as sim:
        inventory = inventory_from_mapping({"backends": [{"name": "a", "url": sim.url, "models": [MODEL]}]})
        async with Dispatcher(inventory, Router(inventory)) as dispatcher:
            held = dispatcher.stream(_body(200), request_id="req-0")
            try:
                await held.__anext__()
                result = await dispatcher.chat(_body(2))
                assert result.usage.completion_tokens == 2
            finally:
                await held.aclose()


async def test_an_abandoned_stream_and_a_cancelled_call_release_their_id() -> None:
    with SimServer(time_scale=0.05) as sim:
        inventory = inventory_from_mapping({"backends": [{"name": "a", "url": sim.url, "models": [MODEL]}]})
        router = Router(inventory)
        async with Dispatcher(inventory, router) as dispatcher:
            stream = dispatcher.stream(_body(200), request_id="mine")
            async for _chunk in stream:
                break
            await stream.aclose()
            task = asyncio.create_task(dispatcher.chat(_body(500), request_id="mine"))
            for _ in range(3):
                await asyncio.sleep(0)
            with pytest.raises(DispatchError, match="already in flight"):
                await dispatcher.chat(_body(2), request_id="mine")  # the first one holds it
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            result = await dispatcher.chat(_body(2), request_id="mine")
            assert result.usage.completion_tokens == 2
            assert router.in_flight("a") == 0


async def test_a_request_id_that_is_not_text_gets_a_typed_error() -> None:
    with SimServer(time_scale=0.05) as sim:
        inventory = inventory_from_mapping({"backends": [{"name": "a", "url": sim.url, "models": [MODEL]}]})
        async with Dispatcher(inventory, Router(inventory)) as dispatcher:
            with pytest.raises(DispatchError, match="request_id must be text"):
                await dispatcher.stream(_body(200), request_id=7).__anext__()  # type: ignore[arg-type]
            with pytest.raises(DispatchError, match="request_id must be text"):
                await dispatcher.chat(_body(2), request_id=7)  # type: ignore[arg-type]


async def test_an_id_is_free_again_after_failover_and_after_every_backend_failed() -> None:
    dead = _dead_url()
    with SimServer(time_scale=0.05) as sim:
        inventory = inventory_from_mapping(
            {
                "backends": [
                    {"name": "dead", "url": dead, "models": [MODEL]},
                    {"name": "live", "url": sim.url, "models": [MODEL]},
                ]
            }
        )
        async with Dispatcher(inventory, Router(inventory)) as dispatcher:
            for _ in range(3):  # whichever backend is tried first, the id is released
                result = await dispatcher.chat(_body(2), request_id="mine")
                assert result.usage.completion_tokens == 2
    lone = inventory_from_mapping({"backends": [{"name": "dead", "url": dead, "models": [MODEL]}]})
    async with Dispatcher(lone, Router(lone)) as dispatcher:
        for _ in range(2):
            with pytest.raises(DispatchError) as failed:
                await dispatcher.chat(_body(2), request_id="mine")
            assert "already in flight" not in str(failed.value)


# --- failover, refusals and usage against canned loopback backends ----------------------------


class Canned:
    """A real HTTP server on 127.0.0.1 answering every chat completion with ``answer`` (a dict: a
    JSON body; a list: the data lines of an SSE stream, sent as they are, so a list without
    ``[DONE]`` is a stream that breaks off), and 200 on every GET (health)."""

    def __init__(self) -> None:
        self.answer: object = {}
        self.status = 200
        self.headers: dict[str, str] = {}
        """The status and further headers of every chat answer."""
        self.posts = 0
        self.gets = 0
        canned = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                canned.gets += 1
                self.send_response(200)
                self.send_header("content-length", "2")
                self.end_headers()
                self.wfile.write(b"ok")

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("content-length") or 0))
                canned.posts += 1
                answer = canned.answer
                if isinstance(answer, list):
                    body = "".join(f"data: {line}\n\n" for line in answer).encode()
                    kind = "text/event-stream"
                else:
                    body = json.dumps(answer).encode()
                    kind = "application/json"
                self.send_response(canned.status)
                for name, value in canned.headers.items():
                    self.send_header(name, value)
                self.send_header("content-type", kind)
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.handle_error = lambda *args: None  # type: ignore[method-assign]  # a client that hung up
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.02,), daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(5.0)


@pytest.fixture
def canned() -> Iterator[list[Canned]]:
    made = [Canned(), Canned()]
    yield made
    for server in made:
        server.stop()


def _inventory(servers: list[Canned]) -> Inventory:
    return inventory_from_mapping(
        {
            "backends": [
                {"name": f"c{i}", "url": s.url, "engine": "openai", "models": ["m"]}
                for i, s in enumerate(servers)
            ]
        }
    )


PAYLOAD = {"model": "m", "messages": [{"role": "user", "content": "hello"}], "max_tokens": 8}


def _dispatcher(inventory: Inventory, **kw: Any) -> Dispatcher:
    kw.setdefault("recovery_wait_s", 0.0)
    kw.setdefault("health_interval_s", 60.0)  # no probe brings a failed backend back meanwhile
    kw.setdefault("scrape_interval_s", 60.0)
    return Dispatcher(inventory, Router(inventory), **kw)


def _delta(content: str) -> str:
    return json.dumps({"choices": [{"delta": {"content": content}, "finish_reason": None}]})


async def test_a_stream_that_broke_after_output_is_not_replayed_on_another_backend(
    canned: list[Canned],
) -> None:
    """Kills: ``stream`` failing over after output was delivered (``if delivered`` dropped): the
    caller would get the answer's start twice, from two backends, as one answer."""
    for server in canned:
        server.answer = [_delta("partial ")]  # one chunk, then the stream ends without [DONE]
    got: list[str] = []
    async with _dispatcher(_inventory(canned)) as dispatcher:
        with pytest.raises(BackendFailed, match="broke after output"):
            async for chunk in dispatcher.stream(PAYLOAD, slo_ttft_s=30.0, priority=0):
                got.append(chunk.content)
    assert got == ["partial "]
    assert sum(server.posts for server in canned) == 1


async def test_a_call_that_no_backend_could_ever_serve_fails_at_once_without_a_recovery_wait(
    canned: list[Canned],
) -> None:
    """Kills: ``_could_come_back`` taken as always true, or counting a down backend the caller
    may not use: a call that no backend it may use could serve waits out the whole recovery wait
    for nothing (here an hour) before it fails."""
    canned[0].answer = {"choices": "garbage"}
    async with _dispatcher(_inventory(canned), recovery_wait_s=3600.0, max_attempts=1) as dispatcher:
        with pytest.raises(BackendFailed):
            await dispatcher.chat(PAYLOAD, allowed=lambda b: b.name == "c0")
        assert dispatcher.is_down("c0") and not dispatcher.is_down("c1")
        async with asyncio.timeout(30):
            with pytest.raises(NoBackend, match="may use none"):
                await dispatcher.chat(PAYLOAD, allowed=lambda b: False)


async def test_the_no_backend_error_after_failed_attempts_names_the_failures(canned: list[Canned]) -> None:
    """Kills: ``_wait_for_plan`` raising the router's bare refusal after failed attempts (the
    caller is told every backend is down, not why: the garbage each one answered)."""
    for server in canned:
        server.answer = {"choices": "garbage"}
    async with _dispatcher(_inventory(canned)) as dispatcher:
        with pytest.raises(NoBackend) as raised:
            await dispatcher.chat(PAYLOAD, slo_ttft_s=30.0, priority=0)
    assert not isinstance(raised.value, Shed)
    message = str(raised.value)
    assert "after:" in message and "malformed chat completion" in message


async def test_a_streamed_usage_without_a_completion_count_is_no_usage(canned: list[Canned]) -> None:
    """Kills: ``_parse_chunk`` keeping a usage whose ``completion_tokens`` is missing (read as 0
    tokens generated: the call's output would be charged as nothing instead of settled at its
    reservation)."""
    for server in canned:
        server.answer = [_delta("hi"), json.dumps({"choices": [], "usage": {"prompt_tokens": 5}}), "[DONE]"]
    async with _dispatcher(_inventory(canned)) as dispatcher:
        chunks = [chunk async for chunk in dispatcher.stream(PAYLOAD, slo_ttft_s=30.0, priority=0)]
    assert [c.content for c in chunks] == ["hi"]
    assert all(c.usage is None for c in chunks)


async def _probed(server: Canned, rounds: int) -> None:
    """Return once ``server`` has answered ``rounds`` more health probes."""
    target = server.gets + rounds
    async with asyncio.timeout(10):
        while server.gets < target:
            await asyncio.sleep(0.01)


@pytest.mark.parametrize("status", [429, 503])
@pytest.mark.parametrize("streamed", [False, True], ids=["json", "streamed"])
async def test_a_busy_backend_stays_down_for_the_time_its_retry_after_asks(
    canned: list[Canned], status: int, streamed: bool
) -> None:
    """Kills: ``Retry-After`` never read: a backend answering 429 or 503 with ``Retry-After: 60``
    was marked down for ``cooldown_s`` (1 s) only, and sent calls again at its next passing health
    probe (an overloaded engine still answers ``/health``), 59 s before it asked to be.

    Rule: a backend whose 429 or 503 names a ``Retry-After`` stays down for the longer of that
    time and ``cooldown_s``, whatever its health probes say, and comes back after it."""
    busy = canned[0]
    busy.status, busy.headers, busy.answer = status, {"Retry-After": "60"}, {"error": {"message": "busy"}}
    now = [1000.0]
    async with _dispatcher(
        _inventory([busy]), health_interval_s=0.02, max_attempts=1, clock=lambda: now[0]
    ) as dispatcher:
        with pytest.raises(BackendFailed, match=rf"HTTP {status} \(Retry-After: 60 s\)"):
            if streamed:
                async for _ in dispatcher.stream(PAYLOAD, slo_ttft_s=30.0, priority=0):
                    pass
            else:
                await dispatcher.chat(PAYLOAD, slo_ttft_s=30.0, priority=0)
        now[0] += 30  # past cooldown_s, short of the 60 s asked for
        await _probed(busy, 3)
        assert dispatcher.is_down("c0")
        now[0] += 31
        await _probed(busy, 3)
        assert not dispatcher.is_down("c0")


def test_a_calls_image_is_routed_at_its_fixed_estimate_not_its_data_urls_length() -> None:
    """Kills: ``route_request`` estimating the prompt by its text with an image part's base64 in it
    (a 1 MB photo routed as a prompt of some 260,000 tokens: no backend's KV headroom fits it).

    Rule: the route request's prompt is ``estimate_prompt_tokens`` of the messages: each image
    part ``IMAGE_TOKENS``."""
    inventory = _inventory([])
    photo = {"type": "image_url", "image_url": {"url": "data:image/jpeg;base64," + "/9j/" * 250_000}}
    messages = [{"role": "user", "content": [{"type": "text", "text": "What is this?"}, photo]}]
    request = _dispatcher(inventory).route_request({"model": "m", "messages": messages})
    assert request.prompt_tokens == estimate_prompt_tokens(messages) < 2 * IMAGE_TOKENS


async def test_a_model_no_backend_serves_is_unknown_model_not_a_passing_lack_of_backends() -> None:
    """Kills: the router raising plain ``NoBackend`` for a model that no backend of the inventory
    serves (as for one whose backends are all down): a caller could not tell a call that can never
    be served (the gateway's 404 ``model_not_found``) from one worth retrying (its 503).

    Rule: a model no backend serves raises ``UnknownModel`` (a ``NoBackend``); a served model whose
    every backend is down raises ``NoBackend`` that is not ``UnknownModel``."""
    inventory = inventory_from_mapping(
        {"backends": [{"name": "gone", "url": _dead_url(), "engine": "openai", "models": ["m"]}]}
    )
    async with _dispatcher(inventory, max_attempts=1) as dispatcher:
        with pytest.raises(UnknownModel, match="no backend serves model 'other'"):
            await dispatcher.chat({**PAYLOAD, "model": "other"})
        with pytest.raises(BackendFailed):
            await dispatcher.chat(PAYLOAD)
        assert dispatcher.is_down("gone")
        with pytest.raises(NoBackend) as raised:
            await dispatcher.chat(PAYLOAD)
        assert not isinstance(raised.value, UnknownModel) and raised.value.retry_after_s is None


@pytest.mark.parametrize("streamed", [False, True], ids=["json", "streamed"])
async def test_when_every_backend_is_held_down_by_its_retry_after_the_refusal_says_until_when(
    canned: list[Canned], streamed: bool
) -> None:
    """Kills: ``NoBackend`` (and the last attempt's ``BackendFailed``) raised without the time the
    backends asked for: with every backend of the model held down by its ``Retry-After`` the
    caller was told nothing of when to come back (the gateway's 503 carried no ``Retry-After``),
    and the call first waited out the whole recovery wait for backends that could not come back
    within it.

    Rule: when every backend that could serve the call is held down by its ``Retry-After``, the
    call fails with ``retry_after_s`` = the seconds until the first of them may be used again, at
    once when that is past the recovery wait; one backend down without a ``Retry-After`` (its
    return unknown) leaves it ``None``."""
    canned[0].status, canned[0].headers = 503, {"Retry-After": "60"}
    canned[1].status, canned[1].headers = 429, {"Retry-After": "20"}
    for server in canned:
        server.answer = {"error": {"message": "busy"}}
    now = [1000.0]

    async def call(dispatcher: Dispatcher) -> None:
        if streamed:
            async for _ in dispatcher.stream(PAYLOAD, slo_ttft_s=30.0, priority=0):
                pass
        else:
            await dispatcher.chat(PAYLOAD, slo_ttft_s=30.0, priority=0)

    async with _dispatcher(_inventory(canned), recovery_wait_s=10.0, clock=lambda: now[0]) as dispatcher:
        async with asyncio.timeout(30):  # the clock stands still: a recovery wait would never end
            with pytest.raises(NoBackend) as raised:
                await call(dispatcher)
        assert sum(server.posts for server in canned) == 2
        assert raised.value.retry_after_s == 20.0 and "after:" in str(raised.value)
        now[0] += 5
        async with asyncio.timeout(30):
            with pytest.raises(NoBackend) as raised:
                await call(dispatcher)
        assert raised.value.retry_after_s == 15.0 and sum(server.posts for server in canned) == 2
    # With two attempts only, both spent on the two busy backends: the last failure says it too.
    for server in canned:
        server.posts = 0
    async with _dispatcher(_inventory(canned), max_attempts=2, clock=lambda: now[0]) as dispatcher:
        with pytest.raises(BackendFailed, match="call failed on 2 attempts") as failed:
            await call(dispatcher)
        assert failed.value.retry_after_s == 20.0
    # A backend down for a failure that named no time: when it comes back is unknown.
    canned[1].status, canned[1].headers = 500, {}
    async with _dispatcher(_inventory(canned), max_attempts=2, clock=lambda: now[0]) as dispatcher:
        with pytest.raises(BackendFailed) as failed:
            await call(dispatcher)
        assert failed.value.retry_after_s is None
        with pytest.raises(NoBackend) as raised:
            await call(dispatcher)
        assert raised.value.retry_after_s is None


async def test_an_engines_retry_after_holds_it_down_under_every_name_it_serves_by(
    canned: list[Canned],
) -> None:
    """Kills: ``_failed`` holding down only the backend name whose call got the ``Retry-After``:
    an engine listed under two names (the same URL: one per model alias, or per tenant) that
    answered 503 ``Retry-After: 60`` was sent the same call again at once under its other name,
    and every later call there too, for the minute it asked to be left alone.

    Rule (docs/dispatch.md, "Dispatcher and failover"): a ``Retry-After`` holds down every backend
    that shares the URL of the one that answered it (one engine); the call fails over only to
    other engines, and fails with that engine's ``retry_after_s`` when there is none."""
    busy = canned[0]
    busy.status, busy.headers, busy.answer = 503, {"Retry-After": "60"}, {"error": {"message": "busy"}}
    inventory = inventory_from_mapping(
        {
            "backends": [
                {"name": name, "url": busy.url + slash, "engine": "openai", "models": ["m"]}
                for name, slash in (("alias-a", ""), ("alias-b", "/"))
            ]
        }
    )
    now = [1000.0]
    async with _dispatcher(inventory, recovery_wait_s=10.0, clock=lambda: now[0]) as dispatcher:
        async with asyncio.timeout(30):
            with pytest.raises(NoBackend) as raised:
                await dispatcher.chat(PAYLOAD, slo_ttft_s=30.0, priority=0)
        assert busy.posts == 1 and raised.value.retry_after_s == 60.0
        assert dispatcher.is_down("alias-a") and dispatcher.is_down("alias-b")
    # A failure that names no time stays the failing name's own (another name may be served well).
    busy.status, busy.headers, busy.posts = 500, {}, 0
    async with _dispatcher(inventory, max_attempts=2) as dispatcher:
        with pytest.raises(BackendFailed, match="call failed on 2 attempts"):
            await dispatcher.chat(PAYLOAD, slo_ttft_s=30.0, priority=0)
        assert busy.posts == 2


async def test_a_retry_after_holds_down_only_the_engine_at_that_path(canned: list[Canned]) -> None:
    """Review R54: engines were matched by the URL lower-cased, so a ``Retry-After`` from the
    engine at ``/A`` held down the one at ``/a`` too (paths are case-sensitive: two engines behind
    one proxy), and the call was refused without trying it.

    Rule: a ``Retry-After`` holds down the backends with the answering one's ``engine_key``."""
    busy = canned[0]
    busy.status, busy.headers, busy.answer = 503, {"Retry-After": "60"}, {"error": {"message": "busy"}}
    inventory = inventory_from_mapping(
        {
            "backends": [
                {"name": name, "url": busy.url + path, "engine": "openai", "models": ["m"]}
                for name, path in (("upper", "/A"), ("lower", "/a"))
            ]
        }
    )
    async with _dispatcher(inventory, recovery_wait_s=10.0) as dispatcher:
        async with asyncio.timeout(30):
            with pytest.raises(NoBackend):
                await dispatcher.chat(PAYLOAD, slo_ttft_s=30.0, priority=0)
    assert busy.posts == 2  # both engines were asked, each answered its own 503
