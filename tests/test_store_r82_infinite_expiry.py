"""Review R82: an approval request whose ``expires_at`` was edited outside agentgate to an infinity
(SQLite's REAL and PostgreSQL's DOUBLE PRECISION hold one) was read as a request that never
expires: ``approval list`` exited 0 listing it open with no expiry, and the Gate found it open for
its call and took approvals of it; review R63 refused only NaN and text. Every read of a request's
expiry (``get``, ``open_records``, ``open_for``, so ``approval list``, ``approval sign --store``
and the Gate) now refuses an infinity too, as a ``StoreError`` naming the table, the request and
the column (docs/cli.md, approval list: exit 2)."""

from __future__ import annotations

import contextlib
import sqlite3
import time
from pathlib import Path

import pytest
from test_gate_r82_decline_expired import POLICY, REFUND

from agentgate.cli.main import main
from agentgate.errors import StoreError
from agentgate.gate import Approval, Gate
from agentgate.keys import SigningKey
from agentgate.policy import parse_policy
from agentgate.store import SQLiteStore, Store
from agentgate.store.approvals import ApprovalStore

REQUESTER = "did:key:zRequester"


def _expiring(store: Store, expires_at: float) -> str:
    """One open request, then its ``expires_at`` set to ``expires_at`` outside agentgate; its id."""
    approval_id = ApprovalStore(store).request("h1", REQUESTER, time.time() + 300)
    with store.transaction() as tx:
        tx.execute("UPDATE approvals SET expires_at = ?", (expires_at,))
    return approval_id


@pytest.mark.parametrize("expires_at", [float("inf"), float("-inf")], ids=["inf", "-inf"])
def test_an_infinite_expiry_is_refused_naming_the_row(store: Store, expires_at: float) -> None:
    approval_id = _expiring(store, expires_at)
    approvals = ApprovalStore(store)
    with pytest.raises(
        StoreError, match=f"approvals: the row of request '{approval_id}' .*its expires_at is"
    ):
        approvals.get(approval_id)


def test_a_request_that_never_expires_is_not_open(store: Store) -> None:
    """Not listed as open for good, nor found open for its call: refused."""
    approval_id = _expiring(store, float("inf"))
    approvals = ApprovalStore(store)
    for read in (approvals.open_records, lambda: approvals.open_for("h1", REQUESTER)):
        with pytest.raises(StoreError, match=f"request '{approval_id}' .*its expires_at is inf"):
            read()


def test_approval_list_refuses_an_infinite_expiry_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "agentgate.db"
    with SQLiteStore(path) as store:
        ApprovalStore(store).request("h1", REQUESTER, time.time() + 300)
    with contextlib.closing(sqlite3.connect(path)) as db:
        db.execute("UPDATE approvals SET expires_at = 1e308 * 10")
        db.commit()
    capsys.readouterr()
    for extra in ([], ["--json"]):
        assert main(["approval", "list", "--store", str(path), *extra]) == 2
        out, err = capsys.readouterr()
        assert out == "" and err.count("\n") == 1 and "its expires_at is inf" in err, (out, err)


def test_the_gate_refuses_a_request_that_never_expires(store: Store) -> None:
    """The Gate asking for the call again, or taking or giving an approval of it, reads the row:
    refused, where it took the request as open for good."""
    keys = {name: SigningKey.generate() for name in ("root", "agent", "lead")}
    with Gate(parse_policy(POLICY.format(**{n: k.did for n, k in keys.items()})), store) as gate:
        agent = gate.issue(keys["root"], name="agent", key=keys["agent"], role="worker")
        asked = gate.authorize(agent, REFUND, call_id="c1")
        with store.transaction() as tx:
            tx.execute("UPDATE approvals SET expires_at = ?", (float("inf"),))
        yes = Approval.sign(asked.approval_payload(), keys["lead"])
        for read in (
            lambda: gate.authorize(agent, REFUND, call_id="c1"),
            lambda: gate.authorize(agent, REFUND, call_id="c1", approval=yes),
            lambda: gate.approve(asked.approval_payload(), keys["lead"]),
        ):
            with pytest.raises(StoreError, match="its expires_at is inf"):
                read()
