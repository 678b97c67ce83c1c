"""Review R91b: a tool result of ``None`` that ``failed`` read as a failure made the scheduler's
``forget_result`` delete a key it kept nothing for (``get``'s default is ``None`` too): its
``KeyError`` came out of ``Gate.run``/``arun`` before the call was settled, so no outcome was
written and the reservation stayed held. It came for a call that keeps no result (a once-only
tool) and for a joiner handed ``None`` after its twin's ``forget`` had dropped it. A key with
nothing kept is now left alone, and an error from ``forget`` keeps nothing from being settled.

Real components: a Gate on a SQLite file (``test_gate``'s policy: ``lookup`` is idempotent,
``refund`` runs once only), its sync scheduler and an event loop's."""

from __future__ import annotations

import asyncio
import logging
import threading

import pytest
from test_gate import Setup
from test_gate import setup as setup  # the fixture
from test_gate_r91_twin_failure import _until_joined

from agentgate.audit.entry import AuditEntry
from agentgate.capabilities import Call
from agentgate.gate import Authorization
from agentgate.gate._outcomes import RESULT_REUSED
from agentgate.tasks import SyncScheduler, ToolCall

IDS = {"call_id": "c1", "run_id": "r1"}


def _outcome(setup: Setup, auth: Authorization) -> AuditEntry:
    (entry,) = [e for e in setup.entries() if e.kind == "outcome" and e.ref == auth.audit_index]
    return entry


def _keep_a_result(setup: Setup) -> None:
    """Leave one result in the scheduler's cache: ``forget`` looks only when it keeps some."""
    kept = setup.gate.authorize(setup.agent, Call.tool("lookup", {"id": "0"}), call_id="c0", run_id="r1")
    assert setup.gate.run(kept, lambda: "kept", call_id="c0", run_id="r1") == "kept"


def test_a_once_only_call_whose_none_failed_is_settled(setup: Setup) -> None:
    _keep_a_result(setup)
    auth = setup.gate.authorize(setup.agent, Call.tool("refund", {"amount": 5}), **IDS)
    assert setup.gate.run(auth, lambda: None, failed=lambda _r: True, **IDS) is None
    assert _outcome(setup, auth).status == "error"


def test_an_async_once_only_call_whose_none_failed_is_settled(setup: Setup) -> None:
    kept = setup.gate.authorize(setup.agent, Call.tool("lookup", {"id": "0"}), call_id="c0", run_id="r1")
    auth = setup.gate.authorize(setup.agent, Call.tool("refund", {"amount": 5}), **IDS)

    async def found() -> str:
        return "kept"

    async def nothing() -> None:
        return None

    async def run() -> None:
        # A result kept in this loop's scheduler: ``forget`` looks only when it keeps some.
        assert await setup.gate.arun(kept, found, call_id="c0", run_id="r1") == "kept"
        return await setup.gate.arun(auth, nothing, failed=lambda _r: True, **IDS)

    assert asyncio.run(run()) is None
    assert _outcome(setup, auth).status == "error"


def test_a_joiner_handed_none_after_its_twin_forgot_it_is_settled(setup: Setup) -> None:
    _keep_a_result(setup)
    call = Call.tool("lookup", {"id": "1"})
    entered, release = threading.Event(), threading.Event()

    def slow() -> None:
        entered.set()
        assert release.wait(5)

    got: dict[str, object] = {}
    decided: dict[str, Authorization] = {}

    def one(name: str, fn: object) -> None:
        auth = decided[name] = setup.gate.authorize(setup.agent, call, **IDS)
        try:
            got[name] = setup.gate.run(auth, fn, failed=lambda _r: True, **IDS)  # type: ignore[arg-type]
        except Exception as exc:
            got[name] = exc

    twin = threading.Thread(target=one, args=("twin", slow))
    twin.start()
    assert entered.wait(5)
    joiner = threading.Thread(target=one, args=("joiner", lambda: "never"))
    joiner.start()
    _until_joined(setup.gate._sync())
    release.set()
    twin.join(5)
    joiner.join(5)
    assert got == {"twin": None, "joiner": None}
    assert _outcome(setup, decided["twin"]).status == "error"
    joined = _outcome(setup, decided["joiner"])
    assert (joined.status, joined.reasons) == ("error", (RESULT_REUSED,))


def test_a_forget_that_raises_keeps_nothing_from_being_settled(
    setup: Setup, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def broken(_self: SyncScheduler, _call: ToolCall, _result: object) -> None:
        raise KeyError("broken")

    monkeypatch.setattr(SyncScheduler, "forget_result", broken)
    auth = setup.gate.authorize(setup.agent, Call.tool("lookup", {"id": "1"}), **IDS)
    with caplog.at_level(logging.ERROR, "agentgate.gate"):
        assert setup.gate.run(auth, lambda: "bad", failed=lambda _r: True, **IDS) == "bad"
    assert _outcome(setup, auth).status == "error"
    (logged,) = [r.getMessage() for r in caplog.records if "result cache" in r.getMessage()]
    assert f"audit entry {auth.audit_index}" in logged and "KeyError" in logged
