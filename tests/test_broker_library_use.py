"""The dispatcher and the GPU broker as a library user sees them.

Real components only: simulated vLLM backends (``SimServer``) and hostile ones
(``http.server``) over real HTTP on 127.0.0.1, the real SQLite and PostgreSQL stores, the real
``agentgate`` CLI entry point.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import gzip
import http.server
import json
import re
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import _http
import pytest
from test_broker_gated import Setup
from test_broker_restart_budget import World, lease

from agentgate.cli import broker as broker_cli
from agentgate.cli.main import main
from agentgate.dispatch import inventory_from_mapping
from agentgate.dispatch.backends import MAX_ANSWER_BYTES, MAX_USAGE_TOKENS, BackendClient, ChatChunk, Timeouts
from agentgate.dispatch.baselines import RoundRobinRouter
from agentgate.dispatch.broker import (
    Broker,
    BrokerSnapshot,
    GangRequest,
    TenantQuota,
    from_inventory,
    synthetic_topology,
)
from agentgate.dispatch.dispatcher import Dispatcher
from agentgate.dispatch.inventory import Backend, Inventory, load_inventory, parse_inventory
from agentgate.dispatch.quota import TenantQuota as TenantQuota_
from agentgate.dispatch.router import Router, RouteRequest
from agentgate.errors import (
    AnswerTooLarge,
    BackendFailed,
    BrokerError,
    DispatchError,
    InputError,
    InventoryError,
    NoBackend,
    Shed,
    StoreError,
)
from agentgate.sim import SimServer
from agentgate.store import SQLiteStore, Store
from agentgate.store.broker_leases import BrokerLeaseStore

MODEL = "llama-3.1-8b"
WAIT_S = 5.0


class RawBackend:
    """A real HTTP server on 127.0.0.1 whose POST answer is made by ``respond(handler)``."""

    def __init__(self, respond: Callable[[http.server.BaseHTTPRequestHandler], None]) -> None:
        self.posts = 0

        raw = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                with contextlib.suppress(OSError):  # a probe cut short when the dispatcher closes
                    self.send_response(200)
                    self.send_header("content-length", "2")
                    self.end_headers()
                    self.wfile.write(b"ok")

            def do_POST(self) -> None:
                raw.posts += 1
                self.body = self.rfile.read(int(self.headers.get("content-length") or 0))
                with contextlib.suppress(OSError):  # a caller that gave up
                    respond(self)

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.02,), daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(WAIT_S)


@pytest.fixture
def sim() -> Iterator[SimServer]:
    server = SimServer(time_scale=0.05, scrape_lag_s=0.05).start()
    yield server
    server.stop()


def _inventory(*urls: str, **extra: Any) -> Inventory:
    return inventory_from_mapping(
        {
            "backends": [
                {"name": f"b{i}", "url": url, "engine": "vllm", "models": [MODEL], **extra}
                for i, url in enumerate(urls)
            ]
        }
    )


def _payload(i: int = 0, max_tokens: int = 8) -> dict[str, object]:
    return {
        "model": MODEL,
        "messages": [{"role": "user", "content": f"request {i}: hello"}],
        "max_tokens": max_tokens,
    }


# --- a backend that redirects: the call never leaves the inventory's hosts --------------------------


@pytest.mark.parametrize("status", [301, 302, 303, 307, 308])
@pytest.mark.parametrize("streamed", [False, True])
async def test_a_redirecting_backend_is_backend_failed_and_the_payload_never_reaches_the_target(
    sim: SimServer, status: int, streamed: bool
) -> None:
    def redirect(handler: http.server.BaseHTTPRequestHandler) -> None:
        handler.send_response(status)
        handler.send_header("location", sim.url + "/v1/chat/completions")
        handler.send_header("content-length", "0")
        handler.end_headers()

    front = RawBackend(redirect)
    try:
        async with Dispatcher(_inventory(front.url), Router(_inventory(front.url)), max_attempts=1) as d:
            with pytest.raises(BackendFailed, match=f"HTTP {status}"):
                if streamed:
                    async for _ in d.stream(_payload(), priority=0):
                        pass
                else:
                    await d.chat(_payload(), priority=0)
        assert front.posts == 1
        assert sim.served == 0
    finally:
        front.stop()


# --- max_concurrency is a cap, not a preference ----------------------------------------------------


class SlowBackend(RawBackend):
    """Answers every chat call after ``delay_s``, counting how many it holds at once; a call whose
    body says ``fail-now`` gets an HTTP 503 at once."""

    def __init__(self, delay_s: float) -> None:
        self.now = 0
        self.most = 0
        lock = threading.Lock()

        def respond(handler: http.server.BaseHTTPRequestHandler) -> None:
            if b"fail-now" in handler.body:  # type: ignore[attr-defined]
                handler.send_response(503)
                handler.send_header("content-length", "0")
                handler.end_headers()
                return
            with lock:
                self.now += 1
                self.most = max(self.most, self.now)
            threading.Event().wait(delay_s)
            with lock:
                self.now -= 1
            body = (
                b'{"choices":[{"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}],'
                b'"usage":{"prompt_tokens":3,"completion_tokens":1}}'
            )
            handler.send_response(200)
            handler.send_header("content-type", "application/json")
            handler.send_header("content-length", str(len(body)))
            handler.end_headers()
            handler.wfile.write(body)

        super().__init__(respond)


@pytest.mark.parametrize("priority", [0, 1])
async def test_max_concurrency_is_never_exceeded_and_waiting_callers_are_served_in_their_slo(
    priority: int,
) -> None:
    slow = SlowBackend(0.15)
    try:
        inv = _inventory(slow.url, max_concurrency=2)
        async with Dispatcher(inv, Router(inv)) as d:
            results = await asyncio.gather(
                *(d.chat(_payload(i), priority=priority, slo_ttft_s=3.0) for i in range(6)),
                return_exceptions=True,
            )
            assert d.router.in_flight("b0") == 0
        assert all(not isinstance(r, BaseException) for r in results), results
        assert slow.most <= 2
        assert slow.posts == 6
    finally:
        slow.stop()


async def test_class_2_callers_finding_every_slot_taken_are_shed_at_once() -> None:
    slow = SlowBackend(0.3)
    try:
        inv = _inventory(slow.url, max_concurrency=2)
        async with Dispatcher(inv, Router(inv)) as d:
            results = await asyncio.gather(
                *(d.chat(_payload(i), priority=2, slo_ttft_s=5.0) for i in range(5)), return_exceptions=True
            )
            assert d.router.in_flight("b0") == 0
        shed = [r for r in results if isinstance(r, Shed)]
        assert len(shed) == 3 and all("class 2 shed" in str(r) for r in shed), results
        assert slow.posts == 2
    finally:
        slow.stop()


async def test_callers_that_cannot_get_a_slot_within_their_slo_are_shed_and_hold_nothing() -> None:
    slow = SlowBackend(1.0)
    try:
        inv = _inventory(slow.url, max_concurrency=1)
        async with Dispatcher(inv, Router(inv)) as d:
            results = await asyncio.gather(
                *(d.chat(_payload(i), priority=0, slo_ttft_s=0.3) for i in range(4)),
                return_exceptions=True,
            )
            assert d.router.in_flight("b0") == 0
        served = [r for r in results if not isinstance(r, BaseException)]
        shed = [r for r in results if isinstance(r, Shed)]
        assert len(served) == 1 and len(shed) == 3, results
        assert all("max_concurrency" in str(r) and r.retry_after_s >= 1.0 for r in shed)
        assert slow.most == 1 and slow.posts == 1
    finally:
        slow.stop()


# --- the CLI prints what callers named as one printable line per row -------------------------------


def run_cli(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="agentgate")
    broker_cli.register(parser.add_subparsers(dest="group"))
    args = parser.parse_args(argv)
    code: int = args.handler(args)
    return code


def test_the_cli_escapes_control_characters_in_ids_so_no_row_can_be_forged(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    inventory = tmp_path / "inv.yaml"
    inventory.write_text(
        "nodes: [{name: n0}]\ngpus:\n"
        "  - {id: g0, type: H100, memory_gb: 80, node: n0}\n"
        "  - {id: g1, type: H100, memory_gb: 80, node: n0}\n"
    )
    tenant = "t\x1b[31m"
    forged = "evil\nfake  t  0  8  node  active"
    with SQLiteStore(tmp_path / "s.db") as store:
        broker = Broker(
            from_inventory(load_inventory(inventory)),
            [TenantQuota(tenant, 2)],
            journal=BrokerLeaseStore(store),
        )
        broker.submit(GangRequest(forged, tenant, gpus=1))
        broker.submit(GangRequest("q\r\u202ezz", tenant, gpus=2))
    db = str(tmp_path / "s.db")
    for argv, lines, shown in (
        (["broker", "leases", "--store", db], 3, "evil\\nfake"),
        (["broker", "queue", "--store", db], 3, "q\\r\\u202ezz"),
        (["broker", "inventory", "--inventory", str(inventory), "--store", db], 5, "evil\\nfake"),
    ):
        assert run_cli(argv) == 0
        out = capsys.readouterr().out
        assert len(out.splitlines()) == lines, out
        assert not any(c in out for c in "\x1b\r\u202e"), out
        assert shown in out
    assert run_cli(["broker", "leases", "--store", db, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["leases"][0]["id"] == forged


# --- a stream's first-token and idle deadlines hold against keep-alive chatter -----------------------


def _chatter(line: bytes) -> Callable[[http.server.BaseHTTPRequestHandler], None]:
    """A stream that sends ``line`` every 50 ms and never a chunk, until the caller hangs up."""

    def respond(handler: http.server.BaseHTTPRequestHandler) -> None:
        handler.send_response(200)
        handler.send_header("content-type", "text/event-stream")
        handler.end_headers()
        for _ in range(400):  # 20 s at most: far past every deadline of the test
            handler.wfile.write(line)
            handler.wfile.flush()
            threading.Event().wait(0.05)

    return respond


FIRST = b'data: {"choices":[{"delta":{"content":"hi"},"finish_reason":null}]}\n\n'


@pytest.mark.parametrize(
    "line",
    [b": keep-alive\n\n", b"event: ping\n\n", b'data: {"choices":[]}\n\n'],
    ids=["comment", "event-field", "empty-event"],
)
@pytest.mark.parametrize("after_first", [False, True])
async def test_a_stream_that_chatters_without_chunks_still_hits_its_deadline(
    line: bytes, after_first: bool
) -> None:
    respond = _chatter(line)

    def first_then_chatter(handler: http.server.BaseHTTPRequestHandler) -> None:
        if after_first:
            handler.send_response(200)
            handler.send_header("content-type", "text/event-stream")
            handler.end_headers()
            handler.wfile.write(FIRST)
            handler.wfile.flush()
            for _ in range(400):
                handler.wfile.write(line)
                handler.wfile.flush()
                threading.Event().wait(0.05)
        else:
            respond(handler)

    backend = RawBackend(first_then_chatter)
    try:
        inv = _inventory(backend.url)
        timeouts = Timeouts(first_token_s=0.5, idle_s=0.5)
        async with Dispatcher(inv, Router(inv), timeouts=timeouts, max_attempts=1) as d:
            chunks: list[ChatChunk] = []

            async def consume() -> None:
                async for chunk in d.stream(_payload(), priority=0):
                    chunks.append(chunk)

            # Each failure names the limit it missed; agentgate's words are never scrubbed of the
            # prompt (``request 0: hello`` made the first read ``of the [redacted](first_token_s)``).
            missed = (
                "stream silent for 0.5s after its last chunk (idle_s)"
                if after_first
                else "no first token within 0.5s of the request (first_token_s)"
            )
            with pytest.raises(BackendFailed, match=re.escape(missed)):
                await asyncio.wait_for(consume(), WAIT_S)
            assert len(chunks) == (1 if after_first else 0)
            assert d.router.in_flight("b0") == 0
    finally:
        backend.stop()


# --- a call that fails over is charged to its tenant's token bucket once ------------------------------


async def test_a_call_that_fails_over_debits_its_tenants_bucket_once(sim: SimServer) -> None:
    def fail(handler: http.server.BaseHTTPRequestHandler) -> None:
        handler.send_response(503)
        handler.send_header("content-length", "0")
        handler.end_headers()

    broken = RawBackend(fail)
    try:
        inv = _inventory(broken.url, sim.url)
        quota = TenantQuota_(rate_tokens_per_s=1e-9, burst_tokens=1e6)
        router = Router(inv, quotas={"acme": quota})
        async with Dispatcher(inv, router, max_attempts=3) as d:
            for i in range(6):  # the first choice is drawn among near-ties: some go to the broken one
                await d.chat(_payload(i), tenant="acme", priority=0)
            request = d.route_request(_payload(0), tenant="acme")
            cost = request.prompt_tokens + request.max_output_tokens
            assert broken.posts >= 1
            assert router._buckets["acme"].tokens == pytest.approx(1e6 - 6 * cost, abs=1e-3)
    finally:
        broken.stop()


def test_a_full_pool_makes_a_request_wait_within_its_slo_and_never_forever() -> None:
    inv = _inventory("http://127.0.0.1:9", max_concurrency=1)
    router = Router(inv)
    first = router.route(RouteRequest("r1", MODEL, 10, 8, arrived_at=0.0), 0.0)
    assert first.action == "dispatch"
    waiting = router.route(RouteRequest("r2", MODEL, 10, 8, slo_ttft_s=1.0, arrived_at=0.0), 0.5)
    assert waiting.action == "wait" and 0 < waiting.wait_s <= 0.5
    for slo in (float("nan"), 0.4, -1.0):
        with pytest.raises(Shed, match="max_concurrency"):
            router.route(RouteRequest("r3", MODEL, 10, 8, slo_ttft_s=slo, arrived_at=0.0), 0.5)
    router.finished("r1", 0.6)
    assert router.route(RouteRequest("r2", MODEL, 10, 8, slo_ttft_s=1.0, arrived_at=0.0), 0.6).backend == "b0"


async def test_a_dispatcher_used_before_start_is_a_typed_error_holding_nothing() -> None:
    inv = _inventory("http://127.0.0.1:9")
    d = Dispatcher(inv, Router(inv))
    with pytest.raises(DispatchError, match="not started"):
        await d.chat(_payload())
    with pytest.raises(DispatchError, match="not started"):
        async for _ in d.stream(_payload()):
            pass
    assert d.router.in_flight("b0") == 0


# --- an error the backend reports inside a stream is a failure, not the end of an answer --------------


def _sse(*events: str) -> Callable[[http.server.BaseHTTPRequestHandler], None]:
    def respond(handler: http.server.BaseHTTPRequestHandler) -> None:
        body = "".join(f"data: {event}\n\n" for event in events).encode()
        handler.send_response(200)
        handler.send_header("content-type", "text/event-stream")
        handler.send_header("content-length", str(len(body)))
        handler.end_headers()
        handler.wfile.write(body)

    return respond


ERRORS = [
    pytest.param(
        '{"object":"error","message":"CUDA out of memory","type":"InternalServerError","code":500}',
        id="vllm-object-error",
    ),
    pytest.param('{"error":{"message":"engine died","type":"server_error","code":500}}', id="openai-error"),
]
HI = '{"choices":[{"delta":{"content":"hi"},"finish_reason":null}]}'


@pytest.mark.parametrize("error", ERRORS)
async def test_a_streamed_error_event_before_output_fails_over_to_a_healthy_backend(
    sim: SimServer, error: str
) -> None:
    broken = RawBackend(_sse(error, "[DONE]"))
    try:
        inv = _inventory(broken.url, sim.url)
        async with Dispatcher(inv, RoundRobinRouter(inv), max_attempts=3) as d:  # the broken one first
            chunks = [c async for c in d.stream(_payload(), priority=0)]
            assert any(c.finish_reason == "length" for c in chunks), chunks
            assert d.is_down("b0")
        assert broken.posts == 1 and sim.served == 1
    finally:
        broken.stop()


@pytest.mark.parametrize("error", ERRORS)
async def test_a_streamed_error_event_after_output_is_backend_failed_never_a_short_answer(error: str) -> None:
    broken = RawBackend(_sse(HI, error, "[DONE]"))
    try:
        inv = _inventory(broken.url)
        async with Dispatcher(inv, Router(inv), max_attempts=1) as d:
            chunks: list[ChatChunk] = []
            with pytest.raises(BackendFailed, match="reported an error"):
                async for chunk in d.stream(_payload(), priority=0):
                    chunks.append(chunk)
            assert [c.content for c in chunks] == ["hi"]
    finally:
        broken.stop()


# --- an inventory whose topology contradicts itself is refused, naming the line ----------------------

TWO_NODES = "nodes: [{name: n}, {name: m}]\n"


@pytest.mark.parametrize(
    ("text", "line", "words"),
    [
        pytest.param(
            TWO_NODES + "gpus:\n"
            "  - {id: g, type: H100, memory_gb: 80, node: n, nvlink_domain: d}\n"
            "  - {id: h, type: H100, memory_gb: 80, node: m, nvlink_domain: d}\n",
            4,
            "spans racks",
            id="domain-over-two-rackless-nodes",
        ),
        pytest.param(
            TWO_NODES + "gpus:\n"
            "  - {id: g, type: H100, memory_gb: 80, node: n, nvlink_domain: 'gpu:h'}\n"
            "  - {id: h, type: H100, memory_gb: 80, node: m}\n",
            3,
            "reserved",
            id="domain-named-like-a-lone-gpu",
        ),
        pytest.param(
            "racks: [{name: 'node:m'}]\nnodes: [{name: n, rack: 'node:m'}, {name: m}]\n",
            1,
            "reserved",
            id="rack-named-like-a-rackless-node",
        ),
        pytest.param(
            "interconnect: {bandwidth_gbps: {node: -5}}\n", 1, "greater than 0", id="negative-bandwidth"
        ),
        pytest.param("interconnect: {bandwidth_gbps: {node: .nan}}\n", 1, "finite", id="nan-bandwidth"),
    ],
)
def test_a_contradictory_topology_is_refused_naming_the_line(text: str, line: int, words: str) -> None:
    with pytest.raises(InventoryError, match=rf"inv\.yaml:{line}\b.*{words}"):
        parse_inventory(text, source="inv.yaml")


def test_a_domain_shared_by_the_nodes_of_one_rack_still_loads_as_one_domain() -> None:
    inv = parse_inventory(
        "racks: [{name: r}]\nnodes: [{name: n, rack: r}, {name: m, rack: r}]\ngpus:\n"
        "  - {id: g, type: H100, memory_gb: 80, node: n, nvlink_domain: nvl72}\n"
        "  - {id: h, type: H100, memory_gb: 80, node: m, nvlink_domain: nvl72}\n"
    )
    topology = from_inventory(inv)
    [domain] = topology.members["nvlink_domain"]
    assert [topology.gpus[i].group("nvlink_domain") for i in domain] == ["nvl72", "nvl72"]


async def test_callers_cancelled_while_waiting_or_in_flight_keep_no_slot() -> None:
    slow = SlowBackend(0.2)
    try:
        inv = _inventory(slow.url, max_concurrency=2)
        async with Dispatcher(inv, Router(inv)) as d:
            calls = [asyncio.create_task(d.chat(_payload(i), priority=1, slo_ttft_s=5.0)) for i in range(10)]
            await asyncio.sleep(0.1)  # two in flight, eight waiting for a slot
            for task in calls[::2]:
                task.cancel()
            results = await asyncio.gather(*calls, return_exceptions=True)
            assert d.router.in_flight("b0") == 0
            served = [r for r in results if not isinstance(r, BaseException)]
            assert len(served) == 5
            assert all(isinstance(r, asyncio.CancelledError) for r in results[::2])
            # the slots of the cancelled callers are free: a new call is served at once
            await asyncio.wait_for(d.chat(_payload(99), priority=1, slo_ttft_s=5.0), 2.0)
        # (slow.most may exceed 2 here: http.server finishes a call its caller abandoned, where a
        # real engine aborts it on the disconnect; the router's count is what the cap is about)
    finally:
        slow.stop()


# --- GatedBroker: a journal write that fails after the broker took the request -----------------------


class FlakyJournal(BrokerLeaseStore):
    """The real journal, with one injected fault: ``save`` raises ``StoreError`` while ``failing``
    (what a PostgreSQL outage does between the Gate's decision and the broker's journal write)."""

    failing = False

    def save(self, snapshot: BrokerSnapshot) -> None:
        if self.failing:
            raise StoreError("injected: the journal's store is unreachable")
        super().save(snapshot)


def test_a_lease_whose_journal_write_failed_stays_linked_to_its_decision(tmp_path: Path) -> None:
    setup = Setup(tmp_path)
    try:
        journal = FlakyJournal(setup.gate.store)
        setup.broker.journal = journal
        trainer = setup.ids["trainer"]
        journal.failing = True
        with pytest.raises(StoreError, match="injected"):
            setup.gated.submit(trainer, GangRequest("ft-1", "ignored", gpus=2, gpu_type="H100"))
        # The broker holds the lease (its events wait for the next call): the decision stays linked.
        assert [lease.id for lease in setup.broker.leases()] == ["ft-1"]
        decided = setup.gated.decisions.get("ft-1")
        assert decided is not None
        journal.failing = False
        setup.gated.advance()
        setup.gated.release(trainer, "ft-1")
        outcomes = [(e.status, e.ref) for e in setup.entries() if e.kind == "outcome"]
        assert outcomes == [("lease_granted", decided.audit_index), ("lease_released", decided.audit_index)]
        assert setup.gated.decisions.get("ft-1") is None
        assert journal.load() is not None and journal.load().leases == ()  # type: ignore[union-attr]
    finally:
        setup.gate.close()


def test_a_renewal_whose_journal_write_failed_still_pays_for_the_time_it_added(store: Store) -> None:
    world = World(store.url)
    try:
        journal = FlakyJournal(world.process.store)
        world.process.broker.journal = journal
        gated = world.process.gated
        gated.submit(world.trainer, lease("ft-1"))  # 2 GPUs, t=1000..1060: 120,000 reserved
        world.clock.now += 30
        journal.failing = True
        with pytest.raises(StoreError, match="injected"):
            gated.renew(world.trainer, "ft-1")  # the broker renewed it (to t=1090): 60,000 more
        journal.failing = False
        assert world.process.broker.leases()[0].expires_at == 1090.0
        world.clock.now += 100
        gated.advance()
        expired = world.process.entries()[-1]
        assert (expired.status, expired.budget_delta) == ("lease_expired", 180_000)
        assert world.spent() == 180_000 and world.remaining() == world.budget - 180_000
    finally:
        world.process.gate.close()


# --- a tenant token quota that is no quota is refused when it is made, not at a tenant's first call ----


@pytest.mark.parametrize(
    ("rate", "burst"),
    [(0.0, 10.0), (10.0, 0.0), (-1.0, 10.0), (float("nan"), 10.0), (10.0, float("nan")), (float("inf"), 1.0)],
)
def test_a_token_quota_that_is_no_quota_is_a_typed_error_when_made(rate: float, burst: float) -> None:
    with pytest.raises(InputError, match="quota"):
        TenantQuota_(rate_tokens_per_s=rate, burst_tokens=burst)


@pytest.mark.parametrize(
    "setting", [{"block_tokens": 0}, {"block_tokens": -16}, {"metrics_max_age_s": float("nan")}]
)
def test_router_settings_that_cannot_work_are_a_typed_error(setting: dict[str, Any]) -> None:
    with pytest.raises(InputError, match=next(iter(setting))):
        Router(_inventory("http://127.0.0.1:9"), **setting)


@pytest.mark.parametrize(
    "setting",
    [
        {"health_interval_s": 0.0},
        {"scrape_interval_s": -1.0},
        {"health_interval_s": float("nan")},
        {"cooldown_s": -1.0},
        {"recovery_wait_s": float("nan")},
    ],
)
def test_dispatcher_settings_that_cannot_work_are_a_typed_error(setting: dict[str, Any]) -> None:
    inv = _inventory("http://127.0.0.1:9")
    with pytest.raises(InputError, match=next(iter(setting))):
        Dispatcher(inv, Router(inv), **setting)


# --- every backend down, then back --------------------------------------------------------------------


async def test_every_backend_down_is_no_backend_in_bounded_time_and_a_revived_one_serves_again() -> None:
    servers = [SimServer(time_scale=0.05, scrape_lag_s=0.05).start() for _ in range(2)]
    try:
        inv = _inventory(*(s.url for s in servers))
        async with Dispatcher(
            inv, Router(inv), health_interval_s=0.05, cooldown_s=0.2, recovery_wait_s=0.5
        ) as d:
            await d.chat(_payload(0), priority=0)
            for server in servers:
                server.kill()
            loop = asyncio.get_running_loop()
            started = loop.time()
            with pytest.raises(NoBackend, match="down"):
                await d.chat(_payload(1), priority=0)
            assert loop.time() - started < 3.0
            assert d.router.in_flight("b0") == d.router.in_flight("b1") == 0
            servers[1].revive()
            result = await asyncio.wait_for(d.chat(_payload(2), priority=0), 5.0)  # waits for the probe
            assert result.backend == "b1" and d.is_down("b0")
    finally:
        for server in servers:
            server.stop()


# --- a broker restored from a snapshot that names one id twice -----------------------------------------


def test_restore_refuses_a_snapshot_that_names_one_lease_or_request_twice_and_changes_nothing() -> None:
    topology = synthetic_topology(1, 8)
    broker = Broker(topology, [TenantQuota("a", 8)], clock=lambda: 0.0)
    broker.submit(GangRequest("x", "a", 2))
    broker.submit(GangRequest("y", "a", 2))
    broker.submit(GangRequest("w", "a", 8))  # waits
    snap = broker.snapshot()
    x, y = snap.leases
    twin = dataclasses.replace(y, id="x", request=dataclasses.replace(y.request, id="x"))
    queued_twin = dataclasses.replace(
        snap.queue[0], request=dataclasses.replace(snap.queue[0].request, id="x")
    )
    for bad in (
        dataclasses.replace(snap, leases=(x, twin)),
        dataclasses.replace(snap, queue=(queued_twin,)),
        dataclasses.replace(snap, queue=(snap.queue[0], snap.queue[0])),
    ):
        fresh = Broker(topology, [TenantQuota("a", 8)], clock=lambda: 0.0)
        with pytest.raises(BrokerError, match=r"names .* twice"):
            fresh.restore(bad)
        assert fresh.free_gpus() == 8 and fresh.usage("a") == 0 and not fresh.leases() and not fresh.queue()
    fresh = Broker(topology, [TenantQuota("a", 8)], clock=lambda: 0.0)
    fresh.restore(snap)
    fresh.release("x")
    fresh.release("y")
    assert fresh.free_gpus() == 0 and [lease.id for lease in fresh.leases()] == ["w"]  # w got all 8


# --- an answer too large to be one is refused while it is read ----------------------------------------


def _huge(gzipped: bool) -> Callable[[http.server.BaseHTTPRequestHandler], None]:
    """A 200 answer whose body (after gzip, if ``gzipped``) is MAX_ANSWER_BYTES + 1 MiB."""
    size = MAX_ANSWER_BYTES + (1 << 20)
    body = gzip.compress(b" " * size, compresslevel=1) if gzipped else None

    def respond(handler: http.server.BaseHTTPRequestHandler) -> None:
        handler.send_response(200)
        handler.send_header("content-type", "application/json")
        if body is not None:
            handler.send_header("content-encoding", "gzip")
            handler.send_header("content-length", str(len(body)))
            handler.end_headers()
            handler.wfile.write(body)
            return
        handler.end_headers()  # no length: the body runs until the connection closes
        block = b" " * (1 << 20)
        for _ in range(size >> 20):
            handler.wfile.write(block)

    return respond


@pytest.mark.parametrize("gzipped", [False, True], ids=["plain", "gzip-bomb"])
@pytest.mark.parametrize("pooled", [True, False], ids=["aiohttp", "httpx"])
async def test_an_answer_larger_than_any_chat_completion_is_answer_too_large(
    gzipped: bool, pooled: bool
) -> None:
    """Refused while it is read: ``AnswerTooLarge``, not retried (until review R57 a
    ``BackendFailed``, which the dispatcher retried on every backend, marking each down). A gzip
    bomb is refused at its head, never decoded: backends are asked for ``Accept-Encoding:
    identity`` since review R67, and one that answers encoded anyway fails (``BackendFailed``
    naming the encoding); until then it was decoded up to the bound."""
    backend = RawBackend(_huge(gzipped))
    refused: tuple[type[Exception], str] = (
        (BackendFailed, "Content-Encoding: gzip, which it was not asked for")
        if gzipped
        else (AnswerTooLarge, "larger than")
    )
    try:
        inv = _inventory(backend.url)
        if pooled:
            async with Dispatcher(inv, Router(inv), max_attempts=1) as d:
                with pytest.raises(refused[0], match=refused[1]):
                    await d.chat(_payload(), priority=0)
        else:
            async with _http.AsyncClient() as http_client:
                client = BackendClient(inv.backends[0], http_client, Timeouts(first_token_s=10))
                with pytest.raises(refused[0], match=refused[1]):
                    await client.chat(_payload())
    finally:
        backend.stop()


async def test_a_backend_marked_down_by_one_failed_call_still_counts_the_calls_it_runs() -> None:
    slow = SlowBackend(0.6)
    try:
        inv = _inventory(slow.url, max_concurrency=2)
        async with Dispatcher(inv, Router(inv), health_interval_s=0.02, cooldown_s=0.05, max_attempts=1) as d:
            running = asyncio.create_task(d.chat(_payload(0), priority=0, slo_ttft_s=5.0))
            await asyncio.sleep(0.1)
            failing = {"model": MODEL, "messages": [{"role": "user", "content": "fail-now"}], "max_tokens": 4}
            with pytest.raises(BackendFailed, match="503"):
                await d.chat(failing, priority=0, slo_ttft_s=5.0)
            assert d.is_down("b0")
            while d.is_down("b0"):  # its probe passes: it is used again
                await asyncio.sleep(0.02)
            assert d.router.in_flight("b0") == 1  # the call still running there
            more = [asyncio.create_task(d.chat(_payload(i), priority=0, slo_ttft_s=5.0)) for i in (1, 2)]
            await asyncio.gather(running, *more)
            assert d.router.in_flight("b0") == 0
        assert slow.most <= 2
    finally:
        slow.stop()


@pytest.mark.parametrize("max_tokens", [float("inf"), 10**400, MAX_USAGE_TOKENS + 1])
def test_a_max_tokens_no_backend_could_honour_is_a_typed_error_before_routing(max_tokens: object) -> None:
    inv = _inventory("http://127.0.0.1:9")
    d = Dispatcher(inv, Router(inv, quotas={"t": TenantQuota_(10, 100)}))
    payload = {"model": MODEL, "messages": [{"role": "user", "content": "x"}], "max_tokens": max_tokens}
    with pytest.raises(DispatchError, match="max_tokens"):
        d.route_request(payload, tenant="t")


# --- a backend URL that no HTTP client can use is refused when the inventory loads -------------------


@pytest.mark.parametrize(
    "url",
    ["http://exa\x00mple", "http://x\x7f", "http://x:99999", "http://:80", "http://[bad", "http://x\u202e/"],
)
@pytest.mark.parametrize("field", ["url", "metrics_url"])
def test_a_backend_url_no_client_can_use_is_refused_naming_the_line(url: str, field: str) -> None:
    backend = {"name": "b", "url": "http://127.0.0.1:9", "models": [MODEL], field: url}
    with pytest.raises(InventoryError, match=rf"inv\.yaml:1\b.*{field}"):
        parse_inventory(json.dumps({"backends": [backend]}), source="inv.yaml")


def test_usable_backend_urls_still_load() -> None:
    for url in (
        "http://127.0.0.1:8100",
        "https://vllm.example.com/base/",
        "http://[::1]:8000",
    ):  # (a URL with user:password@ is refused: test_dispatch_inventory.py)
        backends = [{"name": "b", "url": url, "models": [MODEL], "metrics_url": url + "/metrics"}]
        assert parse_inventory(json.dumps({"backends": backends})).backends[0].url == url


async def test_one_backend_whose_probe_raises_does_not_stop_the_loops_for_the_others(sim: SimServer) -> None:
    """An inventory built without validation (``model_construct``) may hold a URL httpx refuses
    with an exception of its own; the loops probe every other backend all the same."""
    good = _inventory(sim.url, metrics_url=sim.url + "/metrics").backends[0]
    broken = Backend.model_construct(**{**dict(good), "name": "bad", "url": "http://exa\x00mple"})
    broken = Backend.model_construct(**{**dict(broken), "metrics_url": "http://exa\x00mple/metrics"})
    inv = Inventory.model_construct(backends=(good, broken))
    async with Dispatcher(
        inv, Router(inv), health_interval_s=0.02, scrape_interval_s=0.02, cooldown_s=0.05
    ) as d:
        await asyncio.sleep(0.2)
        assert not any(task.done() for task in d._tasks)
        assert d.is_down("bad") and not d.is_down("b0")
        d._mark_down("b0")  # as a failed call would
        while d.is_down("b0"):  # its probe passes: it comes back
            await asyncio.sleep(0.02)
        assert d.router.states["b0"].load is not None  # and its metrics are read


@pytest.mark.parametrize("field", ["connect_s", "first_token_s", "idle_s", "probe_s"])
@pytest.mark.parametrize("value", [0.0, -1.0, float("nan"), float("inf")])
def test_a_timeout_that_is_no_limit_is_a_typed_error(field: str, value: float) -> None:
    with pytest.raises(InputError, match=field):
        Timeouts(**{field: value})


async def test_closing_the_dispatcher_under_calls_in_flight_ends_each_with_a_typed_error() -> None:
    slow = [SlowBackend(0.5), SlowBackend(0.5)]
    try:
        inv = _inventory(slow[0].url, slow[1].url)
        d = Dispatcher(inv, Router(inv))
        await d.start()

        async def stream() -> None:
            async for _ in d.stream(_payload(9), priority=0):
                pass

        calls = [asyncio.create_task(d.chat(_payload(i), priority=0)) for i in range(4)]
        calls.append(asyncio.create_task(stream()))
        await asyncio.sleep(0.15)
        await d.aclose()
        results = await asyncio.gather(*calls, return_exceptions=True)
        assert all(isinstance(r, DispatchError) for r in results), results
        assert d.router.in_flight("b0") == d.router.in_flight("b1") == 0
        assert not d.is_down("b0") and not d.is_down("b1")  # closing is no fault of theirs
    finally:
        for backend in slow:
            backend.stop()


def test_a_release_whose_journal_write_failed_is_charged_until_the_release_not_until_it_is_recorded(
    store: Store,
) -> None:
    world = World(store.url)
    try:
        journal = FlakyJournal(world.process.store)
        world.process.broker.journal = journal
        gated = world.process.gated
        gated.submit(world.trainer, lease("ft-1"))  # 2 GPUs from t=1000, 120,000 reserved
        world.clock.now += 10
        journal.failing = True
        with pytest.raises(StoreError, match="injected"):
            gated.release(world.trainer, "ft-1")  # released at t=1010; its event waits
        journal.failing = False
        world.clock.now += 40
        gated.advance()  # t=1050: the event is recorded now
        released = world.process.entries()[-1]
        assert (released.status, released.budget_delta) == ("lease_released", 2 * 10 * 1_000)
        assert world.spent() == 20_000 and world.remaining() == world.budget - 20_000
    finally:
        world.process.gate.close()


def test_the_leases_command_shows_everything_a_renewed_lease_holds(
    store: Store, capsys: pytest.CaptureFixture[str]
) -> None:
    world = World(store.url)
    try:
        world.process.gated.submit(world.trainer, lease("ft-1"))  # 120,000 reserved
        world.clock.now += 30
        world.process.gated.renew(world.trainer, "ft-1")  # 60,000 more
        world.process.gate.flush()
        assert main(["broker", "leases", "--json", "--store", world.url]) == 0
        [shown] = json.loads(capsys.readouterr().out)["leases"]
        assert shown["reserved"] == {"usd_micros": 180_000}
    finally:
        world.process.gate.close()
