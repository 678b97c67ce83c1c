"""The routing policies' shared frame (agentgate/dispatch/_policy.py), for the agentgate router and
the baselines alike: a saturated waiter waits no longer than its SLO budget, a backend back from a
failure has forgotten its prefix cache, the router's settings are checked, the dispatch
accounting (queued prefill, learnt correction, ``max_concurrency``) follows the calls.
"""

from __future__ import annotations

import pytest
from test_dispatch_router import _pool as pool
from test_dispatch_router import req

from agentgate.dispatch import inventory_from_mapping
from agentgate.dispatch.baselines import LeastBusyRouter, RoundRobinRouter
from agentgate.dispatch.inventory import Inventory
from agentgate.dispatch.router import Router, RouteRequest
from agentgate.errors import InputError, Shed


def _pool(n: int = 1, **extra: object) -> Inventory:
    return inventory_from_mapping(
        {
            "backends": [
                {"name": f"b{i}", "url": f"http://127.0.0.1:{9100 + i}", "models": ["m"], **extra}
                for i in range(n)
            ]
        }
    )


def _req(rid: str, blocks: tuple[int, ...] = (), **kw: object) -> RouteRequest:
    fields: dict[str, object] = {
        "id": rid,
        "model": "m",
        "prompt_tokens": 16 * max(1, len(blocks)) + 1,
        "max_output_tokens": 8,
        "prefix_hashes": blocks,
    }
    fields.update(kw)
    return RouteRequest(**fields)  # type: ignore[arg-type]


@pytest.mark.parametrize("policy", [Router, LeastBusyRouter])
def test_a_saturated_waiter_is_never_told_to_wait_past_its_slo_budget(policy: type) -> None:
    """P4 (wait_s = SATURATED_POLL_S, not capped by the budget): with the only slot taken and
    5 ms of its SLO left, a request waits for a slot and asks again within those 5 ms, not 20."""
    router = policy(_pool(1, max_concurrency=1))
    assert router.route(_req("r0"), 0.0).action == "dispatch"
    plan = router.route(_req("r1", slo_ttft_s=0.1, arrived_at=0.0), 0.095)
    assert plan.action == "wait" and plan.until_freed
    assert plan.wait_s == pytest.approx(0.005)


@pytest.mark.parametrize("policy", [Router, LeastBusyRouter])
def test_an_arrival_stamped_ahead_of_the_routers_clock_gets_no_more_than_its_slo(policy: type) -> None:
    """P3 (budget = slo - (now - arrived_at), unclamped): a request whose arrival stamp is ahead of
    the router's clock (another host's clock) has its SLO as budget, not the SLO plus the lead:
    with a 5 ms SLO it waits at most 5 ms, and with an SLO of 0 it is shed, not kept waiting."""

    router = policy(_pool(1, max_concurrency=1))
    assert router.route(_req("r0"), 0.0).action == "dispatch"
    plan = router.route(_req("r1", slo_ttft_s=0.005, arrived_at=100.0), 0.0)
    assert plan.action == "wait" and plan.wait_s == pytest.approx(0.005)
    with pytest.raises(Shed):
        router.route(_req("r2", slo_ttft_s=0.0, arrived_at=100.0), 0.0)


@pytest.mark.parametrize("policy", [Router, LeastBusyRouter])
def test_a_backend_back_from_a_failure_has_forgotten_its_cached_prefixes(policy: type) -> None:
    """P6 (mark_down keeps the prefix index): a backend marked down may have restarted, so once
    it is marked up again no prompt is predicted to be served from its prefix cache."""
    router = policy(_pool(1))
    blocks = (11, 12, 13, 14)
    router.route(_req("r0", blocks), 0.0)
    router.finished("r0", 0.1)
    assert router.states["b0"].cached_tokens(blocks, 16 * 4 + 1) == 64  # sanity: it was recorded
    router.mark_down("b0")
    router.mark_up("b0")
    assert router.states["b0"].cached_tokens(blocks, 16 * 4 + 1) == 0
    assert router.route(_req("r1", blocks), 1.0).cached_tokens == 0


@pytest.mark.parametrize("bad", [True, 16.0, "16", None])
def test_block_tokens_that_is_no_integer_is_refused_as_input(bad: object) -> None:
    """P7 (only `block_tokens < 1` checked): True, 16.0, "16" or None as the router's block size
    is an InputError naming it, not accepted (True would be a block of 1 token) nor a TypeError."""
    for policy in (Router, LeastBusyRouter):
        with pytest.raises(InputError, match="block_tokens"):
            policy(_pool(1), block_tokens=bad)


def test_the_correction_learnt_from_a_first_token_leaves_out_the_wait_before_dispatch() -> None:
    """P10 (the dispatch remembers the arrival-to-first-token prediction, waiting included): a
    first token that comes exactly when predicted after dispatch teaches the router nothing,
    however long the call waited before it was dispatched (else every call that waited would
    look faster than predicted and drag the backend's correction down)."""
    router = Router(_pool(1))
    plan = router.route(_req("r0", (1, 2, 3), arrived_at=0.0), 1.0)
    assert plan.action == "dispatch" and plan.predicted_ttft_s > 1.0
    router.first_token("r0", 1.0 + (plan.predicted_ttft_s - 1.0))
    assert router.states["b0"].correction == pytest.approx(1.0)


def test_a_speed_model_given_per_backend_is_the_one_each_backend_is_predicted_by() -> None:
    """P11 (every backend gets the default SpeedModel when a mapping is given): with b0 given a
    prefill 30 times slower than b1, b0's predicted TTFT for a long prompt is the higher, and
    the call goes to b1."""
    from agentgate.dispatch.state import SpeedModel

    router = Router(_pool(2), speed={"b0": SpeedModel(prefill_token_s=1e-3), "b1": SpeedModel()})
    assert router.states["b0"].speed.prefill_token_s == 1e-3
    assert router.states["b1"].speed == SpeedModel()
    plan = router.route(_req("r0", tuple(range(100))), 0.0)
    predicted = {c.backend: c.predicted_ttft_s for c in plan.candidates}
    assert predicted["b0"] > 10 * predicted["b1"]
    assert plan.backend == "b1"


def test_a_first_token_reported_after_the_call_finished_teaches_nothing() -> None:
    """P15 (finished keeps the call in the policy's book): once a call finished, a stray late
    first_token for it is ignored: it neither counts on the backend nor moves the backend's
    learnt correction (the call is no longer the policy's)."""
    router = Router(_pool(1))
    router.route(_req("r0", (1, 2, 3)), 0.0)
    router.finished("r0", 0.5)
    router.first_token("r0", 100.0)
    assert router.states["b0"].correction == 1.0
    assert router.in_flight("b0") == 0


def test_a_prediction_equal_to_the_slo_meets_it() -> None:
    """P22 (`meets_slo` as predicted < slo): a dispatch plan predicted to reach its first token
    exactly at the SLO meets the SLO; one a hair later does not."""
    router = LeastBusyRouter(_pool(1))
    state = router.states["b0"]
    assert router.plan(state, _req("r0", slo_ttft_s=1.5), "x", predicted=1.5).meets_slo
    assert not router.plan(state, _req("r0", slo_ttft_s=1.5), "x", predicted=1.5000001).meets_slo


def test_a_prompt_served_from_the_prefix_cache_queues_only_its_uncached_prefill() -> None:
    """P23 (the dispatch counted as the whole prompt's prefill): a call whose prefix the backend
    holds adds only the prefill of its uncached tail to the backend's queued work."""
    router = LeastBusyRouter(_pool(1))
    state = router.states["b0"]
    blocks = tuple(range(1, 41))
    router.route(_req("r0", blocks), 0.0)
    cold = state.queued_prefill_s
    router.finished("r0", 0.5)
    router.route(_req("r1", blocks), 1.0)
    assert state.queued_prefill_s == pytest.approx(state.speed.prefill_s(1, 640))
    assert state.queued_prefill_s < cold / 2


def test_an_arrival_stamped_ahead_teaches_the_correction_nothing_when_on_time() -> None:
    """P24 (the wait before dispatch unclamped): a call whose arrival stamp is ahead of the
    router's clock waited nothing; its first token on time after dispatch leaves the backend's
    learnt correction as it was (not dragged down as if the call had been predicted slower)."""
    router = Router(_pool(1))
    plan = router.route(_req("r0", (1, 2, 3), arrived_at=100.0), 0.0)
    assert plan.action == "dispatch"
    router.first_token("r0", plan.predicted_ttft_s)
    assert router.states["b0"].correction == pytest.approx(1.0)


def test_a_baseline_policy_also_keeps_a_backends_max_concurrency() -> None:
    """Kills: the base policy's ``in_flight < max_concurrency`` loosened to ``<=`` (the agentgate
    router's own engine caps mask it; a baseline routed one request past the cap)."""
    router = RoundRobinRouter(pool(2, max_concurrency=1))
    assert {router.route(req(i, priority=0), 0.0).backend for i in range(2)} == {"b0", "b1"}
    assert router.route(req(2, priority=0), 0.0).action == "wait"
