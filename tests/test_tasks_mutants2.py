"""Review r47 (mutation, tasks, second pass): five survivors of tests/test_broker_and_tasks_mutants.py.

Each test pins a rule that a hand-made mutant of agentgate/tasks/_sync.py or
agentgate/dispatch/broker/ survived the earlier suites with; the mutant it kills is named in its
docstring. Real components only: the sync scheduler on real threads, the broker in simulated
time, the gated broker over a real Gate and SQLite store.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentgate.dispatch.broker import (
    Broker,
    GangRequest,
    GatedBroker,
    TenantQuota,
    TopologyConstraint,
    WorkloadHint,
    synthetic_topology,
)
from agentgate.errors import BrokerError, DeadlineExceeded
from agentgate.gate import AgentIdentity, Gate
from agentgate.keys import SigningKey
from agentgate.policy import parse_policy
from agentgate.store import SQLiteStore
from agentgate.tasks import Attempt, SchedulerConfig, SyncScheduler, ToolCall, ToolLimits


def _wait_until(predicate: object, timeout: float = 10.0) -> None:
    end = time.monotonic() + timeout
    while not predicate():  # type: ignore[operator]
        assert time.monotonic() < end, "condition not reached"
        time.sleep(0.002)


# --- the sync scheduler: a joined twin's failure, a slot granted after the deadline -----------------


class ToolFailed(Exception):
    pass


def test_a_sync_call_joining_a_failed_twin_raises_the_twins_error() -> None:
    """Mutant s2 (_sync.py _keyed: a joined twin's error dropped, its result None returned).

    A call that joins a running twin with the same idempotency key shares its outcome: when the
    twin fails, the joined call raises that error; a failed call never looks like it succeeded.
    """
    started = threading.Event()
    release = threading.Event()
    runs: list[int] = []
    failure = ToolFailed("the charge was declined")

    def tool(attempt: Attempt) -> str:
        runs.append(attempt.number)
        started.set()
        release.wait(10)
        raise failure

    call = ToolCall("pay", arguments={"amount": 10}, run_id="r1", call_id="c1")
    outcomes: dict[str, object] = {}

    def submit(name: str) -> None:
        try:
            outcomes[name] = ("returned", scheduler.submit(call, tool))
        except Exception as exc:
            outcomes[name] = ("raised", exc)

    with SyncScheduler() as scheduler:
        first = threading.Thread(target=submit, args=("first",))
        first.start()
        assert started.wait(10)
        twin = threading.Thread(target=submit, args=("twin",))
        twin.start()
        _wait_until(lambda: scheduler.scheduler.metrics.count("reused", "pay") == 1)  # it joined
        release.set()
        first.join(10)
        twin.join(10)
    assert runs == [1]  # the tool ran once, for both
    assert outcomes["first"] == ("raised", failure)
    assert outcomes["twin"] == ("raised", failure)


def test_a_sync_call_granted_its_slot_after_its_deadline_never_starts() -> None:
    """Mutant s3 (_sync.py _attempts: the check of the deadline after admission dropped).

    The sync twin of test_tasks_explanations_and_breakers.py::test_a_call_granted_its_slot_after_its_deadline_
    never_starts: a waiter granted its slot in time whose thread only runs after the deadline
    (here: the releasing thread keeps the GIL past it) must not start; it raises
    DeadlineExceeded and gives the slot back.
    """
    for _ in range(3):  # a machine too loaded to set the scene up in time gets another go
        if _late_grant_scene():
            return
    pytest.fail("the machine was too slow to set the test up three times")


def _late_grant_scene() -> bool:
    """The scene of the test above; ``False`` when the waiter was not queued in time to show it."""
    config = SchedulerConfig(tools={"x": ToolLimits(concurrency=1)})
    ran: list[int] = []
    outcome: list[object] = []
    deadline = time.time() + 1.5
    in_time = True

    def tool(attempt: Attempt) -> str:
        ran.append(attempt.number)
        return "ran"

    def late_call() -> None:
        try:
            outcome.append(scheduler.submit(ToolCall("x", deadline=deadline), tool))
        except Exception as exc:
            outcome.append(exc)

    interval = sys.getswitchinterval()
    with SyncScheduler(config) as scheduler:
        late = threading.Thread(target=late_call)

        def hold(attempt: Attempt) -> str:
            nonlocal in_time
            late.start()
            _wait_until(lambda: scheduler.scheduler.queued == 1)  # it waits for the held slot
            in_time = time.time() < deadline - 0.3
            if in_time:
                # From here on this thread keeps the GIL (it never blocks): the waiter is granted
                # the slot when this attempt gives it back, before its deadline, yet its thread
                # runs after.
                sys.setswitchinterval(60.0)
            return "held"

        try:
            assert scheduler.submit(ToolCall("x"), hold) == "held"  # the slot goes to the waiter
            while in_time and time.time() < deadline + 0.05:
                pass  # busy, not sleeping: a sleep would hand the GIL to the waiter
            granted = (scheduler.scheduler.queued, scheduler.scheduler.in_flight)
        finally:
            sys.setswitchinterval(interval)
        late.join(10)
        if not in_time:
            return False
        assert granted == (0, 1)  # the waiter was granted in time; only its thread came late
        assert ran == []
        (error,) = outcome
        assert isinstance(error, DeadlineExceeded), error
        assert "could not start before the call's deadline" in str(error) and error.tool == "x"
        assert scheduler.scheduler.in_flight == 0 and scheduler.scheduler.queued == 0  # slot back
        assert scheduler.submit(ToolCall("x"), lambda a: "ok") == "ok"
    return True


# --- the broker: at most max_draining gangs drain ------------------------------------------------


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.mark.parametrize("max_draining", [1, 2])
def test_no_more_than_max_draining_gangs_drain_at_once(max_draining: int) -> None:
    """Mutant n18 (_broker.py _try_drain: ``>= max_draining`` made ``>``: one gang too many drains).

    At most ``max_draining`` gangs reserve GPUs by draining at once (docs/broker.md, Draining):
    the GPUs they reserve sit idle, so one more is idle capacity nobody allowed.
    """
    clock = FakeClock()
    topology = synthetic_topology(4, 8)
    tenants = ("a", "b", "c", "d", "e")
    broker = Broker(
        topology,
        [TenantQuota(t, len(topology)) for t in tenants],
        clock=clock,
        ttl_s=1000.0,
        grace_s=60.0,
        locality_wait_s=10_000.0,
        drain_after_s=0.0,
        max_draining=max_draining,
    )
    for n in range(4):  # every domain left with 3 free GPUs
        broker.submit(GangRequest(f"f{n}", "a", 5, topology=TopologyConstraint("nvlink_domain")))
    assert broker.free_gpus() == 12
    for tenant in tenants[1:]:  # four gangs, each waiting for 4 GPUs in one domain
        broker.submit(GangRequest(f"comm-{tenant}", tenant, 4, hint=WorkloadHint(bound="communication")))
    clock.now = 1.0
    broker.advance()
    queue = broker.queue()
    assert len(queue) == 4
    assert sum(q.draining for q in queue) == max_draining
    assert broker.free_gpus() == 12 - 3 * max_draining  # each drain reserves its domain's 3 free


# --- the gated broker: a lease never outlives its grant ------------------------------------------

POLICY = """
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
    text = POLICY.format(**{n: k.did for n, k in keys.items()})
    gate = Gate(parse_policy(text, source="gpu.yaml"), SQLiteStore(tmp_path / "agentgate.db"))
    clock = FakeClock()
    broker = Broker(synthetic_topology(nodes=2, gpus_per_node=8), [TenantQuota("team-a", 16)], clock=clock)
    identity = gate.issue(keys["root"], name="trainer", key=keys["trainer"], role="trainer")
    yield GatedBroker(gate, broker), identity
    gate.close()


def test_a_lease_ttl_just_past_the_grants_expiry_is_refused(gated: tuple[GatedBroker, AgentIdentity]) -> None:
    """Mutant n19 (_gated.py _outlived: ``ttl_s <= left`` made ``ttl_s <= left + 60``).

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
