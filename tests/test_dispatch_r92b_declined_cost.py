"""Waiters that turned down their slot cost an ask, and ``due``, nothing.

Review R92 had a waiter that turns down the free slot offered to it (its SLO met nowhere, class 1
waits) passed over by the walk down the line until it asks again. A regression review of R92 found
it left in the queues, marked: every ask and every ``due`` walked past each one ahead of it, and a
freed slot woke them one after another (each turning it down, each waking the next with a
``due``): with 2,000 of them an ask and ``due`` cost 29 x what they cost with one
(``benchmarks/router_line.py --quick``, ``declined_over_one``, on that tree). Now one that turns
the slot down leaves the queues until it asks again (keeping its place in line): the walks count
here the queue entries they look at (``Router._listed``), the work the line costs.
"""

from __future__ import annotations

from test_dispatch_r92_declined_slot import SlowFor
from test_router_order import one_slot, req

from agentgate.dispatch.router import Router

DECLINED = 1_000


class Counting(Router):
    """A router that counts the queue entries its walks look at."""

    looked_at = 0

    def _listed(self, backend: str, entry: tuple[tuple[int, float, float], str]) -> bool:
        self.looked_at += 1
        return super()._listed(backend, entry)


def declined_line() -> tuple[Counting, int]:
    """One slot, held; ``DECLINED`` waiters whose SLO it cannot meet and one at the back whose SLO
    it meets, in line; the slot frees and each of the first asks again (woken one after another),
    turns it down and has ``due`` asked (as the dispatcher does); the entries those walks looked
    at."""
    router = Counting(one_slot(), predictor=SlowFor(3.0, *(f"d{i}" for i in range(DECLINED))))
    assert router.route(req("holder", 0, 0.0), 0.0).action == "dispatch"
    for i in range(DECLINED):
        assert router.route(req(f"d{i}", 1, 0.0, slo=3.2), 0.0).until_freed
    assert router.route(req("back", 1, 0.0, slo=100.0), 0.0).until_freed
    router.finished("holder", 0.5)
    router.looked_at = 0
    for i in range(DECLINED):
        assert not router.route(req(f"d{i}", 1, 0.0, slo=3.2), 0.5).until_freed
        assert router.due(0.5) == [f"d{i + 1}" if i + 1 < DECLINED else "back"]  # woken next
    return router, router.looked_at


def test_a_freed_slot_woken_down_a_line_of_waiters_that_turn_it_down_costs_as_much_as_the_line() -> None:
    _, round_cost = declined_line()
    assert round_cost <= 4 * DECLINED  # not a walk past every one of them at each of 2,000 walks


def test_due_and_an_ask_look_at_none_of_the_waiters_that_turned_their_slot_down() -> None:
    router, _ = declined_line()
    router.looked_at = 0
    assert router.due(0.5) == ["back"]
    assert router.looked_at <= 2
    router.looked_at = 0
    assert not router.route(req(f"d{DECLINED - 1}", 1, 0.0, slo=3.2), 0.5).until_freed
    assert router.looked_at <= 2
    router.looked_at = 0
    assert not router.route(req("d0", 1, 0.0, slo=3.2), 0.5).until_freed
    assert router.looked_at <= 2


def test_asking_again_one_that_turned_it_down_is_filed_back_at_its_place_in_line() -> None:
    router, _ = declined_line()
    router.predictor = SlowFor(3.0)  # the engine drained: every SLO can be met now
    last = req(f"d{DECLINED - 1}", 1, 0.0, slo=3.2)
    assert router.route(last, 0.5).action == "dispatch"  # ahead of "back"
    assert router.route(req("back", 1, 0.0, slo=100.0), 0.6).until_freed
    assert router.route(req("d0", 1, 0.0, slo=3.2), 0.6).until_freed  # back in line, ahead of "back"
    router.finished(last.id, 0.7)
    assert router.due(0.7) == ["d0"]
