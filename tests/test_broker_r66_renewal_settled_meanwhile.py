"""Review R66: a lease renewal whose reservation was settled before it was linked to the lease.

``GatedBroker.renew`` reserves the renewal's time with its decision, then (after the broker
renewed the lease) links the reservation to the lease's decision (``_link``): merged into the
lease's reservation of its unit (``BudgetLedger.merge``), or kept apart when the merge refuses.
Between the two, the reservation is no lease's yet (``store.held`` finds no lease holding it),
so an operator's ``agentgate budget settle --older-than 0`` may settle it. ``merge`` then
returns False (it writes nothing since review R66: ``tests/test_ledger_r66_merge_race.py``), and
the renewal's reservation, settled, was kept in the lease's decision all the same: the lease's
end, which charges each of its reservations, failed on it (``InputError``: already settled), so
the end was never recorded and the lease's own reservation stayed held for ever. The operator's
settlement is run at that moment on purpose (around the broker's ``renew``), on both stores."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from test_broker_restart_budget import World, lease

from agentgate.store import Store
from agentgate.store.held import settle_held


@pytest.fixture
def world(store: Store) -> Iterator[World]:
    made = World(store.url)
    yield made
    made.process.gate.close()


def _settle_by_hand_during_the_renewal(world: World) -> list[str]:
    """Make the broker's ``renew`` (between the renewal's decision and its link) first release
    by hand every reservation held that no lease's decision holds; the ids it released."""
    process = world.process
    renew = process.gated.broker.renew
    released: list[str] = []

    def renewed(lease_id: str) -> Any:
        linked = {r for d in process.gated.decisions.all() for r, _u, _a in d.reservations}
        held = process.store.query("SELECT id FROM budget_reservations WHERE state = 'reserved'")
        for (reservation,) in held:
            if reservation not in linked:
                settle_held(process.store, process.gate.audit, reservation, ran=False, by="ops", min_age_s=0)
                released.append(reservation)
        return renew(lease_id)

    process.gated.broker.renew = renewed  # type: ignore[method-assign]
    return released


def test_a_renewal_settled_by_hand_before_its_link_leaves_the_lease_end_settleable(world: World) -> None:
    """Review R66: the lease's end raised ``InputError`` on the renewal's reservation that was
    settled by hand; its own reservation stayed held for ever. Now the renewal's settled
    reservation is not linked: the end charges the time held, and nothing stays open."""
    gated = world.process.gated
    spent_before = world.spent()
    assert gated.submit(world.trainer, lease("ft-1")).lease() is not None
    (first,) = gated.decisions.all()
    released = _settle_by_hand_during_the_renewal(world)
    world.clock.now += 1
    gated.renew(world.trainer, "ft-1")
    assert len(released) == 1
    (decided,) = gated.decisions.all()
    assert decided.reservations == first.reservations  # the settled renewal is not the lease's
    world.clock.now += 10
    gated.release(world.trainer, "ft-1")
    ended = world.process.entries()[-1]
    assert (ended.status, ended.budget_delta) == ("lease_released", 2 * 11 * 1_000)  # 11 s held
    assert world.spent() - spent_before == 22_000
    assert world.remaining() == world.budget - world.spent()
    open_rows = world.process.store.query("SELECT COUNT(*) FROM budget_reservations WHERE state = 'reserved'")
    assert open_rows[0][0] == 0
    assert world.process.gate.verify().ok
