"""Several real processes on one store (review R58): an approval presented by two workers at
once runs its call once (also one LangGraph interrupt resumed by two workers from one SqliteSaver
or PostgresSaver checkpoint, and a quorum of two answered in two processes), a policy quota and a
budget of calls at their edge are never passed by processes deciding together, the last slot of a
shared concurrency limit and the last GPU of two brokers restored from one saved state go to one
process, a broker killed holding a lease leaves it journaled until its TTL, and a process killed
between its decision and its outcome leaves a log that verifies and a reservation held.

Each worker is a fork of a fork server that imported agentgate once (``_forked.Worker``, as in
tests/test_store_multiprocess.py); the workers open the store themselves, say they are ready,
wait for a start file, act and write one JSON line.
"""

from __future__ import annotations

import contextlib
import json
import multiprocessing.connection
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _forked import Worker

from agentgate.capabilities import Call
from agentgate.cli.main import main
from agentgate.gate import AgentIdentity, Approval, Gate
from agentgate.keys import SigningKey
from agentgate.policy import parse_policy
from agentgate.store import open_store

POLICY = """
version: 1
trust_anchors: {{root: {{did: "{root}"}}}}
principals:
  agent: {{kind: agent, did: "{agent}", roles: [worker, pinger]}}
  alice: {{kind: human, did: "{alice}"}}
  bob: {{kind: human, did: "{bob}"}}
tools:
  pay:
    args: {{amount: {{type: integer, required: true}}}}
  lookup:
    args: {{id: {{type: string, required: true}}}}
    idempotent: true
  count:
    args: {{n: {{type: integer, required: true}}}}
    idempotent: true
  ping:
    args: {{n: {{type: integer, required: true}}}}
    idempotent: true
  wire:
    args: {{amount: {{type: integer, required: true}}}}
roles:
  worker:
    kind: agent
    capabilities: [{{resource: tool:pay}}, {{resource: tool:lookup}}, {{resource: tool:count}}, {{resource: tool:wire}}]
    budget: {{limit: {calls}, unit: calls}}
    ttl_s: 600
  pinger:
    kind: agent
    capabilities: [{{resource: tool:ping}}]
    budget: {{limit: 1000, unit: calls}}
    ttl_s: 600
approvals:
  pay:
    resource: tool:pay
    approvers: [alice]
    expiry_s: 600
  lookup:
    resource: tool:lookup
    approvers: [alice]
    expiry_s: 600
  wire:
    resource: tool:wire
    approvers: [alice, bob]
    quorum: 2
    expiry_s: 600
quotas:
  three-pings-per-decade:
    principal: agent
    window_s: 315360000
    limit: 3
    resources: [tool:ping]
"""

CALLS = 4
"""The role ``worker``'s budget, in calls: the budget test spends it to its edge."""

WORKER = r"""
import json, os, signal, sys, time
from pathlib import Path

work, url, go, me = Path(sys.argv[1]), sys.argv[2], Path(sys.argv[3]), int(sys.argv[4])
extra = json.loads(sys.argv[5])

from agentgate.authority import parse_chain
from agentgate.capabilities import Call
from agentgate.gate import AgentIdentity, Approval, Gate
from agentgate.keys import SigningKey
from agentgate.policy import parse_policy
from agentgate.store import open_store

def wait_for_go():
    (work / f"ready-{go.name}-{me}").touch()  # set up: the test starts every worker at once
    deadline = time.monotonic() + 60
    while not go.exists():
        if time.monotonic() > deadline:
            raise SystemExit("no start signal")
        time.sleep(0.002)

if extra["mode"] == "broker":  # a broker restarted twice from one saved state: the last GPU
    from agentgate.dispatch.broker import Broker, GangRequest, Granted, TenantQuota, synthetic_topology
    from agentgate.errors import StoreError
    from agentgate.store.broker_leases import BrokerLeaseStore
    journal = BrokerLeaseStore(open_store(url))
    broker = Broker(synthetic_topology(1, 4), [TenantQuota("a", 4)], ttl_s=600, journal=journal)
    broker.restore(journal.load())
    wait_for_go()
    if extra.get("killed"):  # granted, journaled, and the broker process dies holding it
        events = broker.submit(GangRequest("held", "a", 1, holder="trainer"))
        assert any(isinstance(e, Granted) for e in events)
        os.kill(os.getpid(), signal.SIGKILL)
    try:
        events = broker.submit(GangRequest(f"last-{me}", "a", 1))
    except StoreError as exc:
        out = {"granted": False, "why": str(exc)}
    else:
        out = {"granted": any(isinstance(e, Granted) for e in events), "why": ""}
    print(json.dumps(out))
    sys.exit(0)

if extra["mode"] == "lease":  # the last slot of a shared concurrency limit, taken at once
    from agentgate.store.leases import LeaseManager
    leases = LeaseManager(open_store(url), ttl_s=60)
    wait_for_go()
    print(json.dumps({"got": leases.try_acquire("tool:pay", 2) is not None}), flush=True)
    os._exit(0)  # holding it: a lease not given back stays taken until its TTL

gate = Gate(parse_policy((work / "policy.yaml").read_text(), source="r58.yaml"), open_store(url))
name = extra.get("who", "agent")
agent = AgentIdentity(name, SigningKey(bytes.fromhex((work / f"{name}.seed").read_text())),
                      parse_chain((work / f"{name}.chain").read_text()))

def ran(label):
    # O_APPEND: each line is one write, whole, whatever the other processes write at once.
    fd = os.open(work / "ran", os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    os.write(fd, (label + "\n").encode())
    os.close(fd)
    return "done"

if extra["mode"] == "resume":  # the graph made before the start: both resume at once
    import sqlite3
    from langchain_core.messages import ToolMessage
    from langchain_core.tools import StructuredTool
    from langgraph.checkpoint.sqlite import SqliteSaver
    from langgraph.types import Command
    sys.path.insert(0, extra["tests"])
    from test_gate_once import scripted_payer

    def pay(amount: int) -> str:
        done = ran(f"{me}")
        # Paid, its result not yet checkpointed: held here until the test releases it, so the
        # other process resumes from the checkpoint of the interrupt meanwhile.
        deadline = time.monotonic() + 60
        while not (work / "release").exists() and time.monotonic() < deadline:
            time.sleep(0.005)
        return done

    tool = StructuredTool.from_function(pay, name="pay", description="pay")
    if url.startswith("postgresql"):
        from langgraph.checkpoint.postgres import PostgresSaver
        conn = PostgresSaver.from_conn_string(url)
        saver = conn.__enter__()
    else:
        conn = sqlite3.connect(work / "checkpoints.sqlite", check_same_thread=False)
        saver = SqliteSaver(conn)
    graph = scripted_payer(gate, tool, saver)

out = {}
wait_for_go()
if extra["mode"] == "approved":
    call = Call.tool(extra["tool"], extra["args"])
    auth = gate.authorize(agent, call, call_id=extra["call_id"], run_id=extra["run_id"],
                          approval=Approval.parse(extra["approval"]))
    if auth.allowed:
        gate.run(auth, lambda: ran(f"{me}"), call_id=extra["call_id"], run_id=extra["run_id"])
    out = {"allowed": auth.allowed, "why": auth.explain()}
elif extra["mode"] == "calls":
    allowed = 0
    for i in range(extra["n"]):
        call = Call.tool(extra["tool"], {"n": i})
        auth = gate.authorize(agent, call, call_id=f"w{me}-{i}", run_id=f"run-{me}")
        if auth.allowed:
            gate.run(auth, lambda: ran(f"{me}-{i}"), call_id=f"w{me}-{i}", run_id=f"run-{me}")
            allowed += 1
    out = {"allowed": allowed}
elif extra["mode"] == "resume":
    result = graph.invoke(Command(resume=extra["approval"]), {"configurable": {"thread_id": "t-1"}},
                          context=agent)
    told = [str(m.content) for m in result.get("messages", []) if isinstance(m, ToolMessage)]
    out = {"told": told, "interrupted": bool(result.get("__interrupt__"))}
    conn.__exit__(None, None, None) if url.startswith("postgresql") else conn.close()
elif extra["mode"] == "killed":
    call = Call.tool("count", {"n": 1})
    auth = gate.authorize(agent, call, call_id="k1", run_id="run-killed")
    assert auth.allowed, auth.explain()
    Path(extra["decided"]).write_text(str(auth.audit_index))
    os.kill(os.getpid(), signal.SIGKILL)  # after the reservation, before the outcome
gate.close()
print(json.dumps(out))
"""


class Shared:
    """One store (SQLite file or PostgreSQL database), its policy and identities in ``work``."""

    def __init__(self, work: Path, url: str) -> None:
        self.work, self.url = work, url
        self.keys = {n: SigningKey.generate() for n in ("root", "agent", "alice", "bob")}
        text = POLICY.format(calls=CALLS, **{n: k.did for n, k in self.keys.items()})
        (work / "policy.yaml").write_text(text)
        with self.gate() as gate:
            agent = gate.issue(self.keys["root"], name="agent", key=self.keys["agent"], role="worker")
            pinger = gate.issue(self.keys["root"], name="pinger", key=self.keys["agent"], role="pinger")
        self.agent = agent
        self._save("agent", agent)
        self._save("pinger", pinger)

    def _save(self, name: str, identity: AgentIdentity) -> None:
        (self.work / f"{name}.seed").write_text(self.keys["agent"].seed.hex())
        (self.work / f"{name}.chain").write_text(identity.chain.token)

    def gate(self) -> Gate:
        text = (self.work / "policy.yaml").read_text()
        return Gate(parse_policy(text, source="r58.yaml"), open_store(self.url))

    def run(self, extras: list[dict[str, Any]], *, expect_exit: int = 0) -> list[dict[str, Any]]:
        """One worker per ``extras`` item, released at once; their JSON results."""
        return self.finish(self.start(extras), expect_exit=expect_exit)

    def start(self, extras: list[dict[str, Any]]) -> list[Worker]:
        """One worker per ``extras`` item, released at once (``finish`` waits for them)."""
        go = self.work / f"go-{time.monotonic_ns()}"
        started = [
            Worker(self.work, WORKER, [str(self.work), self.url, str(go), str(me), json.dumps(extra)])
            for me, extra in enumerate(extras)
        ]
        deadline = time.monotonic() + 120
        while not all((self.work / f"ready-{go.name}-{me}").exists() for me in range(len(extras))):
            assert time.monotonic() < deadline and all(p.poll() is None for p in started), [
                p.stderr()[-2000:] for p in started if p.poll() is not None
            ]
            time.sleep(0.005)
        go.touch()
        return started

    def finish(self, started: list[Worker], *, expect_exit: int = 0) -> list[dict[str, Any]]:
        """Wait for the workers ``start`` started; their JSON results."""
        results = []
        for process in started:
            code = process.wait()
            assert code == expect_exit, f"worker exit {code}: {process.stderr()[-3000:]}"
            lines = process.stdout().strip().splitlines()
            results.append(json.loads(lines[-1]) if lines else {})
        return results

    def ran(self) -> list[str]:
        path = self.work / "ran"
        return path.read_text().splitlines() if path.exists() else []


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def shared(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Shared]:
    if request.param == "sqlite":
        url = str(tmp_path / "agentgate.db")
    else:
        url = request.getfixturevalue("postgres_url")
    yield Shared(tmp_path, url)


@pytest.mark.parametrize("tool", ["pay", "lookup"])
def test_one_approval_presented_by_two_processes_at_once_runs_its_call_once(
    shared: Shared, tool: str
) -> None:
    """Review R58: an approval answered once and presented by two workers at the same moment
    must allow one of them; the other is refused as used (``lookup`` is idempotent: only the
    approval's single use stands between it and a second run)."""
    args = {"amount": 40} if tool == "pay" else {"id": "o-1"}
    call = Call.tool(tool, args)
    with shared.gate() as gate:
        asked = gate.authorize(shared.agent, call, call_id="c1", run_id="thread-1|tools:t1")
        assert asked.needs_approval
        approval = Approval.sign(dict(asked.request or {}), shared.keys["alice"]).to_dict()
    extra = {"mode": "approved", "tool": tool, "args": args, "call_id": "c1", "run_id": "thread-1|tools:t1"}
    results = shared.run([{**extra, "approval": approval}] * 2)
    assert sorted(r["allowed"] for r in results) == [False, True], results
    assert len(shared.ran()) == 1
    (refused,) = [r for r in results if not r["allowed"]]
    assert "used" in refused["why"] or "runs once" in refused["why"], refused["why"]
    with shared.gate() as gate:
        assert gate.verify().ok


def test_two_approvers_answering_in_two_processes_at_once_complete_the_quorum_once(
    shared: Shared,
) -> None:
    """Review R58: a quorum of two, each approver's yes presented by its own process at the same
    moment: both votes count (the request never stays pending with both in), the call runs once,
    and the other process is told it still needs approval or that the approval was used."""
    args = {"amount": 7}
    with shared.gate() as gate:
        asked = gate.authorize(
            shared.agent, Call.tool("wire", args), call_id="w1", run_id="thread-1|tools:t1"
        )
        assert asked.needs_approval
        payload = dict(asked.request or {})
    extra = {"mode": "approved", "tool": "wire", "args": args, "call_id": "w1", "run_id": "thread-1|tools:t1"}
    results = shared.run(
        [
            {**extra, "approval": Approval.sign(payload, shared.keys[who]).to_dict()}
            for who in ("alice", "bob")
        ]
    )
    assert sorted(r["allowed"] for r in results) == [False, True], results
    assert len(shared.ran()) == 1
    with shared.gate() as gate:
        assert gate.approvals.open_records() == []
        assert gate.verify().ok


def test_one_langgraph_interrupt_resumed_by_two_processes_at_once_runs_its_tool_once(
    shared: Shared,
) -> None:
    """Review R58: two processes resume the same approval interrupt from one checkpoint
    (SqliteSaver file; PostgresSaver beside the PostgreSQL store) at once, with the same
    approval: the tool runs once, and the other run's model is told the call was refused.
    Review R58 defect: that refusal said only that the call's "process may have stopped while
    it ran", while it was running in the other process: it now says it may still be running."""
    import sqlite3

    from langchain_core.tools import StructuredTool
    from langgraph.checkpoint.sqlite import SqliteSaver
    from test_gate_once import scripted_payer

    tool = StructuredTool.from_function(lambda amount: "paid", name="pay", description="pay")
    with contextlib.ExitStack() as stack:
        gate = stack.enter_context(shared.gate())
        if shared.url.startswith("postgresql"):
            from langgraph.checkpoint.postgres import PostgresSaver

            saver: Any = stack.enter_context(PostgresSaver.from_conn_string(shared.url))
            saver.setup()
        else:
            conn = sqlite3.connect(shared.work / "checkpoints.sqlite", check_same_thread=False)
            stack.callback(conn.close)
            saver = SqliteSaver(conn)
        paused = scripted_payer(gate, tool, saver).invoke(
            {"messages": [{"role": "user", "content": "pay 40"}]},
            {"configurable": {"thread_id": "t-1"}},
            context=shared.agent,
            durability="sync",
        )
        approval = gate.approve(paused["__interrupt__"][0].value, shared.keys["alice"])
    tests = str(Path(__file__).resolve().parent)
    started = shared.start([{"mode": "resume", "approval": approval, "tests": tests}] * 2)
    # One process pays and is held in the tool; the other must end without paying.
    multiprocessing.connection.wait([worker.process.sentinel for worker in started], timeout=60)
    (shared.work / "release").touch()
    results = shared.finish(started)
    assert len(shared.ran()) == 1, (shared.ran(), results)
    told = sorted((text for r in results for text in r["told"]), key=lambda text: text != "done")
    assert told[0] == "done" and "agentgate refused tool:pay" in told[1], results
    assert "it may still be running in another process" in told[1], results
    with shared.gate() as gate:
        assert gate.verify().ok


def test_two_brokers_restarted_from_one_saved_state_never_both_grant_the_last_gpu(
    shared: Shared,
) -> None:
    """Review R58: two broker processes restore the same journaled state (3 of 4 GPUs leased)
    and each is asked for the last GPU at once: one grants it, the other's journal refuses
    (``StoreError``, "One writer" in store/broker_leases.py), never two grants."""
    from agentgate.dispatch.broker import Broker, GangRequest, TenantQuota, synthetic_topology
    from agentgate.store.broker_leases import BrokerLeaseStore

    store = open_store(shared.url)
    try:
        first = Broker(
            synthetic_topology(1, 4), [TenantQuota("a", 4)], ttl_s=600, journal=BrokerLeaseStore(store)
        )
        first.submit(GangRequest("three", "a", 3))
    finally:
        store.close()
    results = shared.run([{"mode": "broker"}] * 2)
    assert sorted(r["granted"] for r in results) == [False, True], results
    (refused,) = [r for r in results if not r["granted"]]
    assert "two brokers under one name would grant the same GPUs" in refused["why"], results
    store = open_store(shared.url)
    try:
        saved = BrokerLeaseStore(store).load()
        assert saved is not None and sum(len(lease.gpus) for lease in saved.leases) == 4
    finally:
        store.close()


def test_the_last_slot_of_a_shared_limit_taken_by_two_processes_at_once_goes_to_one(
    shared: Shared,
) -> None:
    """Review R58: a concurrency limit of 2 with one slot held, two processes take the last at
    once: one gets it (on SQLite as on PostgreSQL; tests/test_store_leases.py races processes
    on PostgreSQL only)."""
    from agentgate.store.leases import LeaseManager

    store = open_store(shared.url)
    held = LeaseManager(store, ttl_s=60)
    try:
        assert held.try_acquire("tool:pay", 2) is not None
        results = shared.run([{"mode": "lease"}] * 2)
        assert sorted(r["got"] for r in results) == [False, True], results
        assert len(held.rows("tool:pay")) == 2
    finally:
        held.close()
        store.close()


def test_a_broker_killed_holding_a_lease_leaves_it_journaled_until_it_expires(shared: Shared) -> None:
    """Review R58: a broker process SIGKILLed right after granting a lease: the broker restored
    from the store holds it (the last GPU is not granted again) until its TTL, then ends it as
    expired and grants the GPU to the request waiting for it."""
    from agentgate.dispatch.broker import (
        Broker,
        GangRequest,
        Granted,
        LeaseEnded,
        TenantQuota,
        synthetic_topology,
    )
    from agentgate.store.broker_leases import BrokerLeaseStore

    store = open_store(shared.url)
    try:
        first = Broker(
            synthetic_topology(1, 4), [TenantQuota("a", 4)], ttl_s=600, journal=BrokerLeaseStore(store)
        )
        first.submit(GangRequest("three", "a", 3))
        shared.run([{"mode": "broker", "killed": True}], expect_exit=-9)
        journal = BrokerLeaseStore(store)
        saved = journal.load()
        assert saved is not None and sorted(lease.id for lease in saved.leases) == ["held", "three"]
        now = [saved.taken_at + 1]
        restored = Broker(
            synthetic_topology(1, 4),
            [TenantQuota("a", 4)],
            ttl_s=600,
            journal=journal,
            clock=lambda: now[0],
        )
        restored.restore(saved)
        assert not [e for e in restored.submit(GangRequest("next", "a", 1)) if isinstance(e, Granted)]
        now[0] += 600  # nobody renewed "held" (nor "three")
        events = restored.advance()
        expired = {e.lease.id for e in events if isinstance(e, LeaseEnded) and e.reason == "expired"}
        assert "held" in expired
        assert [e.lease.id for e in events if isinstance(e, Granted)] == ["next"]
    finally:
        store.close()


def test_a_quota_at_its_edge_is_never_passed_by_processes_deciding_together(shared: Shared) -> None:
    """Review R58: a policy quota of 3 calls, 3 processes each asking for 2 at once: exactly 3 run."""
    results = shared.run([{"mode": "calls", "who": "pinger", "tool": "ping", "n": 2}] * 3)
    assert sum(r["allowed"] for r in results) == 3 and len(shared.ran()) == 3, results


def test_a_budget_of_calls_at_its_edge_is_never_passed_by_processes_deciding_together(
    shared: Shared,
) -> None:
    """Review R58: a budget of CALLS calls, 3 processes each asking for 2 at once: exactly CALLS run."""
    results = shared.run([{"mode": "calls", "tool": "count", "n": 2}] * 3)
    assert sum(r["allowed"] for r in results) == CALLS and len(shared.ran()) == CALLS, results
    with shared.gate() as gate:
        assert gate.ledger.remaining(shared.agent.chain.root.id) == 0
        assert gate.verify().ok


def test_a_process_killed_between_its_decision_and_its_outcome(shared: Shared) -> None:
    """Review R58: a worker SIGKILLed after its allow committed and before its outcome: the
    other processes see its reservation held (docs/operations.md: never an overspend), the log
    holds its allow and verifies, and the next decisions go on."""
    decided = shared.work / "decided"
    shared.run([{"mode": "killed", "decided": str(decided)}], expect_exit=-9)
    allow_index = int(decided.read_text())
    with shared.gate() as gate:
        root = shared.agent.chain.root.id
        assert gate.ledger.remaining(root) == CALLS - 1
        entries = list(gate.audit.entries())
        assert entries[allow_index].kind == "allow"
        assert not [e for e in entries if e.kind == "outcome"]
        assert gate.verify().ok
    assert main(["audit", "verify", "--store", shared.url]) == 0
    with shared.gate() as gate:
        after = gate.authorize(shared.agent, Call.tool("count", {"n": 2}), call_id="k2", run_id="run-2")
        assert after.allowed
        gate.run(after, lambda: "done", call_id="k2", run_id="run-2")
        gate.flush()
        assert gate.ledger.remaining(root) == CALLS - 2
        assert gate.verify().ok
