"""What docs/dispatch.md, docs/simulation.md and docs/broker.md claim, checked by running it.

Real HTTP on 127.0.0.1 against ``SimServer``s, a slice of the real Mooncake trace, the latency
formula of docs/simulation.md measured on the running simulator, the dispatcher's health states
with their documented timings, the token-bucket rule and the broker's documented placements.
Tests marked "defect" failed on the code before their fix.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import _http
import pytest

from agentgate.dispatch import inventory_from_mapping
from agentgate.dispatch._policy import RoutingPolicy
from agentgate.dispatch.backends import Timeouts
from agentgate.dispatch.baselines import LoadBalancedRouter, RoundRobinRouter
from agentgate.dispatch.broker import (
    Broker,
    CheckpointNotice,
    GangRequest,
    Granted,
    LeaseEnded,
    TenantQuota,
    TopologyConstraint,
    WorkloadHint,
    synthetic_topology,
)
from agentgate.dispatch.dispatcher import Dispatcher
from agentgate.dispatch.inventory import Inventory
from agentgate.dispatch.quota import TenantQuota as TokenQuota
from agentgate.dispatch.router import Router, RouteRequest
from agentgate.errors import NoBackend, Shed
from agentgate.sim import LLAMA_8B_H100, LLAMA_8B_H200, LatencyModel, SimServer

SHARED = Path(__file__).resolve().parents[1].parent / "shared"
MOONCAKE = SHARED / "data" / "traces" / "mooncake_conversation_trace.jsonl"
MODEL = "llama-3.1-8b"


def _inventory(servers: list[SimServer]) -> Inventory:
    return inventory_from_mapping(
        {
            "backends": [
                {
                    "name": f"b{i}",
                    "url": s.url,
                    "engine": "vllm",
                    "models": [MODEL],
                    "metrics_url": s.url + "/metrics",
                    "kv_capacity_tokens": LLAMA_8B_H100.kv_capacity_tokens,
                }
                for i, s in enumerate(servers)
            ]
        }
    )


@pytest.fixture
def four() -> Iterator[list[SimServer]]:
    started: list[SimServer] = []
    try:
        for _ in range(4):
            started.append(SimServer(time_scale=0.02, scrape_lag_s=0.5).start())
        yield started
    finally:
        for server in started:
            server.stop()


# --- prefix locality over real HTTP on the Mooncake trace --------------------------------------


def _mooncake_conversations(sessions: int, min_turns: int) -> list[list[dict[str, Any]]]:
    """The turns of the first ``sessions`` conversations with ``min_turns`` or more among the
    trace's first 3,000 requests (a conversation: the requests sharing ``hash_ids[1]``, the
    trace loader's session), in trace order; the prompts under the simulator's context limit."""
    by_session: defaultdict[int, list[dict[str, Any]]] = defaultdict(list)
    with MOONCAKE.open(encoding="utf-8") as fh:
        for n, line in enumerate(fh):
            if n >= 3000:
                break
            row = json.loads(line)
            if len(row["hash_ids"]) > 1 and row["input_length"] + 16 <= 100_000:
                by_session[row["hash_ids"][1]].append(row)
    return [turns for turns in by_session.values() if len(turns) >= min_turns][:sessions]


def _prompt(row: dict[str, Any]) -> str:
    """Prompt text with the trace's prefix structure: each 512-token block id becomes 2,048
    characters (4 per token) of its own, so equal ``hash_ids`` prefixes are equal text prefixes."""
    text = "".join(f"[block {block:07d}]".ljust(2048, "~") for block in row["hash_ids"])
    return text[: row["input_length"] * 4]


def _reusable_share(conversations: list[list[dict[str, Any]]]) -> float:
    """Share of the prompt tokens an engine could serve from its cache if every turn went where
    the longest earlier prefix of it was (whole 512-token blocks, in trace order)."""
    rows = sorted((r for turns in conversations for r in turns), key=lambda r: r["timestamp"])
    seen: set[tuple[int, ...]] = set()
    hit = total = 0
    for row in rows:
        full = row["hash_ids"][: row["input_length"] // 512]
        blocks = 0
        while blocks < len(full) and tuple(full[: blocks + 1]) in seen:
            blocks += 1
        seen.update(tuple(full[: k + 1]) for k in range(len(full)))
        hit += blocks * 512
        total += row["input_length"]
    return hit / total


async def _replay_hit_rate(
    servers: list[SimServer],
    make: Callable[[Inventory], RoutingPolicy],
    conversations: list[list[dict[str, Any]]],
) -> float:
    """Replay the conversations (each turn after the previous one answered, the conversations
    side by side) through a dispatcher; the prefix hit rate the engines measured."""
    inv = _inventory(servers)
    async with Dispatcher(inv, make(inv), timeouts=Timeouts(first_token_s=60.0)) as dispatcher:

        async def conversation(turns: list[dict[str, Any]]) -> None:
            for row in turns:
                payload = {
                    "model": MODEL,
                    "messages": [{"role": "user", "content": _prompt(row)}],
                    "max_tokens": 16,
                }
                # the conversation as the session (the agent run), as the benchmark's replay does
                await dispatcher.chat(payload, priority=0, slo_ttft_s=60.0, session=f"s{row['hash_ids'][1]}")

        await asyncio.gather(*(conversation(turns) for turns in conversations))
    queries = sum(s.engine.prefix_queries for s in servers)
    hits = sum(s.engine.prefix_hits for s in servers)
    return hits / queries


@pytest.mark.slow
@pytest.mark.parametrize(
    "baseline", [LoadBalancedRouter, RoundRobinRouter], ids=["load-balanced", "round-robin"]
)
async def test_prefix_locality_raises_the_engines_hit_rate_over_http_on_mooncake_conversations(
    four: list[SimServer], baseline: Callable[[Inventory], RoutingPolicy]
) -> None:
    """docs/dispatch.md: the router keeps a prefix block index per backend and predicts the
    uncached prefill, so the turns of a conversation go where their prefix is cached; its hit
    rate (0.207) is above the load-based baselines' (load-balanced 0.074). Measured here by the
    engines themselves (``vllm:prefix_cache_hits / queries``) over real HTTP, on the turns of 12
    conversations of the Mooncake trace, against the baseline on fresh engines."""
    conversations = _mooncake_conversations(12, 3)
    assert sum(map(len, conversations)) >= 40
    reusable = _reusable_share(conversations)
    assert reusable > 0.4  # the slice does hold reuse to find
    ours = await _replay_hit_rate(four, lambda inv: Router(inv), conversations)
    for server in four:
        server.kill()
        server.revive()
    theirs = await _replay_hit_rate(four, baseline, conversations)
    assert ours >= 0.9 * reusable, (ours, reusable)
    assert ours >= theirs + 0.1, (ours, theirs)


# --- the latency model of the running simulator ------------------------------------------------


def _stream_times(
    server: SimServer, prompt_tokens: int, max_tokens: int, tag: str
) -> tuple[list[float], int]:
    """Arrival times (seconds after sending) of each content event of one streamed call, and the
    prompt tokens the engine found cached."""
    content = tag + "x" * (prompt_tokens * 4 - len("<user>\n\n") - len(tag))
    body = {
        "model": MODEL,
        "messages": [{"role": "user", "content": content}],
        "max_tokens": max_tokens,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    times: list[float] = []
    cached = -1
    with _http.Client(timeout=60.0) as client:
        started = time.perf_counter()
        with client.stream("POST", server.url + "/v1/chat/completions", json=body) as answer:
            for line in answer.iter_lines():
                if not line.startswith("data: {"):
                    continue
                event = json.loads(line[6:])
                if event.get("choices") and event["choices"][0]["delta"].get("content"):
                    times.append(time.perf_counter() - started)
                if event.get("usage"):
                    usage = event["usage"]
                    assert usage["prompt_tokens"] == prompt_tokens
                    cached = usage["prompt_tokens_details"]["cached_tokens"]
    assert len(times) == max_tokens
    return times, cached


def _chunked_prefill(model: LatencyModel, prompt: int, cached: int, budget: int = 8192) -> float:
    """docs/simulation.md's formula for a prompt alone on an idle engine, in chunks of the step budget."""
    seconds, done = 0.0, cached
    while done < prompt:
        chunk = min(budget, prompt - done)
        seconds += model.step_time(0, 0, chunk, chunk * done + chunk * (chunk + 1) // 2)
        done += chunk
    return seconds


@pytest.mark.slow
def test_the_simulators_inter_token_latency_is_the_documented_step_formula() -> None:
    """defect: the HTTP simulator started each step at the wall clock's reading once the last one
    had been delivered, so every step also lasted the runner's own work (waking up, handing the
    tokens over, scheduling; more on a loaded machine): a lone decode's inter-token latency was
    1.4x to 2x the formula's (5.5 ms and 7.7 ms simulated for 3.8 ms at time scales 1 and 0.2).
    While the engine is busy a step now starts where the previous one ended, so the tokens keep
    to the model's schedule. Decoding after a 16,000-token prompt on the H200 profile:
    step = base + decode_seq + kv_read x context."""
    scale, prompt, out = 0.25, 16_000, 160
    expected = sum(LLAMA_8B_H200.step_time(1, prompt + k, 0, 0) for k in range(1, out)) / (out - 1)
    measured = []
    for attempt in range(3):  # a stall of the loaded test machine can skew one stream either way
        with SimServer(LLAMA_8B_H200, time_scale=scale) as server:
            times, _ = _stream_times(server, prompt, out, f"itl-{attempt}")
        measured.append((times[-1] - times[0]) / (out - 1) / scale)
        if 0.9 * expected <= measured[-1] <= 1.15 * expected:
            return
    raise AssertionError(f"inter-token latency {measured} s, the formula's {expected} s")


@pytest.mark.slow
def test_the_simulators_time_to_first_token_is_the_documented_chunked_prefill() -> None:
    """TTFT over HTTP in (slowed) real time: a 16,000-token prompt is two chunks of the 8,192-token step
    budget (docs/simulation.md, chunked prefill), 0.62 s on the H200 profile; the same prompt
    again is served from the prefix cache (all but the last partial block and the last token)
    and costs one short step. The difference of the two measured TTFTs (the HTTP cost cancels)
    is the difference of the formula's within 15%."""
    prompt = 16_000
    # At 2.5 x real time the difference is 1.5 s of wall time: a loaded machine's scheduling
    # delays (a tenth of a second or two) stay well inside the 15%, while a prefill without its
    # attention term (34% short) or served from no cache (the whole cold TTFT) stays far outside.
    # A stall of the whole process (0.44 s once, in a CI run beside a PostgreSQL start-up) only
    # ever adds time to one of the two measurements: the scene is measured again, up to 3 times,
    # and one measurement within the bounds is the formula's.
    scale = 2.5
    expected = 0.0
    measured: list[float] = []
    for _ in range(3):
        with SimServer(LLAMA_8B_H200, time_scale=scale) as server:
            cold, cold_cached = _stream_times(server, prompt, 2, "")
            warm, warm_cached = _stream_times(server, prompt, 2, "")
        assert cold_cached == 0 and warm_cached == (prompt - 1) // 16 * 16
        expected = _chunked_prefill(LLAMA_8B_H200, prompt, 0) - _chunked_prefill(
            LLAMA_8B_H200, prompt, warm_cached
        )
        measured.append((cold[0] - warm[0]) / scale)
        if 0.9 * expected <= measured[-1] <= 1.15 * expected:
            return
    pytest.fail(f"TTFT differences {measured} s, the formula's {expected} s (within 15%)")


# --- health states and failover, with their documented timings --------------------------------


async def test_a_backend_failing_its_probe_is_down_at_once_and_back_only_after_its_cooldown(
    four: list[SimServer],
) -> None:
    """docs/dispatch.md: a backend that fails a probe is marked down at once and skipped (its
    cached prefixes forgotten); it is used again once it passes a probe after ``cooldown_s``."""
    inv = _inventory(four[:2])
    router = Router(inv)
    cooldown, interval = 0.6, 0.05
    async with Dispatcher(inv, router, health_interval_s=interval, cooldown_s=cooldown) as dispatcher:
        payload = {"model": MODEL, "messages": [{"role": "user", "content": "hello " * 200}], "max_tokens": 4}
        await dispatcher.chat(payload, slo_ttft_s=30.0)
        assert sum(len(s.index) for s in router.states.values()) > 0
        # "At once" observed as an order, not a time: down before its next probe starts, for
        # each failed probe, whether b0 was already down when the probe began.
        client = dispatcher.clients["b0"]
        probe = client.health
        down_when_failed: list[bool] = []
        watching = asyncio.Event()

        async def watched() -> bool:
            down_before = dispatcher.is_down("b0")
            watching.set()
            ok = await probe()
            if ok is not True:
                down_when_failed.append(down_before)
            return ok

        client.health = watched  # type: ignore[method-assign]
        await asyncio.wait_for(watching.wait(), 10)  # no probe of b0 runs unwatched from here on
        four[0].fault = "error"  # /health answers 500
        failed = time.monotonic()
        while not dispatcher.is_down("b0"):
            await asyncio.sleep(0.005)
            assert time.monotonic() - failed < 10, "a failed probe never marked b0 down"
        down_at = time.monotonic()
        assert down_when_failed[0] is False and all(down_when_failed[1:]), down_when_failed
        assert len(router.states["b0"].index) == 0
        four[0].fault = "none"  # healthy again at once: still down for the cooldown
        for _ in range(3):
            result = await dispatcher.chat(payload, slo_ttft_s=30.0)
            assert result.backend == "b1"
        while dispatcher.is_down("b0"):  # back after its cooldown, not never (bound: 10 x cooldown)
            await asyncio.sleep(0.005)
            assert time.monotonic() - down_at < 10 * cooldown
        assert time.monotonic() - down_at >= cooldown - 0.05


# --- token quotas -------------------------------------------------------------------------------


def test_a_tenant_with_a_full_bucket_is_not_shed_as_over_its_quota_for_a_call_larger_than_the_burst() -> None:
    """defect: under overload "a tenant whose token bucket is spent is shed first"
    (docs/dispatch.md); a call costing more than the bucket's burst could never be paid in full,
    so a tenant with a full bucket was shed as over its quota, its class 0 call included (which
    is otherwise served best-effort), with a Retry-After of 1 s after which the same happened
    again, for ever. A full bucket is not spent: the call is served, and the bucket goes into debt."""
    inv = inventory_from_mapping(
        {"backends": [{"name": "b0", "url": "http://127.0.0.1:9", "engine": "vllm", "models": ["m"]}]}
    )
    router = Router(inv, quotas={"acme": TokenQuota(rate_tokens_per_s=100.0, burst_tokens=1000.0)})
    big = RouteRequest(
        "r1", "m", prompt_tokens=5000, max_output_tokens=500, tenant="acme", priority=0, slo_ttft_s=0.001
    )
    plan = router.route(big, now=0.0)
    assert plan.action == "dispatch" and not plan.meets_slo
    # Now the bucket is spent (in debt): the next call that misses its SLO is shed for it.
    router.finished("r1", 0.0)
    with pytest.raises(Shed, match="over its token quota"):
        router.route(
            RouteRequest(
                "r2",
                "m",
                prompt_tokens=50,
                max_output_tokens=10,
                tenant="acme",
                priority=0,
                slo_ttft_s=0.0001,
            ),
            now=0.1,
        )


# --- the broker's documented placements ---------------------------------------------------------


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_the_documented_placement_example_on_two_nodes_holds() -> None:
    """docs/broker.md, "Topology and workload hints": the example on two nodes of 8 GPUs."""
    clock = _Clock()
    broker = Broker(
        synthetic_topology(2, 8, nodes_per_rack=2), [TenantQuota("t", nominal=16)], clock=clock, ttl_s=1e6
    )

    def granted(events: list[Any]) -> tuple[str, ...]:
        (event,) = events
        assert isinstance(event, Granted)
        return event.lease.gpus

    domain = TopologyConstraint("nvlink_domain")
    assert granted(broker.submit(GangRequest("x", "t", 5, topology=domain))) == tuple(
        f"n000/g{i}" for i in range(5)
    )
    assert granted(broker.submit(GangRequest("y", "t", 5, topology=domain))) == tuple(
        f"n001/g{i}" for i in range(5)
    )
    assert granted(broker.submit(GangRequest("two", "t", 2))) == ("n000/g5", "n000/g6")
    comm = GangRequest("comm", "t", 4, hint=WorkloadHint(bound="communication"))
    assert broker.submit(comm) == []
    clock.now = 1799.0
    assert broker.advance() == []
    clock.now = 1800.0  # the default locality wait (30 min) is over: it spreads over both nodes
    (event,) = broker.advance()
    assert isinstance(event, Granted) and event.lease.level == "rack"
    assert sorted(event.lease.gpus) == ["n000/g7", "n001/g5", "n001/g6", "n001/g7"]


def test_the_documented_reclaim_example_holds() -> None:
    """docs/broker.md, "Reclaim and priority preemption": the worked example, step by step."""
    clock = _Clock()
    quotas = [TenantQuota("research", nominal=8, cohort="lab"), TenantQuota("prod", nominal=8, cohort="lab")]
    broker = Broker(synthetic_topology(2, 8, nodes_per_rack=2), quotas, clock=clock, ttl_s=600, grace_s=120)
    (granted,) = broker.submit(GangRequest("r1", "research", 12))
    assert isinstance(granted, Granted) and broker.free_gpus() == 4
    clock.now = 10.0
    (notice,) = broker.submit(GangRequest("p2", "prod", 8))
    assert isinstance(notice, CheckpointNotice)
    assert (notice.lease.id, notice.deadline, notice.preemptor, notice.reason) == (
        "r1",
        130.0,
        "p2",
        "reclaim",
    )
    (waiting,) = broker.queue()
    assert waiting.nominated == tuple(f"n000/g{i}" for i in range(8)) and broker.free_gpus() == 4
    clock.now = 70.0
    ended, granted = broker.release("r1")
    assert isinstance(ended, LeaseEnded) and ended.reason == "released"
    assert isinstance(granted, Granted) and granted.lease.id == "p2"


@pytest.mark.parametrize("locality_wait_s", [1800.0, float("inf")])
@pytest.mark.parametrize(
    "request_",
    [
        GangRequest("comm", "t", 6, hint=WorkloadHint(bound="communication")),
        GangRequest("pref", "t", 6, topology=TopologyConstraint("nvlink_domain", required=False)),
    ],
    ids=["communication-bound", "preferred-domain"],
)
def test_a_gang_larger_than_every_nvlink_domain_does_not_wait_for_one(
    request_: GangRequest, locality_wait_s: float
) -> None:
    """defect: a communication-bound gang (or one preferring an NVLink domain) waits up to the
    locality wait for one domain to hold it (docs/broker.md); one with more GPUs than any domain
    has waited for what can never come, with the GPUs free: 30 minutes by default, and with
    ``locality_wait_s=inf`` (the benchmark's setting, "never spread") for ever, until it timed out
    holding nothing, although ``submit`` accepted it as placeable. It is now placed at once as
    after the locality wait: here in one node (8 GPUs, two domains of 4)."""
    broker = Broker(
        synthetic_topology(2, 8, domains_per_node=2, nodes_per_rack=2),
        [TenantQuota("t", nominal=16)],
        clock=_Clock(),
        locality_wait_s=locality_wait_s,
    )
    (event,) = broker.submit(request_)
    assert isinstance(event, Granted) and len(event.lease.gpus) == 6 and event.lease.level == "node"


def test_a_communication_bound_gang_that_fits_a_domain_still_waits_for_one() -> None:
    """The fix above changes nothing for a gang one domain could hold: it waits for it."""
    clock = _Clock()
    broker = Broker(
        synthetic_topology(2, 8, domains_per_node=2, nodes_per_rack=2),
        [TenantQuota("t", nominal=16)],
        clock=clock,
        ttl_s=1e6,
    )
    for k in range(4):  # three GPUs busy in each domain: one free in each, two in each node
        broker.submit(GangRequest(f"f{k}", "t", 3, topology=TopologyConstraint("nvlink_domain")))
    assert broker.submit(GangRequest("comm", "t", 2, hint=WorkloadHint(bound="communication"))) == []
    clock.now = 1800.0
    (event,) = broker.advance()
    assert isinstance(event, Granted) and event.lease.level == "node"


async def test_a_hung_backend_does_not_slow_the_health_states_of_the_others(four: list[SimServer]) -> None:
    """defect: docs/dispatch.md says a backend that fails a probe is marked down at once (probes
    every ``health_interval_s``). The health loop probed every backend together and acted on the
    results once the slowest probe had ended, so one hung backend (its probe timing out after
    ``probe_s``) delayed every other backend's health state by ``probe_s`` a round: a failed one
    kept receiving calls (each failing over) for seconds, a revived one stayed unused. Each
    backend's probe now runs on its own."""
    inv = _inventory(four[:3])
    timeouts = Timeouts(probe_s=3.0)
    async with Dispatcher(
        inv, Router(inv), timeouts=timeouts, health_interval_s=0.05, cooldown_s=0.1
    ) as dispatcher:
        # Observed as an order, not a time: b0 goes down and comes back (a probe and a cooldown,
        # tenths of a second) while one hung probe of b2 (probe_s, 3 s) is still running.
        b2 = dispatcher.clients["b2"]
        hung_probe = b2.health
        b2_began = asyncio.Event()
        b2_ended = 0

        async def watched() -> bool:
            nonlocal b2_ended
            b2_began.set()
            try:
                return await hung_probe()
            finally:
                b2_ended += 1

        b2.health = watched  # type: ignore[method-assign]
        await asyncio.wait_for(b2_began.wait(), 10)  # no probe of b2 runs unwatched from here on
        four[2].fault = "hang"  # its probes take probe_s each, then fail
        b2_began.clear()
        await asyncio.wait_for(b2_began.wait(), 30)  # a probe of b2 that hangs has begun
        ended = b2_ended
        four[0].fault = "error"
        give_up = time.monotonic() + 30
        while not dispatcher.is_down("b0"):
            await asyncio.sleep(0.01)
            assert time.monotonic() < give_up, "b0's failed probe was never acted on"
        assert b2_ended == ended, "b0's failed probe was acted on only after b2's timed out"
        four[0].fault = "none"
        while dispatcher.is_down("b0"):
            await asyncio.sleep(0.01)
            assert time.monotonic() < give_up, "b0's passed probe was never acted on"
        assert b2_ended == ended, "b0's passed probe was acted on only after b2's timed out"
        while not dispatcher.is_down("b2"):  # its hung probe fails at probe_s
            await asyncio.sleep(0.01)
            assert time.monotonic() < give_up
        assert not dispatcher.is_down("b1")


@pytest.mark.parametrize("case", ["unserved model", "not allowed"])
async def test_a_call_no_backend_could_ever_serve_fails_at_once_while_another_backend_is_down(
    four: list[SimServer], case: str
) -> None:
    """defect: "if every usable backend is down it waits up to ``recovery_wait_s`` (2 s) for one
    to come back" (docs/dispatch.md). The dispatcher waited whenever any backend at all was
    down, so a call for a model no backend serves, or one whose caller may use none of the
    backends serving it, took ``recovery_wait_s`` to get its ``NoBackend`` while an unrelated
    backend was down; no backend coming back could serve it. It now waits only while a backend
    it could use is down."""
    inv = _inventory(four[:2])
    async with Dispatcher(inv, Router(inv), health_interval_s=0.05, recovery_wait_s=60.0) as dispatcher:
        four[1].fault = "error"  # b1 fails its probes and stays down; b0 serves
        while not dispatcher.is_down("b1"):
            await asyncio.sleep(0.01)
        payload = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
        route: dict[str, Any] = {}
        if case == "unserved model":
            payload["model"] = "no-such-model"
        else:
            route["allowed"] = lambda backend: backend.name == "nowhere"
        started = time.monotonic()
        with pytest.raises(NoBackend):
            await dispatcher.chat(payload, **route)
        # Not the recovery wait (60 s): the bound leaves a loaded machine 30 s (2 s was tight).
        assert time.monotonic() - started < 30.0
        # A call for the model is served as before, by the backend that is up.
        result = await dispatcher.chat({**payload, "model": MODEL})
        assert result.backend == "b0"


async def test_the_router_counts_the_output_limit_the_backend_honours() -> None:
    """defect: the dispatcher read a call's output limit as ``max_tokens``, else
    ``max_completion_tokens``; OpenAI and vLLM (and the simulator, docs/simulation.md) honour
    ``max_completion_tokens`` first. A call with ``max_tokens: 1, max_completion_tokens: 5000``
    was routed and debited to its tenant's token bucket as one output token (a quota that bounds
    nothing) while the backend generated up to 5,000. The limit is now read as the backend reads it."""
    inv = inventory_from_mapping(
        {"backends": [{"name": "b0", "url": "http://127.0.0.1:9", "engine": "vllm", "models": ["m"]}]}
    )
    async with Dispatcher(inv, Router(inv)) as dispatcher:
        messages = [{"role": "user", "content": "hi"}]
        both = {"model": "m", "messages": messages, "max_tokens": 1, "max_completion_tokens": 5000}
        assert dispatcher.route_request(both).max_output_tokens == 5000
        assert (
            dispatcher.route_request({"model": "m", "messages": messages, "max_tokens": 7}).max_output_tokens
            == 7
        )
