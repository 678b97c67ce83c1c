"""The router's line for slots on saturated backends, and the shared cap of backends with one URL.

Every request waiting for a slot used to ask again every 20 ms with no order between them: the
first to ask after a slot freed took it, a class-1 request as readily as a class-0 one, a late
arrival as readily as one that had waited for seconds. Now a freed slot goes to the first in
line: class 0 before class 1, then in order of arrival. And two inventory backends with one URL
(one engine under two names) each allowed their own ``max_concurrency``: the engine got twice
its cap.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from agentgate.dispatch import Dispatcher, inventory_from_mapping
from agentgate.dispatch.inventory import Inventory
from agentgate.dispatch.router import WAITER_TIMEOUT_S, Router, RouteRequest
from agentgate.errors import Shed
from agentgate.sim import SimServer

MODEL = "m"


def one_slot(url: str = "http://127.0.0.1:9000", model: str = MODEL) -> Inventory:
    return inventory_from_mapping(
        {"backends": [{"name": "b0", "url": url, "models": [model], "max_concurrency": 1}]}
    )


def req(name: str, priority: int, arrived: float, slo: float = 10.0) -> RouteRequest:
    return RouteRequest(
        id=name,
        model=MODEL,
        prompt_tokens=100,
        max_output_tokens=10,
        priority=priority,
        slo_ttft_s=slo,
        arrived_at=arrived,
    )


def test_a_freed_slot_goes_to_class_0_first_then_in_order_of_arrival() -> None:
    router = Router(one_slot())
    assert router.route(req("busy", 1, 0.0), 0.0).action == "dispatch"
    waiting = [req("c1-a", 1, 0.1), req("c1-b", 1, 0.2), req("c0-a", 0, 0.3), req("c0-b", 0, 0.4)]
    for r in waiting:
        assert router.route(r, r.arrived_at).action == "wait"
    served: list[str] = []
    now, current = 0.5, "busy"
    for _ in waiting:
        router.finished(current, now)
        # The waiters ask again in the worst order: the last in line first.
        for r in reversed([w for w in waiting if w.id not in served]):
            plan = router.route(r, now)
            if plan.action == "dispatch":
                served.append(r.id)
                current = r.id
                break
        now += 0.05
    assert served == ["c0-a", "c0-b", "c1-a", "c1-b"]


def test_a_new_arrival_waits_behind_the_line_unless_its_class_is_higher() -> None:
    router = Router(one_slot())
    assert router.route(req("busy", 1, 0.0), 0.0).action == "dispatch"
    assert router.route(req("c1-old", 1, 0.1), 0.1).action == "wait"
    router.finished("busy", 0.2)
    # A class-1 newcomer does not take the slot the class-1 waiter is owed ...
    assert router.route(req("c1-new", 1, 0.21), 0.21).action == "wait"
    # ... a class-0 newcomer does (it is ahead of every class-1 request) ...
    assert router.route(req("c0-new", 0, 0.22), 0.22).backend == "b0"
    router.finished("c0-new", 0.3)
    # ... and a class-2 request is shed while slots are spoken for, as when none is free.
    with pytest.raises(Shed):
        router.route(req("c2", 2, 0.31), 0.31)
    assert router.route(req("c1-new", 1, 0.21), 0.32).action == "wait"
    assert router.route(req("c1-old", 1, 0.1), 0.33).backend == "b0"


def test_a_waiter_that_stops_asking_leaves_the_line() -> None:
    router = Router(one_slot())
    router.route(req("busy", 1, 0.0), 0.0)
    assert router.route(req("gone", 0, 0.1), 0.1).action == "wait"  # its caller gives up
    assert router.route(req("next", 1, 0.2), 0.2).action == "wait"
    router.finished("busy", 0.3)
    assert router.route(req("next", 1, 0.2), 0.35).action == "wait"
    assert router.route(req("next", 1, 0.2), 0.1 + WAITER_TIMEOUT_S + 0.05).backend == "b0"


def test_a_waiter_of_another_model_or_backend_does_not_hold_a_slot_it_cannot_use() -> None:
    inventory = inventory_from_mapping(
        {
            "backends": [
                {"name": "a", "url": "http://127.0.0.1:9000", "models": [MODEL], "max_concurrency": 1},
                {"name": "b", "url": "http://127.0.0.1:9001", "models": [MODEL], "max_concurrency": 1},
            ]
        }
    )
    router = Router(inventory)
    only_a = lambda backend: backend.name == "a"  # noqa: E731
    assert router.route(req("x", 1, 0.0), 0.0, allowed=only_a).backend == "a"
    assert router.route(req("y", 1, 0.0), 0.0, allowed=lambda backend: backend.name == "b").backend == "b"
    assert router.route(req("wants-a", 0, 0.1), 0.1, allowed=only_a).action == "wait"
    router.finished("y", 0.2)
    # The class-0 waiter may use only "a": the slot freed on "b" is free for a class-1 request.
    assert router.route(req("any", 1, 0.3), 0.3).backend == "b"


@pytest.mark.parametrize(("caps", "shared"), [((2, 2), 2), ((3, 1), 1)])
def test_backends_with_one_url_share_the_smallest_cap(caps: tuple[int, int], shared: int) -> None:
    url = "http://127.0.0.1:9000"
    inventory = inventory_from_mapping(
        {
            "backends": [
                {"name": "alias-1", "url": url, "models": [MODEL], "max_concurrency": caps[0]},
                {"name": "alias-2", "url": url + "/", "models": [MODEL], "max_concurrency": caps[1]},
            ]
        }
    )
    router = Router(inventory)
    plans = [router.route(req(f"r{i}", 1, 0.0), 0.0) for i in range(shared + 2)]
    assert [p.action for p in plans] == ["dispatch"] * shared + ["wait"] * 2
    router.finished(plans[0].request_id, 0.1)
    assert router.route(req(f"r{shared}", 1, 0.0), 0.1).action == "dispatch"
    assert router.route(req(f"r{shared + 1}", 1, 0.0), 0.1).action == "wait"


@pytest.mark.parametrize(
    ("one", "other", "shared"),
    [
        ("http://h", "http://h:80", True),
        ("http://H:8000", "http://h:8000/", True),
        ("http://h/A", "http://h/a", False),
    ],
)
def test_one_engine_is_known_by_its_endpoint_not_its_spelling(one: str, other: str, shared: bool) -> None:
    """Review R54: engines were matched by the URL lower-cased, so ``http://h`` and ``http://h:80``
    each allowed their own cap and ``/A`` and ``/a`` (two paths, two engines) shared one.

    Rule: backends whose URLs name one endpoint (``inventory.engine_key``) share one cap; others
    keep their own."""
    inventory = inventory_from_mapping(
        {
            "backends": [
                {"name": "alias-1", "url": one, "models": [MODEL], "max_concurrency": 1},
                {"name": "alias-2", "url": other, "models": [MODEL], "max_concurrency": 1},
            ]
        }
    )
    router = Router(inventory)
    plans = [router.route(req(f"r{i}", 1, 0.0), 0.0) for i in range(2)]
    assert [p.action for p in plans] == ["dispatch", "wait" if shared else "dispatch"]


def test_with_real_concurrency_waiters_are_served_class_0_first_and_in_order() -> None:
    # A real dispatcher in front of a real simulated engine (HTTP on 127.0.0.1) with one slot:
    # a long call holds it while three class-1 calls and then three class-0 calls queue up, each
    # a coroutine of its own waiting in the dispatcher for a slot to free. The order in which they
    # get the slot is the order they finish in (one at a time). The holder runs for about a second
    # (40 tokens, as first written, let it finish before the last class-0 call had queued on a
    # loaded machine: c1-a then came before c0-c, rightly).
    async def scenario(url: str) -> list[str]:
        inventory = one_slot(url, model="llama-3.1-8b")
        finished: list[str] = []
        async with Dispatcher(inventory, Router(inventory)) as dispatcher:

            async def call(name: str, priority: int, tokens: int) -> None:
                payload: dict[str, Any] = {
                    "model": "llama-3.1-8b",
                    "messages": [{"role": "user", "content": name}],
                    "max_tokens": tokens,
                }
                await dispatcher.chat(payload, priority=priority, slo_ttft_s=30.0, request_id=name)
                finished.append(name)

            tasks = [asyncio.create_task(call("holder", 1, 150))]  # long enough for all six to queue
            await asyncio.sleep(0.1)
            for name, priority in [
                ("c1-a", 1),
                ("c1-b", 1),
                ("c1-c", 1),
                ("c0-a", 0),
                ("c0-b", 0),
                ("c0-c", 0),
            ]:
                tasks.append(asyncio.create_task(call(name, priority, 3)))
                await asyncio.sleep(0.03)
            await asyncio.wait_for(asyncio.gather(*tasks), 30)
        return finished

    with SimServer(model_name="llama-3.1-8b", time_scale=1.0) as sim:
        order = asyncio.run(scenario(sim.url))
    assert order == ["holder", "c0-a", "c0-b", "c0-c", "c1-a", "c1-b", "c1-c"]
