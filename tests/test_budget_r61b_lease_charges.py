"""A GPU lease's last outcome (``GatedBroker``, ``dispatch/broker/_lease_outcomes.py``) carries
``charges``: what each grant of the chain was charged, by unit, as the Gate's outcomes do
(docs/audit-format.md), so that an auditor rebuilds a grant's spend from the log alone.

Until review R61 a lease's end committed its reservations with ``BudgetLedger.commit`` and wrote
no ``charges``: a grant's spend on leases could not be summed from the log's outcomes.
"""

from __future__ import annotations

from test_broker_gated import _lose_the_journal
from test_broker_restart_budget import World, lease
from test_broker_restart_budget import world as world  # the fixture


def _charged_in_log(world: World) -> int:
    """What the log's outcomes say the trainer's grant was charged in usd_micros."""
    entries = world.process.entries()
    return sum((e.charges or {}).get(world.trainer.grant_id, {}).get("usd_micros", 0) for e in entries)


def test_a_released_lease_outcome_carries_what_its_grant_was_charged(world: World) -> None:
    """Review R61: a lease released after 50 s of 2 GPUs records charges {grant: {usd_micros:
    100000}}, the grant's spend, on its ``lease_released`` outcome."""
    gated = world.process.gated
    assert gated.submit(world.trainer, lease("ft-1")).lease() is not None
    world.clock.now += 50
    gated.release(world.trainer, "ft-1")
    released = world.process.entries()[-1]
    assert (released.status, released.budget_delta) == ("lease_released", 100_000)
    assert released.charges == {world.trainer.grant_id: {"usd_micros": 100_000}}
    assert _charged_in_log(world) == world.spent() == 100_000
    assert world.process.gate.verify().ok


def test_a_lost_lease_outcome_carries_what_was_reserved_as_charged(world: World) -> None:
    """Review R61: a lease lost in a restart, charged all it reserved by ``reconcile``, records
    that as its grant's charge."""
    gated = world.process.gated
    assert gated.submit(world.trainer, lease("ft-1")).lease() is not None
    _lose_the_journal(world)
    after = world.restart()
    assert after.gated.reconcile() == ["ft-1"]
    lost = after.entries()[-1]
    assert lost.status == "lease_lost" and lost.budget_delta == 120_000
    assert lost.charges == {world.trainer.grant_id: {"usd_micros": 120_000}}
    assert _charged_in_log(world) == world.spent() == 120_000


def test_a_lease_that_never_held_gpus_records_no_charges(world: World) -> None:
    """Review R61: a request that timed out waiting returns all it reserved: its outcome has no
    ``charges`` (as a Gate outcome that released its reservations)."""
    gated = world.process.gated
    assert gated.submit(world.trainer, lease("big", gpus=8)).lease() is not None
    waiting = gated.submit(world.trainer, lease("ft-2", gpus=8, timeout_s=10.0))
    assert waiting.allowed and waiting.lease() is None
    world.clock.now += 11
    gated.advance()
    timed_out = world.process.entries()[-1]
    assert timed_out.status == "lease_timed_out" and timed_out.charges is None
