"""Gate.run / arun / close: a completed result is reused only for the same caller's call, a tool
that never receives its idempotency key is not repeated after an ambiguous failure, every allowed
call that runs gets its outcome (also when close() comes while calls wait or run, and when the
caller's own callbacks raise). Real SQLite files, threads and event loops."""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentgate.audit.entry import AuditEntry
from agentgate.capabilities import Call
from agentgate.errors import SchedulingError
from agentgate.gate import Gate
from agentgate.keys import SigningKey
from agentgate.policy import parse_policy
from agentgate.store import SQLiteStore
from agentgate.tasks import argument_digest, idempotency_key

WAIT_S = 5.0

TWO_TENANTS = """
version: 1
trust_anchors:
  root: {{did: "{root}"}}
tenants:
  acme: {{}}
  globex: {{}}
principals:
  alice-bot: {{kind: agent, did: "{alice}", tenant: acme, roles: [reader]}}
  mallory-bot: {{kind: agent, did: "{mallory}", tenant: globex, roles: [reader]}}
tools:
  orders:
    args: {{}}
    idempotent: true
    concurrency: 1
  refund:
    args: {{amount: {{type: integer, required: true}}}}
    takes_idempotency_key: true
    retry: {{attempts: 3, retry_on: [timeout], backoff_initial_s: 0, backoff_max_s: 0}}
roles:
  reader:
    kind: agent
    capabilities:
      - resource: tool:orders
      - resource: tool:refund
    budget: {{limit: 10, unit: calls}}
    ttl_s: 600
"""


class TwoTenants:
    def __init__(self, path: Path) -> None:
        self.keys = {n: SigningKey.generate() for n in ("root", "alice", "mallory")}
        text = TWO_TENANTS.format(**{n: k.did for n, k in self.keys.items()})
        self.path = path / "agentgate.db"
        self.gate = Gate(parse_policy(text, source="two.yaml"), SQLiteStore(self.path))
        root = self.keys["root"]
        self.alice = self.gate.issue(root, name="alice-bot", key=self.keys["alice"], role="reader")
        self.mallory = self.gate.issue(root, name="mallory-bot", key=self.keys["mallory"], role="reader")

    def entries(self) -> list[AuditEntry]:
        """Every audit entry, read from the database file (also after the gate closed)."""
        with contextlib.closing(sqlite3.connect(self.path)) as conn:
            rows = conn.execute("SELECT entry FROM audit_log ORDER BY idx").fetchall()
        return [AuditEntry.from_bytes(bytes(r[0])) for r in rows]

    def outcomes(self) -> dict[int, AuditEntry]:
        """Outcome entries by the audit index of the decision they settle (pending ones committed)."""
        self.gate.flush()  # nothing is pending after close(): then a no-op
        return {e.ref: e for e in self.entries() if e.kind == "outcome" and e.ref is not None}


@pytest.fixture
def two(tmp_path: Path) -> Iterator[TwoTenants]:
    made = TwoTenants(tmp_path)
    yield made
    made.gate.close()


def test_a_completed_result_is_not_reused_for_another_tenants_call(two: TwoTenants) -> None:
    # Thread ids ("1") and tool-call ids ("call_0_0") repeat across agents: the key is scoped by
    # tenant, principal and grant, so globex's allowed call runs its own tool.
    gate = two.gate
    a = gate.authorize(two.alice, Call.tool("orders", {}), call_id="call_0_0")
    m = gate.authorize(two.mallory, Call.tool("orders", {}), call_id="call_0_0")
    assert a.allowed and m.allowed
    assert gate.run(a, lambda: "acme's orders", call_id="call_0_0", run_id="1") == "acme's orders"
    ran: list[str] = []

    def mallory_tool() -> str:
        ran.append("globex")
        return "globex's orders"

    assert gate.run(m, mallory_tool, call_id="call_0_0", run_id="1") == "globex's orders"
    assert ran == ["globex"]
    # The same caller's call is still reused (a resumed run in the same process): listing orders
    # is idempotent, so it may be decided again (a tool that is not runs once: test_gate.py).
    again = gate.authorize(two.alice, Call.tool("orders", {}), call_id="call_0_0")
    assert gate.run(again, lambda: "ran twice", call_id="call_0_0", run_id="1") == "acme's orders"


def test_a_tool_calls_idempotency_key_is_scoped_to_its_caller_and_grant(two: TwoTenants) -> None:
    # The gate hands the scheduler the digest the authority engine computed for the decision;
    # the key is the scheduler's own over it, scoped by tenant, principal and grant.
    auth = two.gate.authorize(two.alice, Call.tool("refund", {"amount": 3}), call_id="c1")
    assert auth.allowed
    call = two.gate._tool_call(auth, "c1", "run-1")
    assert call.idempotency_key() == idempotency_key(
        "run-1",
        "refund",
        "c1",
        argument_digest({"amount": 3}),
        tenant="acme",
        principal="alice-bot",
        grant=two.alice.grant_id,
    )


def test_a_tool_that_never_receives_the_idempotency_key_is_not_repeated_after_a_timeout(
    two: TwoTenants,
) -> None:
    # Gate.run calls fn() without the Attempt, so the key never reaches the tool: after an
    # ambiguous failure it is not repeated, whatever retry_on says (a refund is paid once).
    gate = two.gate
    auth = gate.authorize(two.alice, Call.tool("refund", {"amount": 10}), call_id="c1")
    assert auth.allowed
    paid: list[int] = []

    def refund() -> str:
        paid.append(10)  # the effect happened ...
        raise TimeoutError("psp did not answer in time")  # ... but the answer was lost

    with pytest.raises(TimeoutError):
        gate.run(auth, refund, call_id="c1", run_id="r1")
    assert paid == [10]
    gate.flush()
    assert two.outcomes()[auth.audit_index].status == "error"  # type: ignore[index]


async def test_arun_does_not_repeat_a_keyed_tool_after_a_timeout(two: TwoTenants) -> None:
    gate = two.gate
    auth = await gate.to_thread(gate.authorize, two.alice, Call.tool("refund", {"amount": 10}), call_id="c2")
    paid: list[int] = []

    async def refund() -> str:
        paid.append(10)
        raise TimeoutError("psp did not answer in time")

    with pytest.raises(TimeoutError):
        await gate.arun(auth, refund, call_id="c2", run_id="r1")
    assert paid == [10]


def test_a_spent_callback_that_raises_leaves_an_error_outcome_charged_as_reserved(
    two: TwoTenants,
) -> None:
    gate = two.gate
    auth = gate.authorize(two.alice, Call.tool("orders", {}), call_id="x1")
    assert auth.allowed

    def unreadable(_result: object) -> tuple[int, int]:
        raise KeyError("usage")

    with pytest.raises(KeyError):
        gate.run(auth, lambda: "ran", spent=unreadable)
    outcome = two.outcomes()[auth.audit_index]  # type: ignore[index]
    assert outcome.status == "error" and "KeyError" in outcome.reasons
    assert any("charged as reserved" in r for r in outcome.reasons)
    assert gate.remaining(two.alice) == {two.alice.grant_id: (1, 10)}  # the call ran: charged

    # Control: a tool that fails is released, not charged.
    failing = gate.authorize(two.alice, Call.tool("orders", {}), call_id="x2")
    with pytest.raises(RuntimeError):
        gate.run(failing, lambda: (_ for _ in ()).throw(RuntimeError("down")))
    assert gate.remaining(two.alice) == {two.alice.grant_id: (1, 10)}


def test_a_failed_callback_that_raises_leaves_an_outcome(two: TwoTenants) -> None:
    gate = two.gate
    auth = gate.authorize(two.alice, Call.tool("orders", {}), call_id="x3")

    def unreadable(_result: object) -> bool:
        raise ValueError("cannot tell")

    with pytest.raises(ValueError):
        gate.run(auth, lambda: "ran", failed=unreadable)
    assert two.outcomes()[auth.audit_index].status == "error"  # type: ignore[index]


def test_gate_close_refuses_a_waiting_async_call_and_records_every_outcome(two: TwoTenants) -> None:
    # An async call queued behind a running sync call (one SharedLimits, concurrency 1): close()
    # refuses it (it never runs), waits for the sync call to settle, then commits both outcomes.
    gate = two.gate
    release, sync_started = threading.Event(), threading.Event()
    a = gate.authorize(two.alice, Call.tool("orders", {}), call_id="s1")
    m = gate.authorize(two.mallory, Call.tool("orders", {}), call_id="a1")
    late = gate.authorize(two.mallory, Call.tool("orders", {}), call_id="a2")
    assert a.allowed and m.allowed and late.allowed

    def slow() -> str:
        sync_started.set()
        assert release.wait(WAIT_S)
        return "sync"

    sync_thread = threading.Thread(target=lambda: gate.run(a, slow), daemon=True)
    sync_thread.start()
    assert sync_started.wait(WAIT_S)
    loop = asyncio.new_event_loop()
    loop_thread = threading.Thread(target=loop.run_forever, daemon=True)
    loop_thread.start()
    async_ran: list[bool] = []

    async def tool() -> str:
        async_ran.append(True)
        return "async"

    try:
        pending = asyncio.run_coroutine_threadsafe(gate.arun(m, tool), loop)
        for _ in range(500):
            if gate._limits.queued == 1:
                break
            threading.Event().wait(0.01)
        assert gate._limits.queued == 1
        closer = threading.Thread(target=gate.close, daemon=True)
        closer.start()
        with pytest.raises(SchedulingError):
            pending.result(WAIT_S)
        assert closer.is_alive()  # still waiting for the running sync call
        release.set()
        closer.join(WAIT_S)
        sync_thread.join(WAIT_S)
        assert not closer.is_alive()
    finally:
        release.set()
        loop.call_soon_threadsafe(loop.stop)
        loop_thread.join(WAIT_S)
        loop.close()
    outcomes = two.outcomes()
    assert async_ran == []
    assert outcomes[a.audit_index].status == "ok"  # type: ignore[index]
    assert outcomes[m.audit_index].status == "error"  # type: ignore[index]
    assert outcomes[m.audit_index].reasons == ("SchedulingError",)  # type: ignore[index]
    with pytest.raises(SchedulingError):  # an allow run after close: refused, nothing runs
        gate.run(late, lambda: async_ran.append(False))
    assert async_ran == []


def test_gate_close_waits_for_a_sync_call_to_settle(two: TwoTenants) -> None:
    # The caller's `failed` callback runs after the tool returned; close() waits for it.
    gate = two.gate
    auth = gate.authorize(two.alice, Call.tool("orders", {}), call_id="s1")
    running, release = threading.Event(), threading.Event()

    def tool() -> str:
        running.set()
        assert release.wait(WAIT_S)
        return "ok"

    def failed(_result: str) -> bool:
        threading.Event().wait(0.2)
        return False

    caller = threading.Thread(target=lambda: gate.run(auth, tool, failed=failed), daemon=True)
    caller.start()
    assert running.wait(WAIT_S)
    closer = threading.Thread(target=gate.close, daemon=True)
    closer.start()
    threading.Event().wait(0.1)
    release.set()
    closer.join(WAIT_S)
    caller.join(WAIT_S)
    assert not closer.is_alive()
    assert two.outcomes()[auth.audit_index].status == "ok"  # type: ignore[index]


def test_gate_close_is_bounded_when_a_call_does_not_settle(two: TwoTenants) -> None:
    gate = two.gate
    auth = gate.authorize(two.alice, Call.tool("orders", {}), call_id="h1")
    running, release = threading.Event(), threading.Event()

    def hung() -> str:
        running.set()
        release.wait(WAIT_S)
        return "late"

    caller = threading.Thread(target=lambda: gate.run(auth, hung), daemon=True)
    caller.start()
    assert running.wait(WAIT_S)
    try:
        gate.close(timeout_s=0.1)  # returns although the call still runs
        assert caller.is_alive()
    finally:
        release.set()
        caller.join(WAIT_S)


async def test_gate_close_from_a_loop_does_not_wait_for_that_loops_own_calls(two: TwoTenants) -> None:
    # An arun of the loop that calls close() cannot progress while close() blocks that loop:
    # close() must not wait the whole timeout for it.
    gate = two.gate
    auth = await gate.to_thread(gate.authorize, two.alice, Call.tool("orders", {}), call_id="l1")
    started, release = asyncio.Event(), asyncio.Event()

    async def tool() -> str:
        started.set()
        await release.wait()
        return "done"

    task = asyncio.create_task(gate.arun(auth, tool))
    await started.wait()
    began = time.monotonic()
    gate.close(timeout_s=150.0)
    assert time.monotonic() - began < 30.0  # not the whole timeout; it would take 150 s
    release.set()
    assert await task == "done"  # the call still finishes; its outcome is logged as lost
