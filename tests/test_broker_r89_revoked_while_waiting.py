"""Review R89: a request whose grant is revoked while it waits is not granted (agentgate/dispatch/broker).

``GatedBroker`` bounded a waiting request's wait by its grant chain's expiry only, and the broker
granted it with no new check: a request allowed, then waiting, was granted a fresh lease after
its grant was revoked ("compromised"), its reservation committed against the revoked chain,
though "a lease never outlives the grant that decided it". Now the broker asks, as a waiting
request is about to take GPUs (its grant, its preemption's nomination, a draining reservation),
``Broker.grant_check``, which ``GatedBroker`` sets to read the store: a request whose chain has a
revoked grant is withdrawn (``Withdrawn`` with the reason), its reservation returned, with a
``request_revoked`` outcome referring to its decision. Read from the store, a revocation made by
another process (the CLI) holds too, and so does one made while the broker was down: a restored
broker no longer grants a nominated request inside ``restore``, before any check is set, but at
the next call that tries the queue.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_broker_gated import Setup

from agentgate.dispatch.broker import (
    Broker,
    BrokerSnapshot,
    CheckpointNotice,
    GangRequest,
    GatedBroker,
    Granted,
    LeaseEnded,
    TenantQuota,
    Withdrawn,
)
from agentgate.store import SQLiteStore
from agentgate.store.grants import GrantRepository


@pytest.fixture
def setup(tmp_path: Path) -> Iterator[Setup]:
    made = Setup(tmp_path).rebroker(nodes=1, team_a=8)  # one node of 8 GPUs
    yield made
    made.gate.close()


def _waiting_behind_a_blocker(setup: Setup) -> int:
    """team-b's ``blocker`` holds all 8 GPUs and the trainer's ``ft-1`` waits; its decision's index."""
    assert setup.gated.submit(setup.ids["other"], GangRequest("blocker", "x", 8, gpu_type="H100")).lease()
    waiting = setup.gated.submit(setup.ids["trainer"], GangRequest("ft-1", "x", 8, gpu_type="H100"))
    assert waiting.allowed and waiting.lease() is None
    assert waiting.authorization.audit_index is not None
    return waiting.authorization.audit_index


def _withdrawn(events: list[object]) -> list[str]:
    return [
        e.request.id for e in events if isinstance(e, Withdrawn) and e.reason and "was revoked" in e.reason
    ]


def _assert_revoked_outcome(setup: Setup, request_id: str, decided: int) -> None:
    (outcome,) = [e for e in setup.entries() if e.kind == "outcome" and e.status == "request_revoked"]
    assert (outcome.ref, outcome.budget_delta) == (decided, 0)
    assert (
        f"grant {setup.ids['trainer'].grant_id} of the chain that decided it was revoked"
        in outcome.reasons[0]
    )
    assert setup.gated.decisions.get(request_id) is None  # settled: its reservation returned


def test_a_request_whose_grant_is_revoked_while_it_waits_is_not_granted(setup: Setup) -> None:
    decided = _waiting_behind_a_blocker(setup)
    setup.gate.revoke(setup.ids["trainer"], reason="compromised")
    setup.clock.now += 10
    events = setup.gated.release(setup.ids["other"], "blocker")
    assert not any(isinstance(e, Granted) for e in events)
    assert _withdrawn(events) == ["ft-1"]
    assert setup.broker.leases() == [] and setup.broker.queue() == [] and setup.broker.free_gpus() == 8
    _assert_revoked_outcome(setup, "ft-1", decided)


def test_a_revocation_written_by_another_process_holds_too(setup: Setup, tmp_path: Path) -> None:
    # As ``agentgate grant revoke`` does it: on its own connection, not through this Gate.
    _waiting_behind_a_blocker(setup)
    with SQLiteStore(tmp_path / "agentgate.db") as elsewhere:
        GrantRepository(elsewhere).revoke(setup.ids["trainer"].grant_id, now=int(time.time()))
    events = setup.gated.release(setup.ids["other"], "blocker")
    assert _withdrawn(events) == ["ft-1"] and setup.broker.leases() == []


def test_a_nominated_request_whose_grant_is_revoked_gets_no_gpus_when_its_victim_ends(setup: Setup) -> None:
    assert setup.gated.submit(
        setup.ids["trainer"], GangRequest("low", "x", 8, gpu_type="H100", grace_s=30)
    ).lease()
    high = setup.gated.submit(setup.ids["trainer"], GangRequest("high", "x", 8, priority=1, gpu_type="H100"))
    assert [type(e) for e in high.events] == [CheckpointNotice]
    setup.gate.revoke(setup.ids["trainer"], reason="compromised")
    events = setup.gated.release(setup.ids["trainer"], "low")  # giving GPUs back needs no grant
    assert [type(e) for e in events] == [LeaseEnded, Withdrawn] and _withdrawn(events) == ["high"]
    assert setup.broker.free_gpus() == 8 and setup.broker.usage("team-a") == 0


def test_a_request_not_revoked_is_granted_as_before(setup: Setup) -> None:
    _waiting_behind_a_blocker(setup)
    events = setup.gated.release(setup.ids["other"], "blocker")
    assert [e.lease.id for e in events if isinstance(e, Granted)] == ["ft-1"]


@pytest.mark.parametrize("revoked", [True, False])
def test_a_restored_broker_grants_a_nominated_request_only_after_the_check(
    setup: Setup, revoked: bool
) -> None:
    """The victim is gone from the snapshot (a lease set aside by the journal's ``load``): the
    preemptor's grant waits for the next call, which the restarted ``GatedBroker``'s check
    precedes; until review R89 ``restore`` granted it at once, revoked or not."""
    setup.gated.submit(setup.ids["trainer"], GangRequest("low", "x", 8, gpu_type="H100", grace_s=30))
    decided = setup.gated.submit(
        setup.ids["trainer"], GangRequest("high", "x", 8, priority=1, gpu_type="H100")
    )
    if revoked:
        setup.gate.revoke(setup.ids["trainer"], reason="compromised")
    saved = setup.broker.snapshot()
    quotas = [TenantQuota("team-a", 8, cohort="lab"), TenantQuota("team-b", 8, cohort="lab")]  # as Setup's
    restarted = Broker(setup.broker.topology, quotas, clock=setup.clock, ttl_s=60)
    restarted.restore(BrokerSnapshot(saved.taken_at, (), saved.queue))
    assert restarted.leases() == [] and restarted.next_deadline() == setup.clock.now
    events = GatedBroker(setup.gate, restarted).advance()
    if revoked:
        assert _withdrawn(events) == ["high"] and restarted.leases() == [] and restarted.free_gpus() == 8
        assert decided.authorization.audit_index is not None
        _assert_revoked_outcome(setup, "high", decided.authorization.audit_index)
    else:
        assert [e.lease.id for e in events if isinstance(e, Granted)] == ["high"]


def test_a_revoked_ancestor_is_found_walking_up_the_recorded_chain(tmp_path: Path) -> None:
    from agentgate.dispatch.broker._lease_calls import _revoked_link  # GatedBroker's question

    with SQLiteStore(tmp_path / "grants.db") as store:
        grants = GrantRepository(store)
        rows = [("root", None, "i", "a", 2**40, "t0"), ("mid", "root", "a", "b", 2**40, "t1")]
        grants.record_grants([*rows, ("tip", "mid", "b", "c", 2**40, "t2")], now=0)
        assert _revoked_link(store, "tip") is None
        grants.revoke("mid", now=0)
        assert _revoked_link(store, "tip") == "mid" and _revoked_link(store, "root") is None
