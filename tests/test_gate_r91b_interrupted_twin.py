"""Review R91b asked how a Gate records an async tool call that joined its running twin, run with
``preemptible=False``, whose caller was cancelled while its work ran on and then failed: the
scheduler hands the joiner the ``SchedulingError`` of an interrupted twin, the tool's error its
``__cause__`` (docs/tasks.md). The twin's tool ran, so the joiner is recorded as a call handed
its twin's failure (docs/audit-format.md): ``SchedulingError (after X)``, then ``result reused``,
settled as started; not as given up before it started. This pins that rule.

Real components: a Gate on a SQLite file (``test_gate``'s policy: ``lookup`` is idempotent) and
an event loop's scheduler."""

from __future__ import annotations

import asyncio
from pathlib import Path

from test_gate import Setup
from test_gate_r91_twin_failure import _until_joined

from agentgate.capabilities import Call
from agentgate.errors import SchedulingError
from agentgate.gate import Authorization
from agentgate.gate._outcomes import RESULT_REUSED

LOOKUP = Call.tool("lookup", {"id": "1"})
IDS = {"call_id": "c1", "run_id": "r1"}


class Boom(Exception):
    """The tool's failure."""


def test_a_joiner_of_a_cancelled_twin_whose_work_then_failed_is_recorded_as_its_failure_reused(
    tmp_path: Path,
) -> None:
    setup = Setup(tmp_path)
    boom = Boom("down")

    async def both() -> tuple[BaseException, Authorization, Authorization]:
        entered, release = asyncio.Event(), asyncio.Event()

        async def work() -> str:
            entered.set()
            await release.wait()
            raise boom

        async def never() -> str:
            return "never"

        first = await asyncio.to_thread(setup.gate.authorize, setup.agent, LOOKUP, **IDS)
        second = await asyncio.to_thread(setup.gate.authorize, setup.agent, LOOKUP, **IDS)
        twin = asyncio.create_task(setup.gate.arun(first, work, preemptible=False, **IDS))
        await entered.wait()
        joiner = asyncio.create_task(setup.gate.arun(second, never, **IDS))
        await asyncio.to_thread(_until_joined, await setup.gate._async())
        twin.cancel()
        for _ in range(20):  # the cancellation reaches the twin's caller, which waits for the work
            await asyncio.sleep(0)
        release.set()
        (cancelled,) = await asyncio.gather(twin, return_exceptions=True)
        assert isinstance(cancelled, asyncio.CancelledError)
        try:
            await joiner
        except SchedulingError as exc:
            return exc, first, second
        raise AssertionError("the joiner was not handed the interrupted twin's SchedulingError")

    try:
        handed, first, second = asyncio.run(both())
        assert handed.__cause__ is boom
        by_ref = {e.ref: e for e in setup.entries() if e.kind == "outcome"}
        assert by_ref[first.audit_index].reasons == ("CancelledError",)
        joined = by_ref[second.audit_index]
        assert (joined.status, joined.reasons) == ("error", ("SchedulingError (after Boom)", RESULT_REUSED))
    finally:
        setup.gate.close()
