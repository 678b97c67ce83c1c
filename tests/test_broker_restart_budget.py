"""GatedBroker across a restart (the lease -> decision link is in the store) and GPU time on budgets.

Every test runs on a real SQLite file and a real PostgreSQL database (the ``store`` fixture). A
"process" is a Gate, a Broker journaled to the store and a GatedBroker, each on its own store
connection; a restart closes one and builds the next on the same database, restoring the broker
from its journal.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from agentgate.audit.entry import AuditEntry
from agentgate.capabilities import Call
from agentgate.dispatch.broker import Broker, GangRequest, GatedBroker, TenantQuota, synthetic_topology
from agentgate.errors import Denied, InputError, PolicyError
from agentgate.gate import AgentIdentity, Approval, Gate
from agentgate.keys import SigningKey
from agentgate.policy import parse_policy
from agentgate.policy._schema import lease_cost
from agentgate.store import Store, open_store
from agentgate.store.broker_leases import BrokerLeaseStore

POLICY = """
version: 1
trust_anchors:
  root: {{did: "{root}"}}
tenants:
  team-a: {{}}
principals:
  trainer: {{kind: service, did: "{trainer}", tenant: team-a, roles: [trainer]}}
  boss: {{kind: human, did: "{boss}", tenant: team-a}}
gpus:
{gpus}
roles:
  trainer:
    kind: service
    capabilities:
      - resource: gpu:h100
        constraints: {{count: {{ge: 1, le: 8}}}}
    budget: {{limit: {budget}, unit: usd_micros}}
    ttl_s: 3600
"""

PRICED = "  h100: {cost_per_gpu_hour: 3600000}"  # $3.60 per GPU-hour: 1,000 micro-dollars per GPU-second
UNPRICED = "  a100: {cost_per_gpu_hour: 3600000}"  # h100, the type leased, is not priced


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Process:
    """One agentgate process: its own store connection, Gate, journaled Broker and GatedBroker."""

    def __init__(self, url: str, policy_text: str, log_key: SigningKey, clock: Clock) -> None:
        self.store: Store = open_store(url)
        self.gate = Gate(parse_policy(policy_text, source="gpu.yaml"), self.store, log_key=log_key)
        quotas = [TenantQuota("team-a", 8)]
        journal = BrokerLeaseStore(self.store)
        self.broker = Broker(
            synthetic_topology(nodes=1, gpus_per_node=8), quotas, clock=clock, ttl_s=60, journal=journal
        )
        saved = journal.load()
        if saved is not None:
            self.broker.restore(saved)
        self.gated = GatedBroker(self.gate, self.broker)

    def entries(self) -> list[AuditEntry]:
        """The entries of calls (the grants' own ``agent:NAME`` entries left out)."""
        self.gate.flush()
        return [e for e in self.gate.audit.entries() if not (e.resource or "").startswith("agent:")]


class World:
    """The keys, the policy and the clock that outlive a process, and the process running now."""

    def __init__(self, url: str, gpus: str = PRICED, budget: int = 1_000_000, approvals: str = "") -> None:
        self.url = url
        self.keys = {n: SigningKey.generate() for n in ("root", "trainer", "boss")}
        self.policy = POLICY.format(gpus=gpus, budget=budget, **{n: k.did for n, k in self.keys.items()})
        self.policy += f"approvals: {{{approvals}}}\n" if approvals else ""
        self.log_key = SigningKey.generate()
        self.clock = Clock()
        self.process = Process(url, self.policy, self.log_key, self.clock)
        self.trainer: AgentIdentity = self.process.gate.issue(
            self.keys["root"], name="trainer", key=self.keys["trainer"], role="trainer"
        )
        self.budget = budget

    def restart(self) -> Process:
        self.process.gate.close()
        self.process = Process(self.url, self.policy, self.log_key, self.clock)
        return self.process

    def remaining(self) -> int:
        """What is left of the trainer's budget, reservations counted as spent."""
        self.process.gate.flush()
        left = self.process.gate.ledger.remaining(self.trainer.grant_id)
        return self.budget if left is None else left

    def spent(self) -> int:
        self.process.gate.flush()
        return self.process.gate.ledger.spent(self.trainer.grant_id)


@pytest.fixture
def world(store: Store) -> Iterator[World]:
    made = World(store.url)
    yield made
    made.process.gate.close()


def lease(rid: str, gpus: int = 2, **kw: object) -> GangRequest:
    return GangRequest(rid, "ignored", gpus, gpu_type="H100", **kw)  # type: ignore[arg-type]


def test_outcomes_after_a_restart_name_the_decision_made_before_it(world: World) -> None:
    answer = world.process.gated.submit(world.trainer, lease("ft-1"))
    assert answer.allowed and answer.lease() is not None
    decision = answer.authorization.audit_index
    world.clock.now += 30
    after = world.restart()
    assert [held.id for held in after.broker.leases()] == ["ft-1"]
    world.clock.now += 10
    assert after.gated.renew(world.trainer, "ft-1").expires_at == world.clock.now + 60
    world.clock.now += 20
    after.gated.release(world.trainer, "ft-1")
    entries = after.entries()
    renewal = [e for e in entries if e.kind == "allow"][-1]
    released = entries[-1]
    assert renewal.index != decision
    assert (released.kind, released.status, released.ref) == ("outcome", "lease_released", decision)
    assert (released.principal, released.chain_hash) == (world.trainer.did, world.trainer.grant_id)
    # held from t=1000 to t=1060: 60 s x 2 GPUs x 1,000 micro-dollars
    assert released.budget_delta == 120_000 and world.spent() == 120_000
    assert world.remaining() == world.budget - 120_000
    assert after.gated.decisions.all() == []
    assert after.gate.verify().ok


def test_a_lease_decided_before_a_restart_expires_after_it_with_its_link_and_full_charge(
    world: World,
) -> None:
    decision = world.process.gated.submit(world.trainer, lease("ft-1")).authorization.audit_index
    after = world.restart()
    world.clock.now += 500  # never renewed: it expired at t=1060
    after.gated.advance()
    expired = after.entries()[-1]
    assert (expired.status, expired.ref, expired.budget_delta) == ("lease_expired", decision, 120_000)
    assert world.remaining() == world.budget - 120_000 and after.broker.leases() == []
    assert after.gate.verify().ok


def test_a_lease_the_budget_cannot_pay_for_is_refused_naming_the_budget(store: Store) -> None:
    world = World(store.url, budget=100_000)  # 2 GPUs x 60 s cost 120,000
    try:
        answer = world.process.gated.submit(world.trainer, lease("big"))
        # More than the whole budget: refused as a lease it can never pay, not as a spent budget
        # (review R82).
        assert not answer.allowed and answer.authorization.budget_never_fits
        assert "asks for 120000 usd_micros, more than the whole budget" in answer.authorization.explain()
        assert "100000 usd_micros" in answer.authorization.explain()
        assert world.process.broker.leases() == [] and world.process.broker.queue() == []
        (entry,) = world.process.entries()
        assert (entry.kind, entry.resource) == ("deny", "gpu:h100")
        assert world.remaining() == 100_000
        small = world.process.gated.submit(world.trainer, lease("small", gpus=1))  # 60,000 fits
        assert small.allowed and world.remaining() == 40_000
    finally:
        world.process.gate.close()


def test_the_end_of_a_lease_settles_the_held_time_rounded_up_and_returns_the_rest(world: World) -> None:
    world.process.gated.submit(world.trainer, lease("ft-1"))
    assert world.remaining() == world.budget - 120_000  # the whole ttl is reserved at the decision
    world.clock.now += 10.2
    world.process.gated.release(world.trainer, "ft-1")
    released = world.process.entries()[-1]
    assert released.budget_delta == 2 * 11 * 1_000  # 10.2 s is charged as 11 s
    assert world.spent() == 22_000 and world.remaining() == world.budget - 22_000


def test_a_renewal_reserves_the_time_it_adds_and_is_refused_when_the_budget_cannot_pay(store: Store) -> None:
    world = World(store.url, budget=200_000)
    try:
        gated = world.process.gated
        gated.submit(world.trainer, lease("ft-1"))  # reserves 120,000 for t=1000..1060
        world.clock.now += 30
        gated.renew(world.trainer, "ft-1")  # now until t=1090: 30 s more, 60,000
        assert world.remaining() == 200_000 - 180_000
        world.clock.now += 20
        with pytest.raises(Denied, match="budget exhausted"):  # 20 s more would cost 40,000
            gated.renew(world.trainer, "ft-1")
        assert world.remaining() == 20_000  # the refused renewal reserved nothing
        world.clock.now += 100  # the lease ends at t=1090 as it stood
        gated.advance()
        expired = world.process.entries()[-1]
        assert (expired.status, expired.budget_delta) == ("lease_expired", 180_000)
        assert world.spent() == 180_000
        assert world.process.gate.verify().ok
    finally:
        world.process.gate.close()


def test_a_renewal_behind_an_approval_gate_is_not_asked_again_but_still_pays(store: Store) -> None:
    world = World(store.url, budget=200_000, approvals="big: {resource: gpu:h100, approvers: [boss]}")
    try:
        gated = world.process.gated
        asked = gated.submit(world.trainer, lease("ft-1"))
        assert asked.needs_approval and world.remaining() == 200_000  # nothing reserved yet
        approval = Approval.sign(asked.authorization.approval_payload(), world.keys["boss"])
        assert gated.submit(world.trainer, lease("ft-1"), approval=approval).allowed
        assert world.remaining() == 80_000
        world.clock.now += 30
        gated.renew(world.trainer, "ft-1")  # 30 s more: 60,000
        assert world.remaining() == 20_000
        world.clock.now += 20
        with pytest.raises(Denied, match="budget exhausted"):  # 20 s more: 40,000
            gated.renew(world.trainer, "ft-1")
        refused = world.process.entries()[-1]  # decided as any renewal is, gate or none (review r38)
        assert (refused.kind, refused.status, refused.budget_delta) == ("deny", None, 0)
        assert world.remaining() == 20_000
        world.clock.now += 10
        gated.release(world.trainer, "ft-1")  # held 60 s
        assert world.process.entries()[-1].budget_delta == 120_000 and world.spent() == 120_000
    finally:
        world.process.gate.close()


def test_a_preempted_lease_pays_until_its_grace_ends_not_until_the_broker_notices(world: World) -> None:
    gated = world.process.gated
    gated.submit(world.trainer, lease("low", gpus=8, grace_s=20))  # 480,000 reserved
    world.clock.now += 10
    high = gated.submit(world.trainer, lease("high", gpus=8, priority=1))  # notice: low ends by t=1030
    assert high.allowed and high.lease() is None
    world.clock.now += 1000  # the broker notices long after the grace ended
    gated.advance()
    preempted = next(e for e in world.process.entries() if e.status == "lease_preempted")
    assert preempted.budget_delta == 8 * 30 * 1_000  # held t=1000..1030


def test_a_type_the_policy_does_not_price_is_leased_free_of_charge(store: Store) -> None:
    world = World(store.url, gpus=UNPRICED)
    try:
        world.process.gated.submit(world.trainer, lease("ft-1"))
        world.clock.now += 50
        world.process.gated.release(world.trainer, "ft-1")
        assert world.process.entries()[-1].budget_delta == 0
        assert world.remaining() == world.budget and world.spent() == 0
    finally:
        world.process.gate.close()


def test_a_request_that_times_out_in_the_queue_gets_its_reservation_back(world: World) -> None:
    gated = world.process.gated
    assert gated.submit(world.trainer, lease("all", gpus=8)).lease() is not None  # 480,000 reserved
    waiting = gated.submit(world.trainer, lease("late", gpus=1, timeout_s=10))
    assert waiting.allowed and waiting.lease() is None
    assert world.remaining() == world.budget - 480_000 - 60_000
    world.clock.now += 20
    gated.advance()
    timed_out = world.process.entries()[-1]
    assert (timed_out.status, timed_out.ref, timed_out.budget_delta) == (
        "lease_timed_out",
        waiting.authorization.audit_index,
        0,
    )
    assert world.remaining() == world.budget - 480_000


def test_reconcile_charges_a_granted_lease_the_restored_broker_lost_its_whole_reservation(
    world: World,
) -> None:
    """The time a lost lease was held is not known; one that was granted may have held its GPUs
    until its expiry, so it is charged what was reserved for it (review R42: until then it was
    returned whole, and a lease whose end was lost was never charged)."""
    spent_before = world.spent()
    decision = world.process.gated.submit(world.trainer, lease("ft-1")).authorization.audit_index
    assert any(e.status == "lease_granted" and e.ref == decision for e in world.process.entries())
    with world.process.store.transaction() as tx:  # the journal loses the lease (a write before it)
        tx.execute("DELETE FROM broker_leases")
    after = world.restart()
    assert after.broker.leases() == []
    assert after.gated.reconcile() == ["ft-1"]
    lost = after.entries()[-1]
    assert (lost.status, lost.ref, lost.budget_delta) == ("lease_lost", decision, 120_000)
    assert "reservation charged" in lost.reasons[0]
    assert world.remaining() == world.budget - 120_000 and after.gated.decisions.all() == []
    assert world.spent() - spent_before == 120_000  # charged, not left reserved
    assert after.gated.submit(world.trainer, lease("ft-1")).allowed  # the id is free again
    assert after.gated.reconcile() == []
    assert after.gate.verify().ok


def test_reconcile_returns_the_reservation_of_a_waiting_request_the_restored_broker_lost(
    world: World,
) -> None:
    gated = world.process.gated
    spent_before = world.spent()
    assert gated.submit(world.trainer, lease("all", gpus=8)).lease() is not None
    waiting = gated.submit(world.trainer, lease("late", gpus=1, timeout_s=100))
    assert waiting.allowed and waiting.lease() is None
    with world.process.store.transaction() as tx:  # the journal loses both
        tx.execute("DELETE FROM broker_leases")
        tx.execute("DELETE FROM broker_queue")
    after = world.restart()
    assert sorted(after.gated.reconcile()) == ["all", "late"]
    ends = {e.ref: e for e in after.entries() if e.status == "lease_lost"}
    assert ends[waiting.authorization.audit_index].budget_delta == 0
    assert "never held GPUs" in ends[waiting.authorization.audit_index].reasons[0]
    assert world.remaining() == world.budget - 480_000  # the granted one is charged, not the other
    assert world.spent() - spent_before == 480_000


def test_a_priced_gpu_call_without_a_count_or_time_is_an_input_error_and_records_nothing(
    world: World,
) -> None:
    gate = world.process.gate
    with pytest.raises(InputError, match="cannot be priced"):
        gate.authorize(world.trainer, Call("gpu:h100", "lease", {"count": 1}))
    assert world.process.entries() == []


@pytest.mark.parametrize(
    ("gpus", "seconds", "price", "cost"),
    [
        (1, 1, 3_600_000, 1_000),
        (1, 0.2, 3_600_000, 1_000),  # the time rounds up to a whole second
        (3, 1, 1, 1),  # the amount rounds up to a whole micro-dollar
        (2, 0, 3_600_000, 0),
        (8, 10**9, 10**12, 2_222_222_222_222_222_223),  # exact far beyond 2**53
    ],
)
def test_lease_cost_is_exact_integer_arithmetic_rounded_up(
    gpus: int, seconds: float, price: int, cost: int
) -> None:
    assert lease_cost(gpus, seconds, price) == cost


@pytest.mark.parametrize("bad", [-1, float("inf"), float("nan"), True, "60"])
def test_lease_cost_refuses_a_time_that_is_not_one(bad: object) -> None:
    with pytest.raises(ValueError, match="seconds"):
        lease_cost(1, bad, 1)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("entry", "message"),
    [("  H100: {cost_per_gpu_hour: 1}", "canonical"), ("  h100: {cost_per_gpu_hour: -1}", "greater")],
)
def test_the_policy_refuses_a_gpu_type_that_is_no_resource_name_or_a_negative_price(
    entry: str, message: str
) -> None:
    keys = {n: SigningKey.generate().did for n in ("root", "trainer", "boss")}
    with pytest.raises(PolicyError, match=message):
        parse_policy(POLICY.format(gpus=entry, budget=1, **keys), source="gpu.yaml")


def test_the_leases_command_shows_the_decision_and_the_reservation_of_a_gated_lease(
    world: World, capsys: pytest.CaptureFixture[str]
) -> None:
    from agentgate.cli.main import main

    decision = world.process.gated.submit(world.trainer, lease("ft-1")).authorization.audit_index
    world.process.gate.flush()
    assert main(["broker", "leases", "--json", "--store", world.url]) == 0
    [shown] = json.loads(capsys.readouterr().out)["leases"]
    assert (shown["id"], shown["decision"], shown["cost_per_gpu_hour"]) == ("ft-1", decision, 3_600_000)
    assert shown["reserved"]["usd_micros"] == 120_000  # 2 GPUs x 60 s x 1,000 micro-dollars
    assert main(["broker", "leases", "--store", world.url]) == 0
    assert f"audit #{decision}" in capsys.readouterr().out


def test_withdrawing_a_waiting_request_returns_its_reservation_and_audits_it(world: World) -> None:
    """A waiting request released by its holder emitted no event: its reservation stayed held,
    its decision row stayed, and nothing was audited (reconcile() would later call it lost)."""
    gated = world.process.gated
    assert gated.submit(world.trainer, lease("all", gpus=8)).lease() is not None  # 480,000 reserved
    waiting = gated.submit(world.trainer, lease("late", gpus=1, timeout_s=100))
    assert waiting.allowed and waiting.lease() is None
    assert world.remaining() == world.budget - 480_000 - 60_000
    events = gated.release(world.trainer, "late")
    assert [type(e).__name__ for e in events] == ["Withdrawn"]
    assert gated.decisions.get("late") is None
    assert world.remaining() == world.budget - 480_000
    last = world.process.entries()[-1]
    assert (last.kind, last.status, last.ref) == (
        "outcome",
        "request_withdrawn",
        waiting.authorization.audit_index,
    )
    assert gated.submit(world.trainer, lease("late", gpus=1, timeout_s=100)).allowed  # its id is free again
    assert world.process.gate.verify().ok
