"""``agentgate budget held`` and ``budget settle`` name the ``allow`` entry that made a held
reservation, also after the clock stepped back.

Until review R61 the entry was found by a binary search of the log by time from the
reservation's time, then the first ``allow`` of its grant and amount within 5 s: times are not
monotonic across a step back, so a reservation made after a 2 s step back was given the ``allow``
of an earlier call (same grant, same amount, stamped later), and ``budget settle`` wrote an
outcome referring to that other call. Now a reservation records the index its ``allow`` entry
takes (the log's next index in the decision's transaction, which holds the log's lock), checked
against that entry when read.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from test_gate_once import _new as _once_new
from test_gate_once import _policy_text

from agentgate.audit import entry as entry_module
from agentgate.capabilities import Call
from agentgate.gate import Gate
from agentgate.policy import parse_policy
from agentgate.store import SQLiteStore
from agentgate.store.held import held, settle_held


class _SteppedBack:
    """The ``time`` module as ``utc_now`` reads it after the host's clock stepped back 2 s."""

    gmtime = staticmethod(time.gmtime)

    @staticmethod
    def time_ns() -> int:
        return time.time_ns() - 2_000_000_000


def test_a_reservation_made_after_a_step_back_names_its_own_allow(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Review R61: after a 2 s step back, held and settle named the earlier call's allow."""
    keys, path, agent = _once_new(tmp_path)
    with Gate(parse_policy(_policy_text(keys), source="once.yaml"), SQLiteStore(path)) as gate:
        first = gate.authorize(agent, Call.tool("lookup", {"id": "o-1"}))
        gate.flush()
        monkeypatch.setattr(entry_module, "time", _SteppedBack)
        second = gate.authorize(agent, Call.tool("lookup", {"id": "o-2"}))
        gate.flush()
        monkeypatch.undo()
        assert first.allowed and second.allowed
        audit, store = gate.audit, gate.store
        assert audit.entry(second.audit_index).time < audit.entry(first.audit_index).time  # stepped back
        listed = {r.id: r.allow_index for r in held(store, audit, min_age_s=0)}
        assert listed == {
            first.reservations[0][0]: first.audit_index,
            second.reservations[0][0]: second.audit_index,
        }
        found, index = settle_held(store, audit, second.reservations[0][0], ran=False, by="ops", min_age_s=0)
        assert found.allow_index == second.audit_index
        assert audit.entry(index).ref == second.audit_index
