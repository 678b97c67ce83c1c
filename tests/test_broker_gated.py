"""GatedBroker (agentgate/dispatch/broker/_gated.py): GPU leases decided by the Gate and audited,
the tenant and holder the identity's. After a restart, a lease lost is charged what was reserved for
it, never more, and a lease whose grant could not be recorded is restored from the journal and
charged its time."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import test_dispatch_unrecorded_ends as second_dispatch
from opentelemetry.trace import Tracer
from test_broker import FakeClock
from test_broker_restart_budget import World, lease

from agentgate.audit.entry import AuditEntry
from agentgate.dispatch.broker import (
    Broker,
    CheckpointNotice,
    GangRequest,
    GatedBroker,
    Granted,
    LeaseJournal,
    TenantQuota,
    synthetic_topology,
)
from agentgate.errors import AuditError, BrokerError, Denied, LeaseLost, StoreError
from agentgate.gate import AgentIdentity, Approval, Gate
from agentgate.keys import SigningKey
from agentgate.policy import parse_policy
from agentgate.store import SQLiteStore, Store

POLICY = """
version: 1
trust_anchors:
  root: {{did: "{root}"}}
tenants:
  team-a: {{}}
  team-b: {{}}
principals:
  trainer: {{kind: service, did: "{trainer}", tenant: team-a, roles: [trainer]}}
  other: {{kind: service, did: "{other}", tenant: team-b, roles: [trainer]}}
  chat: {{kind: agent, did: "{chat}", tenant: team-a, roles: [chat]}}
tools:
  lookup: {{}}
roles:
  trainer:
    kind: service
    capabilities:
      - resource: gpu:h100
        constraints: {{count: {{ge: 1, le: 8}}, priority: {{le: 1}}{extra}}}
    ttl_s: 3600
  chat:
    kind: agent
    capabilities:
      - resource: tool:lookup
    ttl_s: 3600
"""


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Setup:
    def __init__(
        self, path: Path, constraints: str = "", approvals: str = "", tracer: Tracer | None = None
    ) -> None:
        self.keys = {n: SigningKey.generate() for n in ("root", "trainer", "other", "chat")}
        extra = ", " + constraints if constraints else ""  # format arguments are not parsed again
        gates = f"approvals: {{{approvals}}}\n" if approvals else ""
        text = POLICY.format(extra=extra, **{n: k.did for n, k in self.keys.items()}) + gates
        self.gate = Gate(
            parse_policy(text, source="gpu.yaml"), SQLiteStore(path / "agentgate.db"), tracer=tracer
        )
        self.clock = Clock()
        self.rebroker()
        self.ids = {
            n: self.gate.issue(self.keys["root"], name=n, key=self.keys[n], role=role)
            for n, role in (("trainer", "trainer"), ("other", "trainer"), ("chat", "chat"))
        }

    def rebroker(self, nodes: int = 3, team_a: int = 16, journal: LeaseJournal | None = None) -> Setup:
        """A new broker (and ``GatedBroker``) on the same clock and gate: ``nodes`` nodes of 8
        GPUs, team-a's quota ``team_a`` and team-b's 8, leases of 60 s, ``journal`` when given.
        The same, called again, is a restart whose broker lost what it held."""
        self.broker = self.new_broker(nodes, team_a, journal)
        self.gated = GatedBroker(self.gate, self.broker)
        return self

    def new_broker(self, nodes: int = 3, team_a: int = 16, journal: LeaseJournal | None = None) -> Broker:
        """A broker as ``rebroker`` makes one, not put in place: another broker process over the
        same store (a replica, a restart) beside this one."""
        quotas = [TenantQuota("team-a", team_a, cohort="lab"), TenantQuota("team-b", 8, cohort="lab")]
        topology = synthetic_topology(nodes=nodes, gpus_per_node=8)
        return Broker(topology, quotas, clock=self.clock, ttl_s=60, journal=journal)

    def entries(self) -> list[AuditEntry]:
        """The entries of calls (the grants' own ``agent:NAME`` entries left out)."""
        self.gate.flush()
        return [e for e in self.gate.audit.entries() if not (e.resource or "").startswith("agent:")]


@pytest.fixture
def setup(tmp_path: Path) -> Iterator[Setup]:
    made = Setup(tmp_path)
    yield made
    made.gate.close()


def test_an_allowed_lease_is_decided_and_audited_before_the_broker_grants_it(setup: Setup) -> None:
    answer = setup.gated.submit(
        setup.ids["trainer"], GangRequest("ft-1", "team-b", 8, gpu_type="H100", holder="someone-else")
    )
    assert answer.allowed
    lease = answer.lease()
    assert lease is not None and len(lease.gpus) == 8
    # the tenant that pays and the holder are the identity's, not what the request said
    assert lease.tenant == "team-a" and lease.request.holder == setup.ids["trainer"].did
    decision, granted = setup.entries()
    assert (decision.kind, decision.resource, decision.principal) == (
        "allow",
        "gpu:h100",
        setup.ids["trainer"].did,
    )
    assert decision.index < granted.index
    assert (granted.kind, granted.status, granted.ref) == ("outcome", "lease_granted", decision.index)


@pytest.mark.parametrize(
    ("who", "gpus", "priority"),
    [("trainer", 16, 0), ("trainer", 8, 5), ("chat", 1, 0)],
    ids=["more-gpus-than-the-grant", "priority-above-the-grant", "no-gpu-capability"],
)
def test_a_refused_lease_never_reaches_the_broker(setup: Setup, who: str, gpus: int, priority: int) -> None:
    answer = setup.gated.submit(setup.ids[who], GangRequest("x", "team-a", gpus, priority, gpu_type="H100"))
    assert not answer.allowed and answer.events == () and answer.lease() is None
    assert setup.broker.leases() == [] and setup.broker.queue() == []
    (entry,) = setup.entries()
    assert (entry.kind, entry.resource) == ("deny", "gpu:h100")


def test_no_identity_is_refused(setup: Setup) -> None:
    answer = setup.gated.submit(None, GangRequest("x", "team-a", 1, gpu_type="H100"))
    assert not answer.allowed and setup.broker.queue() == []


def test_only_the_holder_may_release_or_renew(setup: Setup) -> None:
    setup.gated.submit(setup.ids["trainer"], GangRequest("ft-1", "team-a", 8, gpu_type="H100"))
    with pytest.raises(LeaseLost, match="not held by you"):  # as for an id nobody holds
        setup.gated.release(setup.ids["other"], "ft-1")
    with pytest.raises(LeaseLost, match="not held by you"):
        setup.gated.renew(setup.ids["other"], "ft-1")
    assert [lease.id for lease in setup.broker.leases()] == ["ft-1"]
    setup.clock.now += 30
    assert setup.gated.renew(setup.ids["trainer"], "ft-1").expires_at == setup.clock.now + 60
    setup.gated.release(setup.ids["trainer"], "ft-1")
    assert setup.broker.leases() == []
    assert setup.entries()[-1].status == "lease_released"
    with pytest.raises(LeaseLost):
        setup.gated.release(setup.ids["trainer"], "ft-1")


def test_preemption_notice_and_expiry_are_audited_for_the_victim(setup: Setup) -> None:
    for rid in ("low-1", "low-2", "low-3"):
        assert setup.gated.submit(setup.ids["trainer"], GangRequest(rid, "t", 8, 0, gpu_type="H100")).lease()
    # team-a is over its nominal quota (24 of 16, borrowing from team-b); team-b reclaims
    answer = setup.gated.submit(setup.ids["other"], GangRequest("reclaim", "t", 8, 0, gpu_type="H100"))
    assert answer.allowed and answer.lease() is None
    notices = [e for e in answer.events if isinstance(e, CheckpointNotice)]
    assert len(notices) == 1
    victim = notices[0].lease.id
    audited = [e for e in setup.entries() if e.status == "lease_preempt_notice"]
    assert len(audited) == 1 and audited[0].principal == setup.ids["trainer"].did
    decisions = {e.index: e for e in setup.entries() if e.kind == "allow"}
    assert audited[0].ref in decisions  # refers to the victim's own decision
    # grace and every lease's ttl pass, well within the preemptor's wait (its grant's time left
    # less its ttl: a longer jump times it out since review R36); the preemptor gets the GPUs
    setup.clock.now += 200
    events = setup.gated.advance()
    assert any(isinstance(e, Granted) and e.lease.id == "reclaim" for e in events)
    statuses = [e.status for e in setup.entries() if e.kind == "outcome"]
    assert statuses.count("lease_preempted") == 1 and "lease_expired" in statuses
    assert victim not in {lease.id for lease in setup.broker.leases()}


def test_a_request_without_gpu_type_is_refused_before_any_decision(setup: Setup) -> None:
    with pytest.raises(BrokerError, match="gpu_type"):
        setup.gated.submit(setup.ids["trainer"], GangRequest("x", "team-a", 1))
    with pytest.raises(BrokerError, match="no resource name"):
        setup.gated.submit(setup.ids["trainer"], GangRequest("x", "team-a", 1, gpu_type="../h100"))
    assert setup.entries() == []


def test_a_broker_error_after_the_decision_is_audited_as_an_error_outcome(setup: Setup) -> None:
    never = GangRequest("big", "team-a", 8, gpu_type="H100", min_memory_gb=1000)  # no GPU that large
    with pytest.raises(BrokerError):
        setup.gated.submit(setup.ids["trainer"], never)
    decision, error = setup.entries()
    assert decision.kind == "allow" and (error.kind, error.status, error.ref) == (
        "outcome",
        "error",
        decision.index,
    )


def test_a_live_id_is_refused_and_keeps_its_holders_audit_link(setup: Setup) -> None:
    first = setup.gated.submit(setup.ids["trainer"], GangRequest("ft-1", "x", 8, gpu_type="H100"))
    count = len(setup.entries())
    with pytest.raises(BrokerError, match="already live"):  # its own: before any decision
        setup.gated.submit(setup.ids["trainer"], GangRequest("ft-1", "x", 1, gpu_type="H100"))
    assert len(setup.entries()) == count
    # Another holder's: only after the decision (a caller the policy refuses is told no more than
    # for a free id), its reservation returned with an error outcome.
    with pytest.raises(BrokerError, match="already live"):
        setup.gated.submit(setup.ids["other"], GangRequest("ft-1", "x", 1, gpu_type="H100"))
    allow, error = setup.entries()[count:]
    assert (allow.kind, error.status, error.ref) == ("allow", "error", allow.index)
    setup.gated.release(setup.ids["trainer"], "ft-1")
    released = setup.entries()[-1]
    assert (released.status, released.ref) == ("lease_released", first.authorization.audit_index)
    assert released.chain_hash == setup.ids["trainer"].grant_id


def test_the_tenant_that_pays_comes_from_the_policy_not_the_identity_object(setup: Setup) -> None:
    spoofed = dataclasses.replace(setup.ids["trainer"], tenant="team-b")
    lease = setup.gated.submit(spoofed, GangRequest("ft-1", "x", 8, gpu_type="H100")).lease()
    assert lease is not None and lease.tenant == "team-a"


def test_a_renewal_is_decided_again_and_audited(setup: Setup) -> None:
    setup.gated.submit(setup.ids["trainer"], GangRequest("ft-1", "x", 8, gpu_type="H100"))
    count = len(setup.entries())
    setup.clock.now += 30
    setup.gated.renew(setup.ids["trainer"], "ft-1")
    renewal = setup.entries()[-1]
    assert len(setup.entries()) == count + 1 and (renewal.kind, renewal.resource) == ("allow", "gpu:h100")
    setup.gate.revoke(setup.ids["trainer"], reason="compromised")
    setup.clock.now += 30
    with pytest.raises(Denied, match="renewal"):
        setup.gated.renew(setup.ids["trainer"], "ft-1")
    setup.clock.now += 60  # not renewed: the lease expires and its GPUs return
    setup.gated.advance()
    assert setup.broker.leases() == []


def test_lease_times_are_decided_so_a_policy_can_bound_them(tmp_path: Path) -> None:
    bounded = Setup(tmp_path, constraints="grace_s: {le: 120}, ttl_s: {le: 3600}")
    try:
        ok = bounded.gated.submit(
            bounded.ids["trainer"], GangRequest("a", "x", 1, gpu_type="H100", grace_s=30, ttl_s=60)
        )
        assert ok.allowed, ok.authorization.reasons
        long = GangRequest("b", "x", 1, gpu_type="H100", grace_s=1e9)  # would outlast any preemption
        assert not bounded.gated.submit(bounded.ids["trainer"], long).allowed
        default = bounded.gated.submit(bounded.ids["trainer"], GangRequest("c", "x", 1, gpu_type="H100"))
        assert default.allowed  # the broker's defaults (ttl 60 s, grace 120 s) are what is decided
    finally:
        bounded.gate.close()


def test_a_lease_behind_an_approval_gate_waits_for_a_signed_approval(tmp_path: Path) -> None:
    gated = Setup(
        tmp_path, approvals="big-leases: {resource: gpu:h100, when: {count: {gt: 4}}, approvers: [chat]}"
    )
    try:
        request = GangRequest("ft-9", "x", 8, gpu_type="H100")
        asked = gated.gated.submit(gated.ids["trainer"], request)
        assert asked.needs_approval and not asked.allowed and gated.broker.queue() == []
        approval = Approval.sign(asked.authorization.approval_payload(), gated.keys["chat"])
        granted = gated.gated.submit(gated.ids["trainer"], request, approval=approval)
        assert granted.allowed and granted.lease() is not None
        assert [e for e in gated.entries() if e.kind == "allow"][-1].approver == gated.keys["chat"].did
        gated.clock.now += 30
        assert gated.gated.renew(gated.ids["trainer"], "ft-9")  # renewals are not asked again
        gated.gated.release(gated.ids["trainer"], "ft-9")
        again = gated.gated.submit(
            gated.ids["trainer"], GangRequest("ft-9", "x", 8, gpu_type="H100"), approval=approval
        )
        assert not again.allowed  # an approval is used once
    finally:
        gated.gate.close()


# --- a lease never outlives its grant ---------------------------------------------------------


TRAINER_POLICY = """
version: 1
trust_anchors:
  root: {{did: "{root}"}}
tenants:
  team-a: {{}}
principals:
  trainer: {{kind: service, did: "{trainer}", tenant: team-a, roles: [trainer]}}
roles:
  trainer:
    kind: service
    capabilities:
      - resource: gpu:h100
        constraints: {{count: {{ge: 1, le: 8}}}}
    ttl_s: 3600
"""


@pytest.fixture
def gated(tmp_path: Path) -> Iterator[tuple[GatedBroker, AgentIdentity]]:
    keys = {n: SigningKey.generate() for n in ("root", "trainer")}
    text = TRAINER_POLICY.format(**{n: k.did for n, k in keys.items()})
    gate = Gate(parse_policy(text, source="gpu.yaml"), SQLiteStore(tmp_path / "agentgate.db"))
    clock = FakeClock()
    broker = Broker(synthetic_topology(nodes=2, gpus_per_node=8), [TenantQuota("team-a", 16)], clock=clock)
    identity = gate.issue(keys["root"], name="trainer", key=keys["trainer"], role="trainer")
    yield GatedBroker(gate, broker), identity
    gate.close()


def test_a_lease_ttl_just_past_the_grants_expiry_is_refused(gated: tuple[GatedBroker, AgentIdentity]) -> None:
    """Mutant n19 (_lease_calls.py _outlived, then _gated.py: ``ttl_s <= left`` made ``ttl_s <= left + 60``).

    A lease never outlives the grant that decided it, not even by seconds: a ``ttl_s`` 30 s past
    the grant chain's expiry is refused before any decision, and one 30 s short of it is granted.
    """
    broker, identity = gated
    left = identity.chain.expires - time.time()
    assert 3500 < left <= 3600
    with pytest.raises(BrokerError, match="would outlive the grant"):
        broker.submit(identity, GangRequest("long", "team-a", 1, gpu_type="H100", ttl_s=left + 30))
    assert broker.broker.leases() == [] and broker.broker.queue() == []
    answer = broker.submit(identity, GangRequest("short", "team-a", 1, gpu_type="H100", ttl_s=left - 30))
    assert answer.allowed and answer.lease() is not None


# --- leases lost in a restart: a lease lost is charged what was reserved for it, never more, and a
# lease whose grant could not be recorded is restored from the journal and charged its time
# (``World`` from test_broker_restart_budget: the keys, policy and clock that outlive a process) ---


@pytest.fixture
def world(store: Store) -> Iterator[World]:
    made = World(store.url)
    yield made
    made.process.gate.close()


def _lose_the_journal(world: World) -> None:
    """The broker's journal loses its leases and queue (written before they were made)."""
    with world.process.store.transaction() as tx:
        tx.execute("DELETE FROM broker_leases")
        tx.execute("DELETE FROM broker_queue")


def _related(world: World, index: int) -> tuple[list[int], list[int]]:
    """The indexes ``explain`` shows with entry ``index`` and those ``referring`` gives."""
    audit = world.process.gate.audit
    return [e.index for e in audit.explain(index).related], [e.index for e in audit.referring(index)]


def test_a_granted_and_renewed_lease_lost_is_charged_what_was_reserved_never_more(world: World) -> None:
    gated = world.process.gated
    spent_before = world.spent()
    decision = gated.submit(world.trainer, lease("ft-1")).authorization.audit_index
    assert decision is not None
    world.clock.now += 30
    gated.renew(world.trainer, "ft-1")  # 2 GPUs x 30 s more, 1,000 per GPU-second
    (decided,) = gated.decisions.all()
    reserved = sum(amount for _r, _u, amount in decided.reservations)
    assert reserved == 120_000 + 60_000
    indexed = _related(world, decision)
    _lose_the_journal(world)
    after = world.restart()
    assert after.gated.reconcile() == ["ft-1"]
    lost = after.entries()[-1]
    assert (lost.status, lost.ref, lost.budget_delta) == ("lease_lost", decision, reserved)
    assert world.spent() - spent_before == reserved
    assert world.remaining() == world.budget - reserved
    assert after.gated.reconcile() == []  # twice in a row: nothing more
    assert world.spent() - spent_before == reserved
    assert after.gate.verify().ok
    # The lookup reconcile uses gives the same entries through the index and by scanning the log.
    explained, referring = _related(world, decision)
    assert explained[: len(indexed[0])] == indexed[0] and lost.index in referring
    after.gate.audit.refs_indexed = False  # a role that could not build audit_refs: the scan path
    assert _related(world, decision) == (explained, referring)
    renewal = next(e for e in after.entries() if e.kind == "allow" and e.index > decision)
    assert _related(world, renewal.index)[0] == [
        e.index for e in after.gate.audit.explain(renewal.index).related
    ]


def test_a_lease_queued_around_the_gate_and_renewed_is_charged_when_lost(world: World) -> None:
    process = world.process
    spent_before = world.spent()
    process.broker.submit(GangRequest("side", "team-a", 2, gpu_type="H100", holder=world.trainer.did))
    world.clock.now += 30
    process.gated.renew(world.trainer, "side")  # the lease runs 30 s more: 60,000 reserved
    (decided,) = process.gated.decisions.all()
    assert [amount for _r, _u, amount in decided.reservations] == [60_000]
    _lose_the_journal(world)
    after = world.restart()
    assert after.gated.reconcile() == ["side"]
    lost = after.entries()[-1]
    assert lost.status == "lease_lost" and "never held GPUs" not in lost.reasons[0]
    assert lost.budget_delta == 60_000 and world.spent() - spent_before == 60_000


def test_a_lease_whose_grant_could_not_be_recorded_is_charged_its_time_after_a_restart(
    tmp_path: Path,
) -> None:
    """The grant outcome is the event the store refused; the process stops before it is recorded.
    The journal has the lease: the restored broker keeps it (reconcile leaves it alone) and its
    end is charged the time it was held, although the log never got its grant."""
    world = World(str(tmp_path / "agentgate.db"))
    try:
        warm = world.process.gated.submit(world.trainer, lease("warm"))  # every table exists
        world.process.gated.release(world.trainer, "warm")
        spent_before = world.spent()
        with second_dispatch.grant_outcomes_refused(Path(world.url)), pytest.raises((StoreError, AuditError)):
            world.process.gated.submit(world.trainer, lease("ft-1"))
        after = world.restart()
        assert [held.id for held in after.broker.leases()] == ["ft-1"]
        assert after.gated.reconcile() == []
        world.clock.now += 90  # past its 60 s ttl
        after.gated.advance()
        decision = next(
            e
            for e in after.entries()
            if e.kind == "allow" and e.index > (warm.authorization.audit_index or 0)
        )
        ends = [e for e in after.entries() if e.ref == decision.index and e.kind == "outcome"]
        assert [(e.status, e.budget_delta) for e in ends] == [("lease_expired", 120_000)]
        assert world.spent() - spent_before == 120_000
        assert after.gate.verify().ok
    finally:
        world.process.gate.close()


def test_a_lease_renewed_many_times_keeps_one_reservation_per_unit_and_is_charged_its_time(
    world: World,
) -> None:
    """Kills: each renewal appending its reservations to the lease's decision row: a lease
    renewed every few seconds for a week held tens of thousands of reservations, its row (a JSON
    list) rewritten whole at each renewal and each one settled one by one at its end.

    Rule: a renewal's reservation is merged into the lease's reservation of its unit taken from
    the same chain (``BudgetLedger.merge``): the row holds as many reservations as the first
    decision did, however often the lease is renewed, holding all that was reserved; the lease's
    end charges the time it held, returns the rest, and leaves no reservation open."""
    gated = world.process.gated
    spent_before = world.spent()
    assert gated.submit(world.trainer, lease("ft-1")).lease() is not None
    (first,) = gated.decisions.all()
    for _ in range(40):
        world.clock.now += 1
        gated.renew(world.trainer, "ft-1")  # 2 GPUs x 1 s more, 1,000 per GPU-second
    (decided,) = gated.decisions.all()
    assert len(decided.reservations) == len(first.reservations)
    assert [r for r, _u, _a in decided.reservations] == [r for r, _u, _a in first.reservations]
    money = sum(amount for _r, unit, amount in decided.reservations if unit == "usd_micros")
    assert money == 120_000 + 40 * 2_000  # the first 60 s, then 1 s more at each renewal
    world.clock.now += 10
    gated.release(world.trainer, "ft-1")
    released = world.process.entries()[-1]
    assert (released.status, released.budget_delta) == ("lease_released", 2 * 50 * 1_000)  # 50 s held
    assert world.spent() - spent_before == 100_000
    assert world.remaining() == world.budget - world.spent()
    open_rows = world.process.store.query("SELECT COUNT(*) FROM budget_reservations WHERE state = 'reserved'")
    assert open_rows[0][0] == 0
    assert world.process.gate.verify().ok
