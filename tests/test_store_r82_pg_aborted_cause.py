"""Review R82: on PostgreSQL a statement that fails aborts its transaction, and every statement
after it is refused with ``current transaction is aborted`` (SQLSTATE 25P02), which says nothing
of why. A part that catches the first error and answers it its own way (a decision whose
revocation read is refused denies, fail closed) then met that refusal recording its answer: a
Gate whose role may not read agentgate_revocations raised the audit log's ``a statement failed:
current transaction is aborted``, neither the table, the right nor the fix. The refusal now
names the statement that aborted the transaction. On the suite's real server."""

from __future__ import annotations

import uuid
from typing import Any

import psycopg
import pytest
from test_audit_reconciliation import _keys, _policy_text
from test_store_postgresql_operations import _docs_grants, _role_url

from agentgate.capabilities import Call
from agentgate.cli.main import main
from agentgate.errors import StoreError
from agentgate.gate import Gate
from agentgate.policy import parse_policy
from agentgate.store._postgres import PostgresStore

pytestmark = pytest.mark.postgres


def test_a_gate_whose_role_may_not_read_revocations_says_so_and_records_nothing(
    postgres_server: Any, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGENTGATE_LOG_KEY", str(tmp_path / "log.key"))
    url = postgres_server.create_database()
    assert main(["store", "init", "--store", url]) == 0
    role = "r82_" + uuid.uuid4().hex[:8]
    with PostgresStore(url) as owner, owner.transaction() as tx:
        tx.execute(f"CREATE ROLE {role} LOGIN")
        for statement in _docs_grants(role):
            tx.execute(statement)
        tx.execute(f"REVOKE SELECT ON agentgate_revocations FROM {role}")  # the operator's slip
    keys = _keys()
    with Gate(
        parse_policy(_policy_text(), source="r82.yaml"), PostgresStore(_role_url(url, postgres_server, role))
    ) as gate:
        boss = gate.issue(keys["root"], name="boss", key=keys["boss"], role="boss")
        with PostgresStore(url) as owner:
            entries = owner.query("SELECT count(*) FROM audit_log")
        with pytest.raises(StoreError) as refused:
            gate.authorize(boss, Call.tool("lookup", {"id": "1"}))
    said = str(refused.value)
    assert "permission denied for table agentgate_revocations" in said, said
    assert "docs/operations.md, PostgreSQL set-up" in said and "nothing was written" in said, said
    assert "current transaction is aborted" not in said, said
    with PostgresStore(url) as owner:
        assert owner.query("SELECT count(*) FROM audit_log") == entries


@pytest.fixture
def names(postgres_url: str) -> Any:
    store = PostgresStore(postgres_url)
    store.ensure_schema(
        "r82_names", {"sqlite": "", "postgresql": "CREATE TABLE r82_names (name TEXT PRIMARY KEY)"}
    )
    yield store
    store.close()


def test_a_statement_after_an_aborting_one_names_it(names: PostgresStore) -> None:
    with pytest.raises(StoreError) as refused, names.transaction() as tx:
        with pytest.raises(psycopg.errors.UndefinedTable):  # caught by a part, answered its own way
            tx.execute("SELECT name FROM r82_no_such_table")
        tx.execute("INSERT INTO r82_names (name) VALUES ('after')")
    said = str(refused.value)
    assert 'relation "r82_no_such_table" does not exist' in said and "nothing was written" in said, said
    assert "lists what to grant" not in said, said  # no right is missing here
    assert names.query("SELECT name FROM r82_names") == []


def test_the_cause_named_is_the_failure_after_the_last_savepoint_rolled_back(names: PostgresStore) -> None:
    with pytest.raises(StoreError) as refused, names.transaction() as tx:
        tx.execute("INSERT INTO r82_names (name) VALUES ('kept')")
        with pytest.raises(psycopg.errors.UndefinedTable), tx.savepoint("r82"):
            tx.execute("SELECT name FROM r82_first_missing")  # undone: the transaction goes on
        tx.execute("INSERT INTO r82_names (name) VALUES ('second')")
        with pytest.raises(psycopg.errors.UniqueViolation):
            tx.execute("INSERT INTO r82_names (name) VALUES ('kept')")
        tx.execute("SELECT 1")
    said = str(refused.value)
    assert "duplicate key value" in said and "r82_first_missing" not in said, said


def test_a_block_that_goes_on_past_a_failure_names_it_at_its_end(names: PostgresStore) -> None:
    with (
        pytest.raises(StoreError, match="went on after it") as refused,
        names.transaction() as tx,
        pytest.raises(psycopg.errors.UndefinedTable),  # a part answered it, and wrote nothing after
    ):
        tx.execute("SELECT name FROM r82_gone")
    assert 'relation "r82_gone" does not exist' in str(refused.value), refused.value
