"""Review R91: a tool call that joined its running twin (the same run and call ids: one
idempotency key) which then failed was handed the twin's exception, and recorded as "X: given up
before the call started", with no "result reused" (review R90 said so only for a twin's
success); an approval it used was put back as pending, though its twin ran the tool. Its outcome
now says the twin's failure was reused, and the call is settled as started, as a reused result is.

Real components: a Gate on a SQLite file (``test_gate``'s policy, ``lookup`` idempotent; one test
adds an approval gate on ``lookup``)."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path

import pytest
import test_gate
from test_gate import Setup

from agentgate.audit.entry import AuditEntry
from agentgate.capabilities import Call
from agentgate.gate import Approval, Authorization
from agentgate.gate._outcomes import RESULT_REUSED
from agentgate.tasks import Scheduler, SyncScheduler

LOOKUP = Call.tool("lookup", {"id": "42"})
IDS = {"call_id": "c1", "run_id": "r1"}
APPROVED_LOOKUP = "approvals:\n  check-lookup:\n    resource: tool:lookup\n    approvers: [lead]\n"


@pytest.fixture
def setup(tmp_path: Path) -> Iterator[Setup]:
    made = Setup(tmp_path)
    yield made
    made.gate.close()


def _outcomes(setup: Setup) -> list[AuditEntry]:
    return [entry for entry in setup.entries() if entry.kind == "outcome"]


def _until_joined(scheduler: Scheduler | SyncScheduler, joiners: int = 1) -> None:
    """Wait until ``joiners`` calls have joined their running twin (the scheduler counted each
    reuse); fails after about five seconds."""
    metrics = scheduler.scheduler.metrics if isinstance(scheduler, SyncScheduler) else scheduler.metrics
    for _ in range(2500):
        if metrics.count("reused", "lookup") >= joiners:
            return
        time.sleep(0.002)
    raise AssertionError("the calls never joined their twin")


class UnreadableCause(RuntimeError):
    """An exception whose ``__cause__`` cannot be read."""

    @property
    def __cause__(self) -> BaseException | None:
        raise ValueError("__cause__ broke")

    @__cause__.setter
    def __cause__(self, _value: BaseException | None) -> None:
        pass


def _run_beside_a_failing_twin(
    setup: Setup, decide: Callable[[], Authorization], boom: BaseException | None = None
) -> tuple[BaseException, list[object], Authorization, Authorization]:
    """Run a call whose tool raises ``boom`` once a second call with its ids joined it (sync)."""
    boom = RuntimeError("boom") if boom is None else boom
    entered, release = threading.Event(), threading.Event()
    ran: list[str] = []

    def failing() -> str:
        ran.append("twin")
        entered.set()
        assert release.wait(5)
        raise boom

    def joiner_tool() -> str:
        ran.append("joiner")
        return "never"

    got: list[object] = []

    def run(auth: Authorization, fn: Callable[[], str]) -> None:
        try:
            got.append(setup.gate.run(auth, fn, **IDS))
        except Exception as exc:
            got.append(exc)

    first = decide()
    twin = threading.Thread(target=run, args=(first, failing))
    twin.start()
    assert entered.wait(5)
    second = decide()
    joiner = threading.Thread(target=run, args=(second, joiner_tool))
    joiner.start()
    _until_joined(setup.gate._sync())
    release.set()
    twin.join(5)
    joiner.join(5)
    assert ran == ["twin"]
    return boom, got, first, second


@pytest.mark.parametrize("raised", [RuntimeError, UnreadableCause])
def test_a_call_handed_its_twins_failure_says_the_result_was_reused(
    setup: Setup, raised: type[RuntimeError]
) -> None:
    """Also for an exception whose ``__cause__`` raises when read: the joiner gets the tool's
    exception, not that error, and its outcome is written."""
    boom, got, first, second = _run_beside_a_failing_twin(
        setup, lambda: setup.gate.authorize(setup.agent, LOOKUP, **IDS), raised("boom")
    )
    assert got == [boom, boom]  # both callers get the tool's exception
    by_ref = {entry.ref: entry for entry in _outcomes(setup)}
    assert by_ref[first.audit_index].reasons == (raised.__name__,)
    joined = by_ref[second.audit_index]
    assert (joined.status, joined.reasons) == ("error", (raised.__name__, RESULT_REUSED))


def test_an_approval_a_call_handed_its_twins_failure_used_is_spent(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The joiner's approval is not put back as pending: its twin ran the tool, and the call was
    answered with the twin's outcome, as a call handed its twin's result is."""
    monkeypatch.setattr(test_gate, "POLICY", test_gate.POLICY.replace("approvals:\n", APPROVED_LOOKUP, 1))
    setup = Setup(tmp_path)

    def approved() -> Authorization:
        asked = setup.gate.authorize(setup.agent, LOOKUP, **IDS)
        assert asked.needs_approval
        approval = Approval.sign(asked.approval_payload(), setup.keys["lead"])
        allowed = setup.gate.authorize(setup.agent, LOOKUP, **IDS, approval=approval)
        assert allowed.allowed and allowed.request is not None
        return allowed

    try:
        boom, got, first, second = _run_beside_a_failing_twin(setup, approved)
        assert got == [boom, boom]
        joined = next(e for e in _outcomes(setup) if e.ref == second.audit_index)
        assert joined.reasons == ("RuntimeError", RESULT_REUSED)  # no "... is pending again"
        for allowed in (first, second):
            assert allowed.request is not None
            assert setup.gate.approvals.get(allowed.request["id"]).state == "consumed"
    finally:
        setup.gate.close()


def test_an_async_call_handed_its_twins_failure_says_the_result_was_reused(setup: Setup) -> None:
    boom = RuntimeError("boom")

    async def both() -> tuple[list[object], list[Authorization]]:
        entered, release = asyncio.Event(), asyncio.Event()

        async def failing() -> str:
            entered.set()
            await release.wait()
            raise boom

        async def joiner_tool() -> str:
            return "never"

        decided: list[Authorization] = []

        async def one(fn: Callable[[], Awaitable[str]]) -> object:
            auth = await asyncio.to_thread(setup.gate.authorize, setup.agent, LOOKUP, **IDS)
            decided.append(auth)
            try:
                return await setup.gate.arun(auth, fn, **IDS)
            except Exception as exc:
                return exc

        twin = asyncio.create_task(one(failing))
        await entered.wait()
        joiner = asyncio.create_task(one(joiner_tool))
        await asyncio.to_thread(_until_joined, await setup.gate._async())
        release.set()
        return [await twin, await joiner], decided

    got, (first, second) = asyncio.run(both())
    assert got == [boom, boom]
    by_ref = {entry.ref: entry for entry in _outcomes(setup)}
    assert by_ref[first.audit_index].reasons == ("RuntimeError",)
    assert by_ref[second.audit_index].reasons == ("RuntimeError", RESULT_REUSED)
