"""Review R93: an outcome whose COMMIT the server carried out but whose answer was lost
(``CommitUnknown``) is written once, even when the transaction that next carries it fails with
anything else (its BEGIN, a plain rollback, Ctrl-C). Until then such a failure forgot where the
outcome was appended, and the next commit wrote a second ``outcome`` entry for the call, saying
its reservation "was settled before this outcome"."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from test_gate_approvals import _agent, _gate
from test_gate_policy_change import MODEL

from agentgate import AgentIdentity, Gate
from agentgate.errors import CommitUnknown, StoreError
from agentgate.store._sqlite import SQLiteStore


class FlakyStore:
    """Makes ``store``'s next transactions end as ``then`` says: ``commit_unknown`` (committed,
    the answer lost), ``begin_fails`` (the store unreachable), ``rolled_back`` (rolled back with a
    lock timeout once the caller is done with it), ``interrupted`` (Ctrl-C, likewise)."""

    def __init__(self, store: SQLiteStore) -> None:
        self.then: str | None = None
        self._real = store.transaction
        store.transaction = self._transaction  # type: ignore[method-assign]

    @contextlib.contextmanager
    def _transaction(self, *args: Any, **kwargs: Any) -> Iterator[Any]:
        then, self.then = self.then, None
        if then == "begin_fails":
            raise StoreError("cannot start a transaction: the server is unreachable")
        with self._real(*args, **kwargs) as tx:
            yield tx
            if then == "rolled_back":
                raise StoreError("canceling statement due to lock timeout")
            if then == "interrupted":
                raise KeyboardInterrupt
        if then == "commit_unknown":
            raise CommitUnknown("COMMIT sent, its answer lost", session=None)


def _ran_once_with_lost_commit(tmp_path: Path) -> tuple[Gate, AgentIdentity, FlakyStore, int | None]:
    """A gate whose one call's outcome was committed by a flush that got ``CommitUnknown``."""
    store = SQLiteStore(tmp_path / "ag.db")
    gate = _gate(store)
    gate._outcomes.close()  # commits made here only, by flush or a decision
    agent = _agent(gate)
    flaky = FlakyStore(store)
    auth = gate.authorize(agent, MODEL, tokens=(5, 5))
    assert auth.allowed and auth.reservations
    gate.run(auth, lambda: "ok", spent=lambda _: (3, 3))
    flaky.then = "commit_unknown"
    gate.flush()
    return gate, agent, flaky, auth.audit_index


def _outcomes(gate: Gate, ref: int | None) -> list[tuple[str, int, tuple[str, ...]]]:
    return [
        (e.status, e.budget_delta, tuple(e.reasons))
        for e in gate.audit.entries()
        if e.kind == "outcome" and e.ref == ref
    ]


@pytest.mark.parametrize("then", ["begin_fails", "rolled_back", "interrupted"])
def test_an_outcome_committed_unacknowledged_is_not_written_again_after_a_failed_flush(
    tmp_path: Path, then: str
) -> None:
    gate, _, flaky, ref = _ran_once_with_lost_commit(tmp_path)
    try:
        flaky.then = then
        with contextlib.suppress(KeyboardInterrupt):
            gate.flush()
        gate.flush()
        assert _outcomes(gate, ref) == [("ok", 6, ())]
    finally:
        gate.close()


@pytest.mark.parametrize("then", ["begin_fails", "rolled_back"])
def test_an_outcome_committed_unacknowledged_is_not_written_again_after_a_failed_decision(
    tmp_path: Path, then: str
) -> None:
    gate, agent, flaky, ref = _ran_once_with_lost_commit(tmp_path)
    try:
        flaky.then = then
        with pytest.raises(StoreError):
            gate.authorize(agent, MODEL, tokens=(5, 5))
        gate.flush()
        assert _outcomes(gate, ref) == [("ok", 6, ())]
    finally:
        gate.close()
