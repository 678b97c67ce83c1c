"""Review R91b: to tell a call handed its running twin's failure (review R91), a Gate keeps what
the ``fn`` of each tool call with a ``call_id`` raised while calls with the same ids are in
flight. It kept the list of every call that had ended, exceptions and tracebacks, until no call
with the ids was left, on the sync scheduler and an event loop's alike: beside a call that ran
long, every failed call with its ids stayed in memory. A failure is now kept past its call's end
only for the calls then in flight that may have joined it (on its scheduler, not running the
tool themselves), and a joiner woken after its twin ended still finds it.

Real components: a Gate on a SQLite file (``test_gate``'s policy: ``lookup`` is idempotent)."""

from __future__ import annotations

import asyncio
import gc
import threading
import weakref
from collections.abc import Callable

import pytest
from test_gate import Setup
from test_gate import setup as setup  # the fixture
from test_gate_r91_twin_failure import _until_joined

from agentgate.audit.entry import AuditEntry
from agentgate.capabilities import Call
from agentgate.gate import Authorization
from agentgate.gate._outcomes import RESULT_REUSED
from agentgate.gate._running import _Running

IDS = {"call_id": "c1", "run_id": "r1"}


class Boom(Exception):
    """A tool's failure (a class of its own: built-in exceptions cannot be weakly referenced)."""


def _outcome(setup: Setup, auth: Authorization) -> AuditEntry:
    (entry,) = [e for e in setup.entries() if e.kind == "outcome" and e.ref == auth.audit_index]
    return entry


def _beside_a_long_call(setup: Setup, fail_beside: Callable[[], weakref.ref[Boom]]) -> weakref.ref[Boom]:
    """Run ``fail_beside`` while a sync call with ``IDS`` runs its tool; what it failed with."""
    entered, release = threading.Event(), threading.Event()

    def long_tool() -> str:
        entered.set()
        assert release.wait(5)
        return "done"

    long_call = setup.gate.authorize(setup.agent, Call.tool("lookup", {"id": "1"}), **IDS)
    running = threading.Thread(target=setup.gate.run, args=(long_call, long_tool), kwargs=IDS)
    running.start()
    try:
        assert entered.wait(5)
        failed = fail_beside()
        gc.collect()
        return failed
    finally:
        release.set()
        running.join(5)


def test_a_failure_beside_a_running_call_with_its_ids_is_not_kept(setup: Setup) -> None:
    def fail() -> weakref.ref[Boom]:
        auth = setup.gate.authorize(setup.agent, Call.tool("lookup", {"id": "2"}), **IDS)

        def failing() -> str:
            raise Boom("down")

        with pytest.raises(Boom) as raised:
            setup.gate.run(auth, failing, **IDS)
        return weakref.ref(raised.value)

    assert _beside_a_long_call(setup, fail)() is None


def test_an_async_failure_beside_a_running_sync_call_with_its_ids_is_not_kept(setup: Setup) -> None:
    def fail() -> weakref.ref[Boom]:
        auth = setup.gate.authorize(setup.agent, Call.tool("lookup", {"id": "1"}), **IDS)

        async def failing() -> str:
            raise Boom("down")

        async def run() -> weakref.ref[Boom]:
            with pytest.raises(Boom) as raised:
                await setup.gate.arun(auth, failing, **IDS)
            return weakref.ref(raised.value)

        return asyncio.run(run())

    assert _beside_a_long_call(setup, fail)() is None


def test_a_joiner_that_looks_after_its_twin_ended_finds_its_failure(
    setup: Setup, monkeypatch: pytest.MonkeyPatch
) -> None:
    call = Call.tool("lookup", {"id": "1"})
    entered, release = threading.Event(), threading.Event()
    twin_ended = threading.Event()
    looked = _Running._raised_by_twin

    def after_the_twin(gate: _Running, *args: object) -> bool:
        assert twin_ended.wait(5)  # the twin has counted itself out (``_end_run``)
        return looked(gate, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(_Running, "_raised_by_twin", after_the_twin)
    boom = Boom("down")

    def failing() -> str:
        entered.set()
        assert release.wait(5)
        raise boom

    got: dict[str, object] = {}
    decided: dict[str, Authorization] = {}

    def one(name: str, fn: Callable[[], str]) -> None:
        auth = decided[name] = setup.gate.authorize(setup.agent, call, **IDS)
        try:
            got[name] = setup.gate.run(auth, fn, **IDS)
        except Exception as exc:
            got[name] = exc
        if name == "twin":
            twin_ended.set()

    twin = threading.Thread(target=one, args=("twin", failing))
    twin.start()
    assert entered.wait(5)
    joiner = threading.Thread(target=one, args=("joiner", lambda: "never"))
    joiner.start()
    _until_joined(setup.gate._sync())
    release.set()
    twin.join(5)
    joiner.join(5)
    assert got == {"twin": boom, "joiner": boom}
    joined = _outcome(setup, decided["joiner"])
    assert (joined.status, joined.reasons) == ("error", ("Boom", RESULT_REUSED))
