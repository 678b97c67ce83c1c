"""A closed Gate says it is closed, whatever it is asked (review R59).

``Gate.authorize`` on a closed Gate raises ``StoreError`` (the store is closed), as does a grant
``Gate.issue`` would make; but an ``issue`` it would refuse (to a key the policy does not name, a
role its principal does not hold, from a key that is no trust anchor) and a ``delegate`` with no
parent raised ``AuditError`` ("audit log: entry not written: the store is closed"), as if the
log had failed to take the refusal. A refusal of a grant is now recorded as a refused call is (a
decision transaction of the Gate's), so a closed Gate raises the ``StoreError`` every other call
gives, and a log that cannot be written still raises ``AuditError``.

Real components: a Gate over a SQLite store."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from test_gate_r57_policy_chain import LOOKUP, NAMES, Rig, _policy

from agentgate.errors import AgentGateError, AuditError, ScopeCreep, StoreError
from agentgate.gate import Gate
from agentgate.keys import SigningKey
from agentgate.policy import parse_policy
from agentgate.store import SQLiteStore


@pytest.fixture
def rig(tmp_path: Path) -> Iterator[Rig]:
    keys = {name: SigningKey.generate() for name in NAMES}
    with Gate(parse_policy(_policy(keys), source="p.yaml"), SQLiteStore(tmp_path / "s.db")) as gate:
        yield Rig(gate, keys, gate.issue(keys["root"], name="sup", key=keys["sup"], role="sup"))


def _asks(rig: Rig) -> dict[str, Callable[[], Any]]:
    keys, gate = rig.keys, rig.gate
    return {
        "authorize": lambda: gate.authorize(rig.sup, LOOKUP),
        "issue": lambda: gate.issue(keys["root"], name="sup", key=keys["sup"], role="sup"),
        "issue_to_an_unknown_key": lambda: gate.issue(
            keys["root"], name="x", key=SigningKey.generate(), role="clerk"
        ),
        "issue_a_role_not_held": lambda: gate.issue(
            keys["root"], name="clerk", key=keys["clerk"], role="sup"
        ),
        "issue_from_no_trust_anchor": lambda: gate.issue(
            SigningKey.generate(), name="sup", key=keys["sup"], role="sup"
        ),
        "delegate": lambda: gate.delegate(
            rig.sup,
            name="h",
            key=SigningKey.generate(),
            capabilities=["tool:lookup"],
            ttl=timedelta(seconds=30),
        ),
        "delegate_without_a_parent": lambda: gate.delegate(
            None, name="h", key=SigningKey.generate(), capabilities=["tool:lookup"], ttl=timedelta(seconds=30)
        ),
        "delegate_beyond_the_rule": lambda: gate.delegate(
            rig.sup,
            name="h",
            key=SigningKey.generate(),
            capabilities=["tool:refund"],
            ttl=timedelta(seconds=30),
        ),
    }


@pytest.mark.parametrize(
    "ask",
    [
        "authorize",
        "issue",
        "issue_to_an_unknown_key",
        "issue_a_role_not_held",
        "issue_from_no_trust_anchor",
        "delegate",
        "delegate_without_a_parent",
        "delegate_beyond_the_rule",
    ],
)
def test_a_closed_gate_raises_store_error_for_every_grant_and_call(rig: Rig, ask: str) -> None:
    """Review R59: a closed Gate asked to issue to an unknown key raised AuditError, not the StoreError authorize gives."""
    rig.gate.close()
    with pytest.raises(AgentGateError) as raised:
        _asks(rig)[ask]()
    assert type(raised.value) is StoreError, repr(raised.value)
    assert "is closed" in str(raised.value)


def test_a_refused_issue_whose_entry_cannot_be_written_still_raises_audit_error(rig: Rig) -> None:
    """An open Gate whose log refuses the refusal's entry raises AuditError, nothing written."""
    with rig.gate.store.transaction() as tx:  # a real write failure inside SQLite, not a mock
        tx.execute(
            "CREATE TRIGGER refuse_audit BEFORE INSERT ON audit_log BEGIN SELECT RAISE(ABORT, 'disk full'); END"
        )
    before = len(list(rig.gate.audit.entries()))
    with pytest.raises(AuditError, match="disk full"):
        rig.gate.issue(rig.keys["root"], name="clerk", key=rig.keys["clerk"], role="sup")
    assert len(list(rig.gate.audit.entries())) == before


def test_a_refused_issue_on_an_open_gate_is_audited_as_before(rig: Rig) -> None:
    with pytest.raises(ScopeCreep) as refused:
        rig.gate.issue(rig.keys["root"], name="clerk", key=rig.keys["clerk"], role="sup")
    rig.gate.flush()
    entry = next(e for e in rig.gate.audit.entries() if e.index == refused.value.audit_index)
    assert entry.kind == "deny" and "scope_creep:role_not_held" in entry.reasons
