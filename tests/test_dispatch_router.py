"""The agentgate router's rule (agentgate/dispatch/router.py): filters, predicted TTFT, cache
locality, ties (the cost tie-break pricing prompt and output limit each at its own rate), affinity,
classes, quotas."""

from __future__ import annotations

import dataclasses
from collections import Counter

import pytest

from agentgate.dispatch import inventory_from_mapping
from agentgate.dispatch._retry_after import MAX_RETRY_AFTER_S
from agentgate.dispatch.inventory import Inventory
from agentgate.dispatch.metrics import EngineLoad
from agentgate.dispatch.quota import TenantQuota
from agentgate.dispatch.router import Router, RouteRequest
from agentgate.dispatch.scorers import predicted_ttft
from agentgate.errors import InputError, NoBackend, Shed
from agentgate.sim import chain_hashes


def pool(n: int = 4, model: str = "m", **extra: object) -> Inventory:
    return inventory_from_mapping(
        {
            "backends": [
                {"name": f"b{i}", "url": f"http://127.0.0.1:{9000 + i}", "models": [model], **extra}
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


def at(request: RouteRequest, now: float) -> RouteRequest:
    """The request as if it arrived at ``now``."""
    return dataclasses.replace(request, arrived_at=now)


def test_only_backends_that_serve_are_healthy_and_allowed_are_candidates() -> None:
    router = Router(pool(3))
    with pytest.raises(NoBackend, match="serves model"):
        router.route(req(0, model="other"), 0.0)
    with pytest.raises(NoBackend, match="may use none"):
        router.route(req(0), 0.0, allowed=lambda b: False)
    router.mark_down("b0")
    router.mark_down("b1")
    assert router.route(req(0), 0.0).backend == "b2"
    assert router.route(req(1), 0.0, allowed=lambda b: b.name != "b1").backend == "b2"
    router.mark_down("b2")
    with pytest.raises(NoBackend, match="down"):
        router.route(req(2), 0.0)


def test_in_flight_is_counted_at_dispatch_and_spreads_a_burst() -> None:
    router = Router(pool(4))
    plans = [router.route(req(i), 0.0) for i in range(40)]
    counts = Counter(p.backend for p in plans)
    assert sum(router.in_flight(b) for b in counts) == 40
    assert max(counts.values()) - min(counts.values()) <= 2
    for p in plans:
        router.first_token(p.request_id, 1.0)
        router.finished(p.request_id, 2.0)
    assert all(router.in_flight(f"b{i}") == 0 for i in range(4))


def test_a_cached_prefix_wins_over_an_idle_backend() -> None:
    router = Router(pool(4))
    first = router.route(req(1, prompt=8000), 0.0)
    router.first_token("r1", 0.5)
    router.finished("r1", 1.0)
    again = router.route(at(req(1, prompt=8200, id="r1-turn2"), 2.0), 2.0)
    assert again.backend == first.backend
    assert again.cached_tokens >= 7900


def test_saturated_cache_holder_loses_to_a_fast_empty_backend() -> None:
    router = Router(pool(2))
    holder = router.route(req(1, prompt=4000), 0.0).backend
    router.finished("r1", 0.1)
    for i in range(20):  # pile queued prefill onto the holder
        router.route(req(100 + i, prompt=8000), 0.2, allowed=lambda b: b.name == holder)
    plan = router.route(at(req(1, prompt=4100, id="turn2", session="s"), 0.3), 0.3)
    assert plan.backend != holder


def test_engine_metrics_raise_the_routers_estimate() -> None:
    router = Router(pool(2))
    router.observe("b0", EngineLoad(running=200, waiting=30, kv_usage=0.95, scraped_at=0.0))
    router.observe("b1", EngineLoad(running=0, waiting=0, kv_usage=0.0, scraped_at=0.0))
    assert all(router.route(at(req(i), 0.1), 0.1).backend == "b1" for i in range(3))


def test_stale_metrics_are_ignored() -> None:
    router = Router(pool(2), metrics_max_age_s=1.0)
    router.observe("b0", EngineLoad(running=200, waiting=30, kv_usage=0.95, scraped_at=0.0))
    assert router.states["b0"].fresh_load(5.0) is None
    assert {router.route(at(req(i), 5.0), 5.0).backend for i in range(8)} == {"b0", "b1"}


def test_session_affinity_holds_unless_saturated() -> None:
    router = Router(pool(4))
    first = router.route(req(1, session="run-7", prefix_hashes=()), 0.0).backend
    router.finished("r1", 0.1)
    for turn in range(3):
        plan = router.route(at(req(10 + turn, session="run-7", prefix_hashes=()), 1.0 + turn), 1.0 + turn)
        assert plan.backend == first and plan.reason == "session affinity"
        router.finished(plan.request_id, 1.5 + turn)
    for i in range(10):  # saturate the run's backend
        router.route(
            at(req(100 + i, prompt=16000, slo_ttft_s=100.0), 5.0), 5.0, allowed=lambda b: b.name == first
        )
    assert router.route(at(req(20, session="run-7", prefix_hashes=()), 5.0), 5.0).backend != first


def test_when_no_backend_meets_the_slo_lower_classes_wait_or_are_shed() -> None:
    router = Router(pool(1))
    for i in range(5):
        router.route(req(i, prompt=16000, slo_ttft_s=1000.0), 0.0)
    urgent = router.route(req(100, slo_ttft_s=0.5, priority=0), 0.0)
    assert urgent.action == "dispatch" and not urgent.meets_slo
    standard = router.route(req(101, slo_ttft_s=3.0, priority=1), 0.0)
    assert standard.action == "wait" and standard.wait_s > 0
    with pytest.raises(Shed) as info:
        router.route(req(102, slo_ttft_s=0.5, priority=2), 0.0)
    assert info.value.retry_after_s >= 1.0


def test_tenant_over_its_quota_is_shed_first_under_load() -> None:
    quotas = {"greedy": TenantQuota(rate_tokens_per_s=1000, burst_tokens=5000)}
    router = Router(pool(1), quotas=quotas)
    router.route(req(0, prompt=4000, tenant="greedy", slo_ttft_s=100.0), 0.0)  # spends the bucket
    for i in range(30):
        router.route(req(10 + i, prompt=16000, slo_ttft_s=1000.0), 0.0)
    with pytest.raises(Shed, match="quota") as info:
        router.route(req(1, prompt=4000, tenant="greedy", slo_ttft_s=0.5, priority=0), 0.1)
    assert info.value.retry_after_s >= 1.0
    assert (
        router.route(req(2, prompt=4000, tenant="polite", slo_ttft_s=0.5, priority=0), 0.1).action
        == "dispatch"
    )


def test_observed_ttft_corrects_the_prediction() -> None:
    router = Router(pool(1), predictor=predicted_ttft(calibrated=True))
    for i in range(30):
        plan = router.route(at(req(i), float(i)), float(i))
        router.first_token(plan.request_id, i + plan.predicted_ttft_s * 2)
        router.finished(plan.request_id, i + 0.9)
    assert router.states["b0"].correction > 1.5
    plan = router.route(at(req(99), 40.0), 40.0)
    uncalibrated = predicted_ttft()(router.states["b0"], at(req(100), 40.0), 40.0)
    assert plan.predicted_ttft_s > 1.4 * uncalibrated


def test_route_plan_is_frozen() -> None:
    plan = Router(pool(1)).route(req(0), 0.0)
    with pytest.raises(AttributeError):
        plan.backend = "x"  # type: ignore[misc]


# --- saturation, SLO, classes, KV headroom ----------------------------------------------------


def _pool(n: int = 2, **extra: object) -> Inventory:
    return inventory_from_mapping(
        {
            "backends": [
                {"name": f"b{i}", "url": f"http://127.0.0.1:{9100 + i}", "models": ["m"], **extra}
                for i in range(n)
            ]
        }
    )


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


def test_a_saturated_waiter_past_its_slo_is_shed_not_told_to_wait() -> None:
    """Kills: _policy._saturated's ``not budget > 0`` loosened (a class-1 request that has waited
    out its SLO for a slot is told to wait again, with a negative wait)."""
    router = Router(_pool(1, max_concurrency=1))
    assert router.route(req(0, priority=0), 0.0).action == "dispatch"
    late = req(1, priority=1, slo_ttft_s=1.0, arrived_at=0.0)
    assert router.route(late, 0.5).action == "wait"  # within its budget: waits for the slot
    with pytest.raises(Shed) as shed:
        router.route(late, 1.5)  # 0.5 s past its SLO
    assert shed.value.retry_after_s >= 1.0


def test_slo_missed_everywhere_class_2_is_shed_where_class_1_waits() -> None:
    """Kills: choose's ``request.priority == 1`` widened to ``>= 1`` (class 2 told to wait for
    the SLO budget like class 1, rather than shed at once)."""
    router = Router(_pool(1))
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
    router = Router(_pool(2))
    big = req(1, prompt=16000, priority=2, slo_ttft_s=0.001)
    assert router.states["b0"].speed.prefill_s(16000, 0) > 0.001
    plan = router.route(big, 0.0)
    assert plan.action == "dispatch" and "unreachable" in plan.reason


def test_session_affinity_yields_when_its_backend_is_saturated_beyond_the_slack() -> None:
    """Kills: choose's ``p <= best_p + affinity_slack * slo`` dropped (a session stays on its
    backend however much slower than an idle one it has become, as long as the SLO holds)."""
    router = Router(_pool(2))
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
    router2 = Router(_pool(2))
    home2 = router2.route(req(1, prompt=400, session="s"), 0.0).backend
    router2.first_token("r1", 0.1)
    router2.finished("r1", 0.2)
    again = router2.route(req(2, prompt=400, session="s", arrived_at=1.0), 1.0)
    assert again.backend == home2 and again.reason == "session affinity"


def test_power_of_two_choices_takes_the_less_busy_of_two_near_ties() -> None:
    """Kills: the near-tie pick ``min`` by in-flight count turned ``max`` (equal predictions pile
    onto the busier backend)."""
    for seed in range(5):
        router = Router(_pool(2), seed=seed)
        a = router.route(req(1, prompt=400), 0.0)
        router.first_token("r1", 0.05)  # prefilled: it only decodes there now
        b = router.route(req(2, prompt=400, arrived_at=0.1), 0.1)
        assert "near-ties" in b.reason, b.reason
        assert b.backend != a.backend, (seed, b)


def test_the_bucket_charges_the_output_limit_too_and_a_failover_is_not_charged_again() -> None:
    """Kills: ``_cost`` counting only the prompt (the output limit goes free), and ``_go``
    debiting a failover route again (a tenant pays twice for a backend's failure)."""
    quota = TenantQuota(rate_tokens_per_s=0.001, burst_tokens=5000)
    router = Router(_pool(1, max_concurrency=2), quotas={"t": quota})
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
    # Retry-After: the bucket's refill time (2500 tokens at 0.001/s), not a token second; at
    # most MAX_RETRY_AFTER_S (review R82: an infinite one failed the gateway's answer).
    assert shed.value.retry_after_s == MAX_RETRY_AFTER_S


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
    router = Router(_pool(2, max_concurrency=1))
    router.mark_down("b0")
    assert router.route(req(0, priority=0), 0.0).backend == "b1"
    first = req(1, priority=0, slo_ttft_s=10.0, arrived_at=0.1)
    assert router.route(first, 0.1).action == "wait"
    router.finished("r0", 0.2)
    assert router.due(0.2) == ["r1"]
    later = req(2, priority=1, slo_ttft_s=10.0, arrived_at=0.3)
    assert router.route(later, 0.3).action == "wait"  # the freed slot is r1's
    assert router.route(first, 0.35).backend == "b1"


# --- the cost tie-break: between equally fast backends, a request goes where its prompt and its
# output limit, each priced at its own rate, cost least --------------------------------------


def test_the_cost_tie_break_prices_the_prompt_and_the_output_limit_each_at_its_own_rate() -> None:
    # Kills: _price counting only the prompt (input_per_mtok) or only the output limit
    # (output_per_mtok), keeping the dearest near-ties, or no cost tie-break at all. Two idle,
    # equally fast backends, one cheap on input and one cheap on output: a long prompt with a
    # short answer belongs on the first, a short prompt with a long output limit on the second.
    inventory = inventory_from_mapping(
        {
            "backends": [
                {
                    "name": "cheap-out",
                    "url": "http://127.0.0.1:9001",
                    "models": ["m"],
                    "cost": {"input_per_mtok": 1_000_000, "output_per_mtok": 100_000},
                },
                {
                    "name": "cheap-in",
                    "url": "http://127.0.0.1:9002",
                    "models": ["m"],
                    "cost": {"input_per_mtok": 100_000, "output_per_mtok": 1_000_000},
                },
            ]
        }
    )
    router = Router(inventory, seed=3)
    chosen: list[tuple[str, str]] = []
    for i in range(8):
        for kind, prompt, output in (("long prompt", 4000, 10), ("long output", 16, 4000)):
            request = RouteRequest(
                id=f"{kind}-{i}",
                model="m",
                prompt_tokens=prompt,
                max_output_tokens=output,
                prefix_hashes=chain_hashes((kind, i, b) for b in range(prompt // 16)),
                slo_ttft_s=30.0,
            )
            plan = router.route(request, float(i))
            chosen.append((kind, plan.backend))
            router.first_token(request.id, i + 0.1)
            router.finished(request.id, i + 0.2)
    assert set(chosen) == {("long prompt", "cheap-in"), ("long output", "cheap-out")}, chosen


# --- diagnostic candidates --------------------------------------------------------------------


def test_each_routing_candidate_reports_the_prefix_cached_on_that_backend() -> None:
    """Kills: ``Candidate.cached_tokens`` reported as 0 for every backend (``Router.choose``).
    Rule: ``RoutePlan.candidates`` (public, diagnostic) gives each backend's own predicted cache
    hit: the backend holding the prompt's prefix shows it, equal to the plan's ``cached_tokens``,
    and the others show none."""
    router = Router(_pool(3))  # type: ignore[arg-type]
    hashes = chain_hashes((7, b) for b in range(500))
    first = router.route(
        RouteRequest(id="r1", model="m", prompt_tokens=8000, max_output_tokens=100, prefix_hashes=hashes), 0.0
    )
    router.first_token("r1", 0.5)
    router.finished("r1", 1.0)
    again = router.route(
        RouteRequest(
            id="r2",
            model="m",
            prompt_tokens=8200,
            max_output_tokens=100,
            prefix_hashes=hashes,
            arrived_at=2.0,
        ),
        2.0,
    )
    assert again.backend == first.backend and again.cached_tokens > 0
    by_backend = {c.backend: c.cached_tokens for c in again.candidates}
    assert set(by_backend) == {"b0", "b1", "b2"}
    assert by_backend[first.backend] == again.cached_tokens
    assert all(v == 0 for b, v in by_backend.items() if b != first.backend)


@pytest.mark.parametrize("field", ["tie_tolerance", "affinity_slack"])
@pytest.mark.parametrize("value", [float("nan"), -1.0, float("inf"), True, "0.1"])
def test_a_tolerance_that_is_no_finite_number_at_least_zero_is_refused_when_the_router_is_made(
    field: str, value: object
) -> None:
    """Kills: ``Router`` taking any ``tie_tolerance``: a negative or NaN one left no candidate
    within it, not even the best, and the first routed call failed in ``choose`` with an untyped
    ``ValueError`` (``min()`` of nothing); a NaN ``affinity_slack`` silently ended every
    session's affinity.

    Rule: both are finite numbers >= 0, else ``InputError`` naming the field when the router is
    made; 0 is taken (no near-ties; affinity only while the session's backend is the best)."""
    with pytest.raises(InputError, match=field):
        Router(pool(2), **{field: value})  # type: ignore[arg-type]
    router = Router(pool(2), **{field: 0.0})  # type: ignore[arg-type]
    assert router.route(req(0, session="s"), 0.0).action == "dispatch"


@pytest.mark.parametrize("priority", [1, 2])
def test_a_shed_for_an_unmet_slo_asks_for_at_most_max_retry_after_s(priority: int) -> None:
    """Review R56: a backend that reported 10**7 requests waiting (the most its metrics may) made
    the router predict 15 days to a first token, and a call shed for its SLO then carried
    ``Retry-After: 1284020`` (the gateway's 429): a client that honoured it never came back.

    Rule: the ``retry_after_s`` of a call shed because its SLO cannot be met is the router's
    estimate of the excess, at least 1 s and at most ``MAX_RETRY_AFTER_S`` (300 s, the longest
    a backend's own ``Retry-After`` is honoured for)."""
    router = Router(pool(1))
    router.observe("b0", EngineLoad(running=0.0, waiting=1e7, kv_usage=0.0, scraped_at=0.0))
    with pytest.raises(Shed, match="cannot be met") as shed:
        router.route(req(0, prompt=4000, priority=priority), 0.0)
    assert 1.0 <= shed.value.retry_after_s <= MAX_RETRY_AFTER_S
