"""The authority is read in the vote's own transaction (review R60).

Under an approval gate whose quorum is above one, ``Gate.authorize`` records each valid approval
as one approver's vote in a transaction of its own, before the decision's. Since review R59 it
asks the authority engine first, so that no vote is recorded for a call it refuses; but it asked
outside that transaction, so a revocation committed between the two (by another process, into
the shared store) still had the vote recorded, then the call was refused ``revoked``. The store's
own guard (``approve`` refuses a request whose chain, kept in ``approval_grants``, is revoked)
hides this for requests asked since grant rows were kept; a request without them (asked by an
older release, still open after an upgrade) took the vote. The engine is now asked in the vote's
transaction, so whichever request it is, a call revoked before the vote records none.

The interleaving is made deterministic: the revocation is written through a second connection
just as the vote's transaction is about to open (wrapping ``_decision_transaction``), i.e. after
the old pre-check and before the vote.

Real components: a Gate over a SQLite store, and a second connection to it."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from _raw_sqlite import opened
from test_gate_r59_vote_after_authority import REFUND, _policy  # the same quorum-2 refund policy

from agentgate.authority import GrantRepository, issue, revoke
from agentgate.gate import AgentIdentity, Approval, Gate
from agentgate.keys import SigningKey
from agentgate.policy import parse_policy
from agentgate.store import SQLiteStore, Transaction


@dataclass
class Asked:
    path: Path
    gate: Gate
    keys: dict[str, SigningKey]
    sup: AgentIdentity
    request: dict[str, Any]

    def revoke_elsewhere(self) -> None:
        """Revoke sup's grant through another connection, as another process would."""
        other = SQLiteStore(self.path)
        try:
            repo = GrantRepository(other)
            revoke(repo, self.sup.grant_id, reason="revoked by another process")
            repo.close()
        finally:
            other.close()

    def revoke_as_the_vote_opens(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """Revoke elsewhere once, just before the next decision transaction (the vote's) opens."""
        opened = self.gate._decision_transaction
        armed = [True]

        def opening() -> AbstractContextManager[Transaction]:
            if armed:
                armed.clear()
                self.revoke_elsewhere()
            return opened()

        monkeypatch.setattr(self.gate, "_decision_transaction", opening)


@pytest.fixture
def asked(tmp_path: Path) -> Iterator[Asked]:
    """sup's refund asked for approval (quorum 2)."""
    keys = {name: SigningKey.generate() for name in ("root", "sup", "lead", "lead2")}
    sup = AgentIdentity("sup", keys["sup"], issue(keys["root"], keys["sup"].public, ["tool:refund"], ttl=600))
    path = tmp_path / "s.db"
    gate = Gate(parse_policy(_policy(keys), source="p.yaml"), SQLiteStore(path))
    try:
        auth = gate.authorize(sup, REFUND, call_id="c1")
        assert auth.needs_approval and auth.request is not None
        yield Asked(path, gate, keys, sup, dict(auth.request))
    finally:
        gate.close()


def _as_asked_before_grant_rows(asked: Asked) -> None:
    """The request as an older release left it: no grant rows (``approval_grants``)."""
    with opened(asked.path) as db:
        db.execute("DELETE FROM approval_grants WHERE approval_id = ?", (asked.request["id"],))


def _vote_then_entries(asked: Asked) -> tuple[Any, list[str]]:
    vote = Approval.sign(asked.request, asked.keys["lead"])
    auth = asked.gate.authorize(asked.sup, REFUND, call_id="c1", approval=vote)
    asked.gate.flush()
    return auth, [e.kind for e in asked.gate.audit.entries()]


def test_a_revocation_before_the_vote_records_no_vote_on_a_request_without_grant_rows(
    asked: Asked, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Review R60: the pre-check read revocation outside the vote's transaction; a revocation between them had the vote recorded."""
    _as_asked_before_grant_rows(asked)
    asked.revoke_as_the_vote_opens(monkeypatch)
    auth, kinds = _vote_then_entries(asked)
    assert auth.verdict == "deny" and [f.code for f in auth.findings] == ["revoked"]
    assert kinds == ["approval_required", "deny"]
    assert asked.gate.approvals.votes(asked.request["id"])[0] == ()


def test_a_revocation_before_the_vote_records_no_vote_on_a_request_with_grant_rows(
    asked: Asked, monkeypatch: pytest.MonkeyPatch
) -> None:
    asked.revoke_as_the_vote_opens(monkeypatch)
    auth, kinds = _vote_then_entries(asked)
    assert auth.verdict == "deny" and [f.code for f in auth.findings] == ["revoked"]
    assert kinds == ["approval_required", "deny"]
    assert asked.gate.approvals.votes(asked.request["id"])[0] == ()


def test_a_vote_on_a_live_chain_is_still_recorded(asked: Asked) -> None:
    auth, kinds = _vote_then_entries(asked)
    assert auth.needs_approval
    assert kinds == ["approval_required", "approval_given"]
