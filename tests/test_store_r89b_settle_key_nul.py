"""``store.once.settle`` of a key holding a NUL character is refused as a key no call has, with
the same answer on both stores (review R89b). Review R89 made a NUL in a reservation id agree on
both stores, but not the other lookup of the same function, its key: SQLite said no call has it
(``SettlementRefused``) and PostgreSQL refused it with a ``StoreError`` about its text (the store
failing). No key agentgate makes (hexadecimal) holds one; only the library can give one, since
argv cannot hold a NUL."""

from __future__ import annotations

import pytest
from test_gate_once import PAY, RUN, _policy_text

from agentgate.errors import SettlementRefused
from agentgate.gate import AgentIdentity, Gate
from agentgate.keys import SigningKey
from agentgate.policy import parse_policy
from agentgate.store import Store
from agentgate.store.once import settle


def test_settling_a_key_with_nul_is_refused_as_no_call_on_both_stores(store: Store) -> None:
    keys = {n: SigningKey.generate() for n in ("root", "agent")}
    with Gate(parse_policy(_policy_text(keys), source="once.yaml"), store) as gate:
        agent: AgentIdentity = gate.issue(keys["root"], name="agent", key=keys["agent"], role="worker")
        auth = gate.authorize(agent, PAY, call_id="c1", run_id=RUN)  # its worker then died
        assert auth.allowed and auth.once_key is not None
        gate.flush()
        size = gate.audit.size()
        bad = auth.once_key[:5] + "\x00"
        with pytest.raises(SettlementRefused, match=r"^no call that must run once has the key '\w{5}\\x00'$"):
            settle(store, gate.audit, bad, ran=True, by="ops", min_age_s=0)
        assert gate.audit.size() == size
        assert store.query("SELECT state FROM agentgate_once") == [("started",)]
