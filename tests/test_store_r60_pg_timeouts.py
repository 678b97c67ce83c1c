"""A PostgreSQL statement cancelled by the server's ``statement_timeout`` in the middle of a
decision (review R60): a refusal or a typed error, never an allow, and the same Gate decides
again once the statement can run."""

from __future__ import annotations

import threading

import pytest
from test_audit_reconciliation import _keys, _policy_text

from agentgate.capabilities import Call
from agentgate.errors import AuditError, StoreError
from agentgate.gate import Gate
from agentgate.policy import parse_policy
from agentgate.store._postgres import PostgresStore
from agentgate.store.audit import APPEND_LOCK

pytestmark = pytest.mark.postgres


def test_a_decision_whose_statement_the_server_cancels_is_never_an_allow(postgres_url: str) -> None:
    """Review R60 (checked, found correct): a decision waiting on the audit append lock that
    another session holds, under a ``statement_timeout`` (here from the URL's ``options``)
    shorter than the lock timeout, is cancelled by the server: it is refused or raises
    ``StoreError``/``AuditError`` naming the timeout, and the next decision goes through."""
    gate = Gate(
        parse_policy(_policy_text(), source="r60.yaml"),
        PostgresStore(postgres_url + "&options=-c%20statement_timeout%3D300"),
    )
    keys = _keys()
    boss = gate.issue(keys["root"], name="boss", key=keys["boss"], role="boss")
    holder = PostgresStore(postgres_url)
    holding, released = threading.Event(), threading.Event()

    def hold() -> None:
        with holder.transaction() as tx:
            tx.execute(f"SELECT pg_advisory_xact_lock({APPEND_LOCK})")
            holding.set()
            released.wait(timeout=60)

    thread = threading.Thread(target=hold)
    thread.start()
    try:
        assert holding.wait(timeout=30)
        try:
            auth = gate.authorize(boss, Call.model("scripted", {"n": "held"}), tokens=(1, 1))
        except (StoreError, AuditError) as exc:
            assert "statement timeout" in str(exc)
        else:
            assert not auth.allowed
    finally:
        released.set()
        thread.join()
    auth = gate.authorize(boss, Call.model("scripted", {"n": "free"}), tokens=(1, 1))
    assert auth.allowed, auth.reasons
    gate.run(auth, lambda: None, spent=lambda _: (1, 1))
    gate.close()
    holder.close()
