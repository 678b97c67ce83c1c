"""Once-only calls (agentgate/store/once.py): a call that is not idempotent is started at most once,
and settling one by hand is refused while it may still be running."""

from __future__ import annotations

import threading

import pytest
from test_audit_reconciliation import _keys
from test_gate_approvals import r27_gate as r27_gate  # the fixture

from agentgate.capabilities import Call
from agentgate.gate import Gate


def test_a_call_still_running_is_not_settled_by_hand_as_lost(r27_gate: Gate) -> None:
    gate = r27_gate
    """``agentgate tasks unsettled`` lists a once-only call that is still running as ``started``,
    like one whose process died, and ``tasks settle --not-run`` settles it: the log then holds
    'settled by hand: it did not run' and, when the call ends, its real ``ok`` outcome for the same
    allow, and the call may be decided and run again (in another process: a second payment).
    ``settle`` should refuse a ``started`` call that may still be running (its allow younger than
    a minimum age, e.g. ``--older-than``, default 15 minutes) unless told otherwise."""

    from agentgate.errors import InputError
    from agentgate.store.once import settle

    keys = _keys()
    boss = gate.issue(keys["root"], name="boss", key=keys["boss"], role="boss")
    allowed = gate.authorize(boss, Call.tool("explode", {}), call_id="pay-1")
    release, ran = threading.Event(), threading.Event()

    def tool() -> bool:
        ran.set()
        return release.wait(10)

    running = threading.Thread(target=lambda: gate.run(allowed, tool, call_id="pay-1"))
    running.start()
    try:
        assert ran.wait(10)  # the call is running (a 0.2 s sleep was a guess a loaded machine could miss)
        ((key, state),) = gate.store.query("SELECT key, state FROM agentgate_once")
        assert state == "started"
        with pytest.raises(InputError):
            settle(gate.store, gate.audit, key, ran=False, by="ops", reason="looked stuck")
    finally:
        release.set()
        running.join()
