"""Gate.run / arun / close / abandon, and what a call's run settles: a completed result is reused
only for the same caller's call, a tool that never receives its idempotency key is not repeated
after an ambiguous failure, one allow runs once and only on the Gate that decided it, every allowed
call that runs gets its outcome (also when close() comes while calls wait or run, when the caller's
own callbacks raise, when a commit fails, and when the program never closes its Gate), and each call
is charged what it reported, its reservation released otherwise. Also the refusals an integration
records, on the same Gate. Real SQLite files, threads, event loops."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from agentgate.audit.entry import AuditEntry
from agentgate.capabilities import Call
from agentgate.errors import AgentGateError, Denied, InputError, SchedulingError
from agentgate.gate import AgentIdentity, Authorization, Gate
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
    assert gate.budget_usage(two.alice) == {two.alice.grant_id: (1, 10)}  # the call ran: charged

    # Control: a tool that fails is released, not charged.
    failing = gate.authorize(two.alice, Call.tool("orders", {}), call_id="x2")
    with pytest.raises(RuntimeError):
        gate.run(failing, lambda: (_ for _ in ()).throw(RuntimeError("down")))
    assert gate.budget_usage(two.alice) == {two.alice.grant_id: (1, 10)}


def test_a_failed_callback_that_raises_leaves_an_outcome(two: TwoTenants) -> None:
    gate = two.gate
    auth = gate.authorize(two.alice, Call.tool("orders", {}), call_id="x3")

    def unreadable(_result: object) -> bool:
        raise ValueError("cannot tell")

    with pytest.raises(ValueError):
        gate.run(auth, lambda: "ran", failed=unreadable)
    assert two.outcomes()[auth.audit_index].status == "error"  # type: ignore[index]


@pytest.mark.parametrize("arun", [False, True])
def test_a_paused_that_is_not_a_function_is_refused_before_the_allow_is_used(
    two: TwoTenants, arun: bool
) -> None:
    """Kills: ``run``/``arun`` took ``paused=True``; the call's ``ToolCall`` refuses it
    (``InputError``), and ``_fail`` then called ``True(exc)``: a TypeError, the outcome never
    recorded. Rule: ``InputError`` before anything is run or written, the allow still usable."""
    gate = two.gate
    auth = gate.authorize(two.alice, Call.tool("orders", {}), call_id="p1")
    ran: list[str] = []

    async def tool_async() -> str:
        ran.append("async")
        return "ran"

    with pytest.raises(InputError, match="paused must be a function of an exception or None"):
        if arun:
            asyncio.run(gate.arun(auth, tool_async, paused=True))  # type: ignore[arg-type]
        else:
            gate.run(auth, lambda: ran.append("sync"), paused=True)  # type: ignore[arg-type]
    assert ran == []
    assert auth.audit_index not in two.outcomes()
    assert gate.run(auth, lambda: "ran") == "ran"  # the allow was not used
    assert two.outcomes()[auth.audit_index].status == "ok"  # type: ignore[index]


@pytest.mark.parametrize("arun", [False, True])
@pytest.mark.parametrize(
    ("name", "value"),
    [("failed", True), ("failed", "yes"), ("spent", (10, 2)), ("spent", 12)],
    ids=["failed-True", "failed-text", "spent-a-tuple", "spent-a-number"],
)
def test_a_failed_or_spent_that_is_not_a_function_is_refused_before_the_allow_is_used(
    two: TwoTenants, arun: bool, name: str, value: object
) -> None:
    """Kills: ``run``/``arun`` checked ``paused=`` but took ``failed=True`` or ``spent=(10, 2)``
    (the usage itself, not a function reading it): the tool ran, then ``_finish`` called
    ``True(result)``, a TypeError, and the call was recorded as an ``error`` charged as
    reserved though it succeeded. Rule: ``InputError`` naming the argument before anything is
    run or written, the allow still usable."""
    gate = two.gate
    auth = gate.authorize(two.alice, Call.tool("orders", {}), call_id="f1")
    ran: list[str] = []

    async def tool_async() -> str:
        ran.append("async")
        return "ran"

    with pytest.raises(InputError, match=f"{name} must be a function"):
        if arun:
            asyncio.run(gate.arun(auth, tool_async, **{name: value}))  # type: ignore[arg-type]
        else:
            gate.run(auth, lambda: ran.append("sync"), **{name: value})  # type: ignore[arg-type]
    assert ran == []
    assert auth.audit_index not in two.outcomes()
    assert gate.run(auth, lambda: "ran") == "ran"  # the allow was not used
    assert two.outcomes()[auth.audit_index].status == "ok"  # type: ignore[index]


@pytest.mark.parametrize("arun", [False, True])
def test_a_paused_that_raises_leaves_the_tools_error_and_an_outcome(two: TwoTenants, arun: bool) -> None:
    """Kills: ``_fail`` called ``paused(exc)`` unguarded: a predicate that raised (IndexError on
    an exception without arguments) replaced the tool's error, and the call's outcome was never
    recorded (its reservation held, a once-only call left ``started``, as if its process had
    died). Rule: a raising ``paused`` says "not a pause"; the tool's error, an ``error`` outcome."""
    gate = two.gate
    auth = gate.authorize(two.alice, Call.tool("orders", {}), call_id="p2")

    def broken(error: BaseException) -> bool:
        return bool(error.args[0] == "pause")

    def tool() -> str:
        raise LookupError

    async def tool_async() -> str:
        raise LookupError

    with pytest.raises(LookupError):
        if arun:
            asyncio.run(gate.arun(auth, tool_async, paused=broken))
        else:
            gate.run(auth, tool, paused=broken)
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


# --- a Gate with one agent of tenant team-a, two approvers, priced models and a GPU --------------------

POLICY = """
version: 1
trust_anchors:
  root: {{did: "{root}"}}
tenants:
  team-a: {{}}
principals:
  agent: {{kind: agent, did: "{agent}", tenant: team-a, roles: [worker]}}
  lead: {{kind: human, did: "{lead}", roles: [lead]}}
  second: {{kind: human, did: "{second}", roles: [lead]}}
tools:
  lookup:
    args: {{id: {{type: string, required: true}}}}
    idempotent: true
  refund:
    args: {{amount: {{type: integer, required: true}}}}
  transfer:
    args: {{amount: {{type: integer, required: true}}}}
models:
  small: {{cost_per_mtok: {{input: 1000000, output: 2000000}}}}
  tiny: {{cost_per_mtok: {{input: 1, output: 1}}}}
gpus:
  h100: {{cost_per_gpu_hour: 3600000}}
roles:
  worker:
    kind: agent
    capabilities:
      - resource: tool:lookup
      - resource: tool:refund
      - resource: tool:transfer
      - resource: model:small
      - resource: model:tiny
      - resource: gpu:h100
    budget: {{limit: {budget}, unit: usd_micros}}
    ttl_s: 600
    delegation:
      max_depth: 1
      capabilities:
        - resource: tool:lookup
        - resource: tool:refund
  lead:
    kind: human
    capabilities:
      - resource: tool:refund
    ttl_s: 600
approvals:
  big-refund:
    resource: tool:refund
    when: {{amount: {{gt: 100}}}}
    approvers: [lead]
  transfer-two:
    resource: tool:transfer
    approvers: [lead, second]
    quorum: 2
"""


class Setup:
    def __init__(self, path: Path, budget: int = 10_000_000) -> None:
        self.keys = {n: SigningKey.generate() for n in ("root", "agent", "lead", "second", "helper")}
        self.text = text = POLICY.format(budget=budget, **{n: k.did for n, k in self.keys.items()})
        self.path = path
        self.gate = Gate(parse_policy(text, source="gate.yaml"), SQLiteStore(path / "agentgate.db"))
        self.agent = self.gate.issue(self.keys["root"], name="agent", key=self.keys["agent"], role="worker")

    def entries(self) -> list[AuditEntry]:
        self.gate.flush()
        return list(self.gate.audit.entries())

    def spent(self, identity: AgentIdentity | None = None) -> int:
        return self.gate.budget_usage(identity or self.agent)[(identity or self.agent).chain.root.id][0]


@pytest.fixture
def setup(tmp_path: Path) -> Iterator[Setup]:
    made = Setup(tmp_path)
    yield made
    made.gate.close()


def _until(condition: Any, what: str, seconds: float = 10.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"not within {seconds}s: {what}")
        time.sleep(0.01)


def _helper(setup: Setup) -> AgentIdentity:
    return setup.gate.delegate(
        setup.agent,
        name="helper",
        key=setup.keys["helper"],
        capabilities=["tool:lookup"],
        ttl=timedelta(seconds=60),
    )


# --- budgets and cost: what a call reserves when it is decided and is charged at its outcome -----------


def test_a_negative_token_estimate_is_refused_before_anything_is_reserved(setup: Setup) -> None:
    """Kills: _token_counts accepting negative counts (``n >= 0`` dropped). A negative estimate
    makes the call's cost negative, so nothing is reserved and the call runs free: it must be an
    InputError, nothing recorded."""
    before = len(setup.entries())
    for tokens in ((-1_000_000, 10), (10, -1)):
        with pytest.raises(InputError, match="non-negative"):
            setup.gate.authorize(setup.agent, Call.model("small"), tokens=tokens)
    assert len(setup.entries()) == before
    assert setup.gate.ledger.usage(setup.agent.chain.root.id) == (0, 0)


def test_a_gpu_lease_reserves_the_gpu_time_it_adds_not_its_whole_ttl(setup: Setup) -> None:
    """Kills: _cost pricing a lease by ``ttl_s`` even when ``hold_s`` is given. A renewal adds
    ``hold_s`` seconds of GPU time; priced by its ttl it would reserve (and charge) far more."""
    call = Call("gpu:h100", "lease", {"count": 2, "ttl_s": 600, "hold_s": 60, "priority": 0})
    auth = setup.gate.authorize(setup.agent, call)
    assert auth.allowed, auth.explain()
    assert [(unit, amount) for _, unit, amount in auth.reservations] == [("usd_micros", 120_000)]
    by_ttl = setup.gate.authorize(
        setup.agent, Call("gpu:h100", "lease", {"count": 2, "ttl_s": 600, "priority": 0})
    )
    assert [amount for _, _, amount in by_ttl.reservations] == [1_200_000]


def test_a_model_call_costs_its_micro_dollars_rounded_up_never_down_to_free(setup: Setup) -> None:
    """Kills: _cost rounding a model call's price down (``per_million // 1_000_000``). At one
    micro-dollar per million tokens a short call costs a fraction of a micro-dollar: rounded down
    it is 0, nothing is reserved and the call is free however often it runs; and prompt and
    output tokens are priced at their own rates (not swapped)."""
    auth = setup.gate.authorize(setup.agent, Call.model("tiny"), tokens=(3, 2))
    assert [(unit, amount) for _, unit, amount in auth.reservations] == [("usd_micros", 1)]
    setup.gate.run(auth, lambda: "answer")
    assert setup.spent() == 1
    priced = setup.gate.authorize(setup.agent, Call.model("small"), tokens=(100, 10))
    assert [amount for _, _, amount in priced.reservations] == [120]  # 100 x 1 + 10 x 2


def test_a_model_call_that_failed_after_reporting_usage_is_charged_that_usage(setup: Setup) -> None:
    """Kills: _write_outcome charging a call only when its status is ``ok`` (``or actual is not
    None`` dropped): a model call whose result says it failed but reports the tokens it used
    (a refusal by the model, a truncated answer) consumed them, and its reservation would be
    released: every failing generation free."""
    auth = setup.gate.authorize(setup.agent, Call.model("small"), tokens=(1000, 1000))
    setup.gate.run(auth, lambda: "broken", failed=lambda _: True, spent=lambda _: (400, 100))
    assert setup.spent() == 600  # 400 x 1 + 100 x 2, not the 3,000 reserved, not 0
    outcome = setup.entries()[-1]
    assert outcome.kind == "outcome" and outcome.status == "error" and outcome.budget_delta == 600


def test_a_call_that_failed_before_any_usage_gives_its_whole_reservation_back(setup: Setup) -> None:
    """Kills: _settle_reservations not releasing a reservation it does not charge (the
    ``ledger.release`` dropped). A model call whose backend failed used nothing: what it reserved
    must return to the budget at its outcome, or every failure shrinks the budget for good."""
    auth = setup.gate.authorize(setup.agent, Call.model("small"), tokens=(1_000, 500))
    assert setup.gate.ledger.usage(setup.agent.chain.root.id) == (0, 2_000)  # the precondition: held
    with pytest.raises(ConnectionError):
        setup.gate.run(auth, lambda: (_ for _ in ()).throw(ConnectionError("backend down")))
    setup.gate.flush()
    assert setup.gate.ledger.usage(setup.agent.chain.root.id) == (0, 0)
    outcome = setup.entries()[-1]
    assert outcome.kind == "outcome" and outcome.status == "error" and outcome.budget_delta == 0


def test_an_overrun_reported_after_the_call_ran_is_recorded_and_exhausts_the_budget(tmp_path: Path) -> None:
    """Kills: _settle_reservations committing without ``exhaust=True``. A call that ran and
    reports more than its budget had left is a fact: its outcome must be recorded and the budget
    left at zero. Without ``exhaust`` the commit raises, the outcome is dropped, its reservation
    stays held and the overrun is never charged."""
    setup = Setup(tmp_path, budget=1_000)
    try:
        auth = setup.gate.authorize(setup.agent, Call.model("small"), tokens=(10, 10))
        assert auth.allowed
        setup.gate.run(auth, lambda: "long prompt", spent=lambda _: (5_000, 10))
        outcome = setup.entries()[-1]
        assert outcome.kind == "outcome" and outcome.ref == auth.audit_index
        assert any("overran the usd_micros budget" in r for r in outcome.reasons), outcome.reasons
        assert setup.gate.ledger.usage(setup.agent.chain.root.id) == (1_000, 0)
        after = setup.gate.authorize(setup.agent, Call.model("small"), tokens=(1, 1))
        assert not after.allowed and after.budget_exhausted
    finally:
        setup.gate.close()


def test_a_budget_refusal_says_how_much_calls_in_flight_hold(tmp_path: Path) -> None:
    """Kills: _budget_reason leaving out what calls in flight hold. A budget that looks unspent
    but refuses is held by running calls: the refusal must say so (the agent, and the person
    reading the log, would otherwise see "0 of 1000 spent" and a refusal that contradicts it)."""
    setup = Setup(tmp_path, budget=1_000)
    try:
        running = setup.gate.authorize(setup.agent, Call.model("small"), tokens=(400, 200))
        assert running.allowed  # holds 800
        refused = setup.gate.authorize(setup.agent, Call.model("small"), tokens=(100, 100))
        assert not refused.allowed and refused.budget_exhausted
        assert any(
            "0 of 1000 usd_micros spent and 800 held by calls in flight" in r for r in refused.reasons
        ), refused.reasons
    finally:
        setup.gate.close()


# --- one allow, one run --------------------------------------------------------------------------------


def test_an_allow_already_used_or_a_refusal_cannot_be_abandoned(setup: Setup) -> None:
    """Kills: abandon without its ``_check_allowed``. Abandoning an allow that ran would write a
    second outcome for one call (and settle its settled reservation again); abandoning a refusal
    would write an outcome for a call that was never allowed."""
    auth = setup.gate.authorize(setup.agent, Call.model("small"), tokens=(100, 10))
    setup.gate.run(auth, lambda: "answer", spent=lambda _: (50, 5))
    refused = setup.gate.authorize(setup.agent, Call.tool("lookup", {"id": 5}))
    assert not refused.allowed
    before = setup.entries()
    for used in (auth, refused):
        with pytest.raises(Denied):
            setup.gate.abandon(used)
    assert setup.entries() == before
    assert setup.gate.ledger.usage(setup.agent.chain.root.id) == (60, 0)


def test_an_allow_runs_its_call_once_however_it_is_handed_on(setup: Setup) -> None:
    """Kills: ``_Once.take`` always answering True. One decision is one run: the same allow run
    again (or abandoned after it ran, or a copy of it run) is refused with nothing run, one
    outcome recorded and the budget charged once."""
    auth = setup.gate.authorize(setup.agent, Call.model("small"), tokens=(100, 10))
    ran: list[str] = []
    setup.gate.run(auth, lambda: ran.append("first"), spent=lambda _: (100, 10))
    with pytest.raises(Denied, match="already used"):
        setup.gate.run(auth, lambda: ran.append("again"), spent=lambda _: (100, 10))
    with pytest.raises(Denied, match="already used"):
        setup.gate.run(dataclasses.replace(auth), lambda: ran.append("copy"), spent=lambda _: (100, 10))
    assert ran == ["first"]
    assert [e.ref for e in setup.entries() if e.kind == "outcome"] == [auth.audit_index]
    assert setup.spent() == 120


def test_an_allow_is_run_only_by_the_gate_that_decided_it_not_a_twin_on_the_same_store(
    tmp_path: Path,
) -> None:
    """Mutant s1: ``_seal`` without the Gate (``weakref.ref(self)`` dropped), so an allow matched
    any Gate whose fields it carries. Rule: a Gate runs only the allows it decided itself; another
    Gate, even one over the same store and policy, refuses it and does not run the call."""
    setup = Setup(tmp_path)
    twin = Gate(parse_policy(setup.text, source="gate.yaml"), SQLiteStore(tmp_path / "agentgate.db"))
    try:
        auth = setup.gate.authorize(setup.agent, Call.tool("lookup", {"id": "x"}))
        assert auth.allowed, auth.explain()
        ran: list[str] = []
        with pytest.raises(Denied, match="another Gate's"):
            twin.run(auth, lambda: ran.append("twin"))
        assert ran == []
        # The allow is still unused: the Gate that decided it runs it.
        assert setup.gate.run(auth, lambda: "found") == "found"
    finally:
        twin.close()
        setup.gate.close()


# --- outcomes: every allowed call's outcome is recorded ------------------------------------------------

_NEVER_CLOSED = """
import sys
from pathlib import Path
from agentgate.audit.entry import AuditEntry
from agentgate.capabilities import Call
from agentgate.gate import Gate
from agentgate.keys import SigningKey
from agentgate.policy import parse_policy
from agentgate.store import SQLiteStore

sys.path.insert(0, {tests!r})
from test_gate_run import POLICY

keys = {{n: SigningKey.generate() for n in ("root", "agent", "lead", "second", "helper")}}
text = POLICY.format(budget=10_000_000, **{{n: k.did for n, k in keys.items()}})
Path({policy!r}).write_text(text)
gate = Gate(parse_policy(text, source="gate.yaml"), SQLiteStore({db!r}))
# The thread that commits outcomes is a daemon: stopped here, as the interpreter's exit stops it.
gate._outcomes._closed.set()
gate._outcomes._thread.join()
agent = gate.issue(keys["root"], name="agent", key=keys["agent"], role="worker")
auth = gate.authorize(agent, Call.model("small"), tokens=(100, 10))
gate.run(auth, lambda: "answer", spent=lambda _: (50, 5))
print(agent.chain.root.id)
# No gate.close(): the program ends with the outcome still pending.
"""


def test_a_program_that_never_closes_its_gate_still_records_its_last_outcome(tmp_path: Path) -> None:
    """Kills: _flush_at_exit not flushing the open gates. A program that ends without
    ``Gate.close()`` would lose its last call's outcome (the log says it was allowed, never how it
    ended) and leave its reservation held against the budget."""
    db, policy = tmp_path / "agentgate.db", tmp_path / "gate.yaml"
    script = _NEVER_CLOSED.format(tests=str(Path(__file__).parent), policy=str(policy), db=str(db))
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    grant = done.stdout.strip()
    gate = Gate(parse_policy(policy.read_text(), source="gate.yaml"), SQLiteStore(db))
    try:
        kinds = [(e.kind, e.status) for e in gate.audit.entries()]
        assert kinds[-2:] == [("allow", None), ("outcome", "ok")], kinds
        assert gate.ledger.usage(grant) == (60, 0)  # charged as reported, nothing left held
    finally:
        gate.close()


@contextlib.contextmanager
def closing_while_running(gate: Gate, first: Authorization, **run: Any) -> Iterator[None]:
    """Inside: ``gate.run(first, ...)`` is running on one thread and ``gate.close()`` has begun on
    another, waiting for it; on leaving, the call ends and both threads are joined."""
    running, release = threading.Event(), threading.Event()

    def slow() -> str:
        running.set()
        assert release.wait(30)
        return "done"

    caller = threading.Thread(target=lambda: gate.run(first, slow, **run), daemon=True)
    caller.start()
    assert running.wait(30)
    closer = threading.Thread(target=gate.close, daemon=True)
    closer.start()
    try:
        for _ in range(3000):  # close() has begun: it now waits for the running call
            if gate._closing:
                break
            threading.Event().wait(0.01)
        yield
    finally:
        release.set()
        closer.join(30)
        caller.join(30)


def test_a_call_started_while_the_gate_closes_is_refused_recorded_and_released(tmp_path: Path) -> None:
    """Kills: _begin_run refusing a call once ``close`` began without settling it (the
    ``_settle(... "SchedulingError" ...)`` dropped). The allow was recorded and its budget
    reserved: refused unrecorded, the log would end at an allow with no outcome and the
    reservation would stay held."""
    setup = Setup(tmp_path)
    gate = setup.gate
    first = gate.authorize(setup.agent, Call.tool("lookup", {"id": "1"}))
    late = gate.authorize(setup.agent, Call.model("small"), tokens=(100, 10))
    assert first.allowed and late.allowed and late.reservations
    with closing_while_running(gate, first):
        ran: list[str] = []
        with pytest.raises(SchedulingError):
            gate.run(late, lambda: ran.append("late"))
        assert ran == []
    reopened = Gate(parse_policy(setup.text, source="gate.yaml"), SQLiteStore(tmp_path / "agentgate.db"))
    try:
        outcomes = {e.ref: e for e in reopened.audit.entries() if e.kind == "outcome"}
        assert outcomes[late.audit_index].status == "error"
        assert outcomes[late.audit_index].reasons == ("SchedulingError",)
        assert reopened.ledger.usage(setup.agent.chain.root.id) == (0, 0)  # released, not held
    finally:
        reopened.close()


def test_outcomes_carried_by_a_decision_that_fails_are_kept_for_the_next_commit(setup: Setup) -> None:
    """Kills: _decision_transaction not putting back the outcomes it took when the decision fails
    (``restore`` dropped). A pending outcome rides with the next decision's transaction; a
    decision that raises (here a revocation of a grant that is none) rolls it back, and the
    outcome must be written later, not lost with its reservation held."""
    setup.gate._outcomes._closed.set()  # no background commit: only decisions carry outcomes
    setup.gate._outcomes._thread.join()
    auth = setup.gate.authorize(setup.agent, Call.model("small"), tokens=(100, 10))
    setup.gate.run(auth, lambda: "answer", spent=lambda _: (50, 5))
    with pytest.raises(AgentGateError):  # a grant that is none
        setup.gate.revoke("not a grant")
    outcomes = [e for e in setup.entries() if e.kind == "outcome"]
    assert [e.ref for e in outcomes] == [auth.audit_index]
    assert setup.gate.ledger.usage(setup.agent.chain.root.id) == (60, 0)


def test_an_outcome_unwritable_for_a_reason_not_the_stores_is_dropped_not_failing_later_decisions(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Mutant o17: ``_carry_all`` turning only a ``StoreError`` into ``_CarryFailed``. Rule: an
    outcome that cannot be written as it is for a reason other than the store's (here its
    reservation was settled meanwhile: ``NotHeld``, an ``InputError``) is neither kept for ever
    nor allowed to fail every later decision that carries it. Since review R67 it is written
    without that reservation (named in its reasons, logged); until then it was dropped."""
    setup = Setup(tmp_path)
    try:
        auth = setup.gate.authorize(setup.agent, Call.model("small"), tokens=(10, 10))
        assert auth.allowed and auth.reservations, auth.explain()
        # Settled behind the gate's back, as ran (one released is charged by its outcome since
        # review R68: tests/test_budget_r68_late_outcomes.py).
        setup.gate.ledger.commit(auth.reservations[0][0], auth.reservations[0][2])
        setup.gate.run(auth, lambda: "answer")
        setup.gate.flush()
        for n in range(2):  # later decisions carry nothing that fails them
            later = setup.gate.authorize(setup.agent, Call.tool("lookup", {"id": str(n)}))
            assert later.allowed, later.explain()
        assert "already settled" in caplog.text
        (outcome,) = [e for e in setup.entries() if e.kind == "outcome" and e.ref == auth.audit_index]
        assert any("settled before this outcome" in r for r in outcome.reasons), outcome.reasons
    finally:
        setup.gate.close()


@pytest.mark.postgres
def test_an_outcome_put_while_a_failed_commit_is_retried_is_not_lost(
    postgres_url: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Mutant o29: ``PendingOutcomes.restore`` replacing what is pending with the outcomes it puts
    back (``self._items = list(items)``) instead of putting them in front. Rule: an outcome that
    arrives while the background commit of earlier ones fails (here a lock the commit cannot get
    within the database's ``lock_timeout``) is kept with them, and both are recorded once the
    store answers again; else the second call's allow never gets an outcome and its reservation
    stays held."""
    import psycopg

    from agentgate.store._postgres import PostgresStore
    from agentgate.store.audit import APPEND_LOCK

    with psycopg.connect(postgres_url, autocommit=True) as admin:
        (name,) = admin.execute("SELECT current_database()").fetchone() or ("",)
        admin.execute(f"ALTER DATABASE \"{name}\" SET lock_timeout = '2s'")
    setup = Setup(tmp_path)
    setup.gate.close()
    with Gate(parse_policy(setup.text, source="gate.yaml"), PostgresStore(postgres_url)) as gate:
        agent = gate.issue(setup.keys["root"], name="agent", key=setup.keys["agent"], role="worker")
        first, second = (gate.authorize(agent, Call.model("small"), tokens=(10, 10)) for _ in range(2))
        with psycopg.connect(postgres_url, autocommit=True) as holder:
            holder.execute("SELECT pg_advisory_lock(%s)", (APPEND_LOCK,))

            def commit_waits() -> bool:
                found = holder.execute(
                    "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"
                ).fetchone()
                return bool(found and found[0])

            gate.run(first, lambda: "one", spent=lambda _: (1, 1))
            _until(commit_waits, "the background commit of the first outcome waits for the lock")
            gate.run(second, lambda: "two", spent=lambda _: (2, 2))
            _until(lambda: "not recorded yet" in caplog.text, "the commit failed and kept the first outcome")
            holder.execute("SELECT pg_advisory_unlock(%s)", (APPEND_LOCK,))
        gate.flush()
        outcomes = [e.ref for e in gate.audit.entries() if e.kind == "outcome"]
        assert sorted(outcomes) == sorted([first.audit_index, second.audit_index])


# --- refusals an integration records, and its sub-agents' tenant ---------------------------------------


def test_a_refusal_recorded_for_an_integration_keeps_its_findings_in_the_log(setup: Setup) -> None:
    """Kills: record_refusal dropping its ``findings``. An integration's own refusal (a tool call
    without an id, an inherited identity) names its finding; the audit log is the evidence and
    must keep it."""
    from agentgate.findings import Finding, FindingKind

    finding = Finding(kind=FindingKind.IMPLICIT_TRUST_INHERITANCE, code="inherited_identity", message="m")
    refused = setup.gate.record_refusal(
        setup.agent, Call.tool("lookup", {"id": "1"}), ["no call id"], findings=[finding]
    )
    assert not refused.allowed and refused.audit_index is not None
    entry = setup.entries()[refused.audit_index]
    assert entry.kind == "deny"
    assert "no call id" in entry.reasons and f"{finding.kind}:inherited_identity" in entry.reasons


def test_a_sub_agent_is_counted_in_its_supervisors_tenant_and_not_disowned(setup: Setup) -> None:
    """Kills: tenant_of and disowns reading the sub-agent's own key (``identity.did``) instead of
    the principal its chain was issued to: a sub-agent's key, made at run time, is in no policy,
    so its quotas would fall to the ``default`` tenant and the integration would refuse all its
    calls as those of a principal removed from the policy."""
    helper = _helper(setup)
    assert setup.gate.tenant_of(helper) == "team-a" == setup.gate.tenant_of(setup.agent)
    assert not setup.gate.disowns(helper) and not setup.gate.disowns(setup.agent)


def test_a_call_refused_as_foreign_is_audited(setup: Setup) -> None:
    """Kills: refuse_foreign returning the refusal without recording it. A delegation asked on an
    inherited identity is refused there, and every refusal is evidence: it must be a ``deny``
    entry naming the inherited identity."""
    call = Call("agent:helper", "delegate", {})
    assert setup.gate.refuse_foreign(setup.agent, call, agent="agent") is None
    refused = setup.gate.refuse_foreign(setup.agent, call, agent="intruder")
    assert refused is not None and not refused.allowed and refused.audit_index is not None
    entry = setup.entries()[refused.audit_index]
    assert entry.kind == "deny" and entry.resource == "agent:helper"
    assert any("inherited_identity" in r for r in entry.reasons)


def test_a_sync_run_inside_an_async_def_that_would_wait_for_its_loops_call_is_refused(
    two: TwoTenants,
) -> None:
    """Kills: ``Gate.run`` called inside an ``async def`` while an ``arun`` of that loop held the
    tool's only slot blocked the loop's thread waiting for the slot, which only that loop could
    give back: a silent deadlock (up to the grant's expiry). Rule: ``SchedulingError`` at once
    saying to use ``arun``, its call recorded as an ``error`` outcome; the ``arun`` finishes."""
    gate = two.gate
    first = gate.authorize(two.alice, Call.tool("orders", {}), call_id="l1")
    second = gate.authorize(two.alice, Call.tool("orders", {}), call_id="l2")
    seen: dict[str, object] = {}

    async def main() -> None:
        started, release = asyncio.Event(), asyncio.Event()

        async def holds() -> str:
            started.set()
            await release.wait()
            return "async"

        task = asyncio.create_task(gate.arun(first, holds))
        await started.wait()
        try:
            gate.run(second, lambda: "sync")
        except SchedulingError as exc:
            seen["refused"] = exc
        release.set()
        seen["async"] = await task

    runner = threading.Thread(target=lambda: asyncio.run(main()), daemon=True)
    runner.start()
    runner.join(30)
    assert not runner.is_alive(), "Gate.run waited for the slot its own event loop holds"
    assert "Gate.arun" in str(seen["refused"]) and seen["async"] == "async"
    outcomes = two.outcomes()
    assert outcomes[second.audit_index].status == "error"  # type: ignore[index]
    assert outcomes[first.audit_index].status == "ok"  # type: ignore[index]
