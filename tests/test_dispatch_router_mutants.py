"""Review R46 (mutation, round 6): the GPU dispatcher's router and the GPU broker.

Each test pins a rule that a mutant of agentgate/dispatch/ (router, dispatcher, backends) or
agentgate/dispatch/broker/ survived the earlier suites with; the mutant it kills is named in its
docstring. Real components only: the router and broker in process, sim backends over loopback.
"""

from __future__ import annotations

import asyncio
import dataclasses
import http.server
import json
import threading
from collections.abc import Iterator, Sequence
from typing import Any

import pytest

from agentgate.dispatch import inventory_from_mapping
from agentgate.dispatch.baselines import RoundRobinRouter
from agentgate.dispatch.broker import (
    Broker,
    BrokerEvent,
    CheckpointNotice,
    GangRequest,
    Granted,
    WorkloadHint,
    synthetic_topology,
)
from agentgate.dispatch.broker import TenantQuota as BrokerQuota
from agentgate.dispatch.dispatcher import Dispatcher
from agentgate.dispatch.inventory import Inventory
from agentgate.dispatch.quota import TenantQuota
from agentgate.dispatch.router import Router, RouteRequest
from agentgate.errors import BackendFailed, NoBackend, Shed
from agentgate.sim import chain_hashes


def pool(n: int = 2, **extra: object) -> Inventory:
    return inventory_from_mapping(
        {
            "backends": [
                {"name": f"b{i}", "url": f"http://127.0.0.1:{9100 + i}", "models": ["m"], **extra}
                for i in range(n)
            ]
        }
    )


def req(i: int, prompt: int = 2000, **kw: object) -> RouteRequest:
    fields: dict[str, object] = {
        "id": f"r{i}",
        "model": "m",
        "prompt_tokens": prompt,
        "max_output_tokens": 100,
        "prefix_hashes": chain_hashes((i, b) for b in range(prompt // 16)),
    }
    fields.update(kw)
    return RouteRequest(**fields)  # type: ignore[arg-type]


# --- router: saturation, SLO, classes ---------------------------------------------------------


def test_a_saturated_waiter_past_its_slo_is_shed_not_told_to_wait() -> None:
    """Kills: _policy._saturated's ``not budget > 0`` loosened (a class-1 request that has waited
    out its SLO for a slot is told to wait again, with a negative wait)."""
    router = Router(pool(1, max_concurrency=1))
    assert router.route(req(0, priority=0), 0.0).action == "dispatch"
    late = req(1, priority=1, slo_ttft_s=1.0, arrived_at=0.0)
    assert router.route(late, 0.5).action == "wait"  # within its budget: waits for the slot
    with pytest.raises(Shed) as shed:
        router.route(late, 1.5)  # 0.5 s past its SLO
    assert shed.value.retry_after_s >= 1.0


def _loaded(router: Router, backend: str, n: int, prompt: int = 4000) -> None:
    """``n`` requests sent to ``backend`` and not yet prefilled (queued prefill there)."""
    for i in range(n):
        plan = router.route(
            req(1000 + i, prompt=prompt, tenant="load", priority=0),
            0.0,
            allowed=lambda b, name=backend: b.name == name,
        )
        assert plan.backend == backend


def _predict(router: Router, backend: str, request: RouteRequest, now: float) -> float:
    return router.predictor(router.states[backend], request, now)


def test_slo_missed_everywhere_class_2_is_shed_where_class_1_waits() -> None:
    """Kills: choose's ``request.priority == 1`` widened to ``>= 1`` (class 2 told to wait for
    the SLO budget like class 1, rather than shed at once)."""
    router = Router(pool(1))
    _loaded(router, "b0", 6)
    probe = req(7, prompt=200)
    best = _predict(router, "b0", probe, 0.0)
    slo = best / 1.5  # missed, by less than its budget: class 1 would wait
    assert router.states["b0"].speed.prefill_s(200, 0) < slo  # reachable on an idle backend
    one = router.route(dataclasses.replace(probe, id="c1", priority=1, slo_ttft_s=slo), 0.0)
    assert one.action == "wait"
    with pytest.raises(Shed, match="class 2 shed"):
        router.route(dataclasses.replace(probe, id="c2", priority=2, slo_ttft_s=slo), 0.0)


def test_a_prompt_no_backend_could_serve_within_its_slo_is_served_best_effort() -> None:
    """Kills: choose's ``_unreachable`` branch removed (a request whose own prefill on an idle
    backend exceeds its SLO is shed, and a retry could never meet it either)."""
    router = Router(pool(2))
    big = req(1, prompt=16000, priority=2, slo_ttft_s=0.001)
    assert router.states["b0"].speed.prefill_s(16000, 0) > 0.001
    plan = router.route(big, 0.0)
    assert plan.action == "dispatch" and "unreachable" in plan.reason


def test_session_affinity_yields_when_its_backend_is_saturated_beyond_the_slack() -> None:
    """Kills: choose's ``p <= best_p + affinity_slack * slo`` dropped (a session stays on its
    backend however much slower than an idle one it has become, as long as the SLO holds)."""
    router = Router(pool(2))
    first = router.route(req(1, prompt=400, session="s"), 0.0)
    home = first.backend
    assert home is not None
    other = "b1" if home == "b0" else "b0"
    router.first_token("r1", 0.1)
    router.finished("r1", 0.2)
    _loaded(router, home, 4)
    nxt = req(2, prompt=400, session="s", arrived_at=1.0)
    p_home, p_other = _predict(router, home, nxt, 1.0), _predict(router, other, nxt, 1.0)
    slo = p_home * 1.01  # its home still meets the SLO ...
    assert p_home - p_other > router.affinity_slack * slo  # ... but is saturated beyond the slack
    plan = router.route(dataclasses.replace(nxt, slo_ttft_s=slo), 1.0)
    assert plan.backend == other and plan.reason != "session affinity"
    # Within the slack the session keeps its backend (the rule, not a mere spread).
    router2 = Router(pool(2))
    home2 = router2.route(req(1, prompt=400, session="s"), 0.0).backend
    router2.first_token("r1", 0.1)
    router2.finished("r1", 0.2)
    again = router2.route(req(2, prompt=400, session="s", arrived_at=1.0), 1.0)
    assert again.backend == home2 and again.reason == "session affinity"


def test_power_of_two_choices_takes_the_less_busy_of_two_near_ties() -> None:
    """Kills: the near-tie pick ``min`` by in-flight count turned ``max`` (equal predictions pile
    onto the busier backend)."""
    for seed in range(5):
        router = Router(pool(2), seed=seed)
        a = router.route(req(1, prompt=400), 0.0)
        router.first_token("r1", 0.05)  # prefilled: it only decodes there now
        b = router.route(req(2, prompt=400, arrived_at=0.1), 0.1)
        assert "near-ties" in b.reason, b.reason
        assert b.backend != a.backend, (seed, b)


# --- router: tenant quotas ---------------------------------------------------------------------


def test_the_bucket_charges_the_output_limit_too_and_a_failover_is_not_charged_again() -> None:
    """Kills: ``_cost`` counting only the prompt (the output limit goes free), and ``_go``
    debiting a failover route again (a tenant pays twice for a backend's failure)."""
    quota = TenantQuota(rate_tokens_per_s=0.001, burst_tokens=5000)
    router = Router(pool(1, max_concurrency=2), quotas={"t": quota})
    # 1000 prompt + 1500 output = 2500: two fit the burst, a third does not.
    r0 = req(0, prompt=1000, max_output_tokens=1500, tenant="t", priority=1)
    assert router.route(r0, 0.0).action == "dispatch"
    router.finished("r0", 0.1)  # the backend failed it before any output ...
    again = router.route(dataclasses.replace(r0, failover=True), 0.1)  # ... routed again: unpaid
    assert again.action == "dispatch"
    assert router.route(req(9, prompt=1000, tenant="other", priority=0), 0.2).action == "dispatch"
    # Saturated now: the tenant's bucket (2500 left) pays for one more of its calls, so it waits.
    r1 = req(1, prompt=1000, max_output_tokens=1500, tenant="t", priority=1, arrived_at=0.3)
    assert router.route(r1, 0.3).action == "wait"
    router.withdraw("r1")
    router.finished("r9", 0.4)
    assert router.route(r1, 0.4).action == "dispatch"  # pays: 0 left
    router.route(req(8, prompt=1000, tenant="other", priority=0), 0.5)
    r2 = req(2, prompt=1000, max_output_tokens=1500, tenant="t", priority=1, arrived_at=0.6)
    with pytest.raises(Shed, match="over its token quota") as shed:
        router.route(r2, 0.6)
    # Retry-After: the bucket's refill time (2500 tokens at 0.001/s), not a token second.
    assert shed.value.retry_after_s > 1000


def test_a_backend_without_kv_headroom_is_passed_over_for_a_slower_one_with_room() -> None:
    """Kills: choose's KV filter (``_kv_fits``) removed: a request goes to the faster-looking
    backend whose KV memory cannot hold it beside what runs there."""
    inventory = inventory_from_mapping(
        {
            "backends": [
                {
                    "name": "small",
                    "url": "http://127.0.0.1:9201",
                    "models": ["m"],
                    "kv_capacity_tokens": 3000,
                },
                {"name": "big", "url": "http://127.0.0.1:9202", "models": ["m"]},
            ]
        }
    )
    router = Router(inventory)
    assert (
        router.route(req(0, prompt=2000, priority=0), 0.0, allowed=lambda b: b.name == "small").backend
        == "small"
    )
    _loaded(router, "big", 3)
    probe = req(5, prompt=1000, slo_ttft_s=60.0)
    assert _predict(router, "small", probe, 0.0) < _predict(router, "big", probe, 0.0)
    plan = router.route(probe, 0.0)
    assert plan.backend == "big"


def test_a_waiter_in_line_is_not_matched_to_a_slot_on_a_backend_that_is_down() -> None:
    """Kills: ``_match`` counting a down engine's free slots as usable by the waiters ahead (the
    waiter is "given" a slot it can never use, and a later, lower-class arrival jumps the line
    onto the one healthy slot that frees)."""
    router = Router(pool(2, max_concurrency=1))
    router.mark_down("b0")
    assert router.route(req(0, priority=0), 0.0).backend == "b1"
    first = req(1, priority=0, slo_ttft_s=10.0, arrived_at=0.1)
    assert router.route(first, 0.1).action == "wait"
    router.finished("r0", 0.2)
    assert router.due(0.2) == ["r1"]
    later = req(2, priority=1, slo_ttft_s=10.0, arrived_at=0.3)
    assert router.route(later, 0.3).action == "wait"  # the freed slot is r1's
    assert router.route(first, 0.35).backend == "b1"


# --- dispatcher over real loopback HTTP --------------------------------------------------------


class Canned:
    """A real HTTP server on 127.0.0.1 answering every chat completion with ``answer`` (a dict: a
    JSON body; a list: the data lines of an SSE stream, sent as they are, so a list without
    ``[DONE]`` is a stream that breaks off), and 200 on every GET (health)."""

    def __init__(self) -> None:
        self.answer: object = {}
        self.posts = 0
        canned = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:
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
                self.send_response(200)
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


# --- the GPU broker -----------------------------------------------------------------------------


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _broker(clock: FakeClock, tenants: Sequence[str] = ("a", "b", "c")) -> Broker:
    topology = synthetic_topology(2, 8)
    quotas = [BrokerQuota(t, len(topology)) for t in tenants]
    return Broker(topology, quotas, clock=clock, ttl_s=1000.0, grace_s=60.0, locality_wait_s=100.0)


def _granted(events: Sequence[BrokerEvent]) -> dict[str, tuple[str, ...]]:
    return {e.lease.id: e.lease.gpus for e in events if isinstance(e, Granted)}


def test_a_freed_node_goes_to_the_higher_priority_of_two_waiting_gangs() -> None:
    """Kills: the queue ordered by ascending priority (``_ordered_waiting``): the less important
    gang, which came first, takes the GPUs that free up."""
    clock = FakeClock()
    broker = _broker(clock)
    assert len(_granted(broker.submit(GangRequest("x", "a", 8)))["x"]) == 8
    assert len(_granted(broker.submit(GangRequest("y", "a", 8)))["y"]) == 8
    clock.now = 1.0
    assert _granted(broker.submit(GangRequest("low", "b", 8, priority=0))) == {}
    clock.now = 2.0
    assert _granted(broker.submit(GangRequest("high", "c", 8, priority=5))) == {}
    clock.now = 3.0
    events = broker.release("x")
    assert set(_granted(events)) == {"high"}
    assert [q.request.id for q in broker.queue()] == ["low"]


def test_a_preemption_notifies_only_the_victims_the_gang_needs() -> None:
    """Kills: the victim set not minimized (``_try_preempt``): a small low-priority lease taken
    first on the way to a large one that alone makes room is preempted too, for nothing."""
    clock = FakeClock()
    broker = _broker(clock)
    assert len(_granted(broker.submit(GangRequest("keep", "a", 6, priority=9)))["keep"]) == 6
    clock.now = 1.0
    assert len(_granted(broker.submit(GangRequest("big", "a", 8, priority=1)))["big"]) == 8
    clock.now = 2.0
    assert len(_granted(broker.submit(GangRequest("small", "a", 2, priority=0)))["small"]) == 2
    assert broker.free_gpus() == 0
    clock.now = 3.0
    events = broker.submit(GangRequest("urgent", "a", 8, priority=5))
    notices = [e for e in events if isinstance(e, CheckpointNotice)]
    assert [n.lease.id for n in notices] == ["big"]
    assert {lease.id for lease in broker.leases()} >= {"keep", "small"}


def test_a_gang_goes_to_the_fullest_node_that_holds_it_keeping_a_whole_node_free() -> None:
    """Kills: best fit inverted in ``_inside_one`` (the node with the most free GPUs chosen, so a
    later 8-GPU gang that needs a whole node finds none)."""
    clock = FakeClock()
    broker = _broker(clock)
    topology = broker.topology
    first = _granted(broker.submit(GangRequest("half", "a", 4, hint=WorkloadHint(kind="inference"))))["half"]
    second = _granted(broker.submit(GangRequest("other", "b", 4, hint=WorkloadHint(kind="inference"))))[
        "other"
    ]
    node = topology.group_of["node"]
    assert {node[topology.number(g)] for g in first} == {node[topology.number(g)] for g in second}
    whole = _granted(broker.submit(GangRequest("whole", "c", 8, hint=WorkloadHint(kind="inference"))))[
        "whole"
    ]
    assert len({node[topology.number(g)] for g in whole}) == 1


def test_a_gang_that_needs_large_memory_gpus_is_never_placed_on_small_ones() -> None:
    """Kills: ``eligibility`` ignoring ``min_memory_gb`` (a gang that asked for 80 GB GPUs gets
    the 40 GB node, and a second such gang is granted too where only one 80 GB node exists)."""
    topology = synthetic_topology(2, 8, types=(("A40", 40.0), ("H100", 80.0)))
    broker = Broker(topology, [BrokerQuota("a", 16)], clock=FakeClock(), ttl_s=1000.0, grace_s=60.0)
    first = _granted(broker.submit(GangRequest("g1", "a", 8, min_memory_gb=80.0)))["g1"]
    assert all(topology.gpus[topology.number(g)].memory_gb >= 80.0 for g in first)
    assert _granted(broker.submit(GangRequest("g2", "a", 8, min_memory_gb=80.0))) == {}


def test_a_baseline_policy_also_keeps_a_backends_max_concurrency() -> None:
    """Kills: the base policy's ``in_flight < max_concurrency`` loosened to ``<=`` (the agentgate
    router's own engine caps mask it; a baseline routed one request past the cap)."""
    router = RoundRobinRouter(pool(2, max_concurrency=1))
    assert {router.route(req(i, priority=0), 0.0).backend for i in range(2)} == {"b0", "b1"}
    assert router.route(req(2, priority=0), 0.0).action == "wait"
