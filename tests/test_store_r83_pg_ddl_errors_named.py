"""A PostgreSQL refusal of a part's tables that is neither a missing privilege nor a lock
names the store (its URL, password masked) and the part (review R83), as SQLite's ``cannot
create the audit tables in PATH: ...`` does. Until then ``ensure_schema`` passed it to the
store's catch-all, and ``store init`` on a role whose search path names no schema that exists
printed only ``PostgreSQL error: no schema has been selected to create in (SQLSTATE 3F000)``."""

from __future__ import annotations

import psycopg
import pytest
from _cli import cli
from psycopg.conninfo import conninfo_to_dict
from test_store_r73_pg_hostile import _as_role, _names_the_store_masked

from agentgate.errors import StoreError
from agentgate.store._postgres import PostgresStore
from agentgate.store.approvals import APPROVALS_DDL

pytestmark = pytest.mark.postgres

NO_SCHEMA = "&options=-c%20search_path%3Dnosuchschema"
"""A session whose search path names only a schema that does not exist."""


def test_a_part_whose_tables_cannot_be_created_names_itself_and_the_store(postgres_url: str) -> None:
    store = PostgresStore(postgres_url + NO_SCHEMA)
    try:
        with pytest.raises(StoreError) as refused:
            store.ensure_schema("approvals", APPROVALS_DDL)
    finally:
        store.close()
    said = str(refused.value)
    assert said.startswith("cannot create the approvals tables in the PostgreSQL store postgresql://"), said
    assert conninfo_to_dict(postgres_url)["dbname"] in said, said
    assert said.endswith(": no schema has been selected to create in (SQLSTATE 3F000)"), said
    assert "\n" not in said, said
    with psycopg.connect(postgres_url) as conn:  # nothing of the part made
        assert conn.execute("SELECT to_regclass('approvals')").fetchone() == (None,)


def test_store_init_names_the_store_masked_and_the_part(
    postgres_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """The command's one line, the password in the URL masked (the suite's server does not ask
    for it: it is there to be masked)."""
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute("CREATE ROLE r83_init LOGIN PASSWORD 'Zq3-secret'")
        try:
            code, _, err = cli(
                capsys,
                "store",
                "init",
                "--store",
                _as_role(postgres_url, "r83_init", "Zq3-secret") + NO_SCHEMA,
            )
        finally:
            conn.execute("DROP ROLE r83_init")
    assert code == 2
    assert err.startswith("agentgate: error: cannot create the "), err
    assert " tables in the PostgreSQL store postgresql://r83_init:***@" in err, err
    _names_the_store_masked(err, conninfo_to_dict(postgres_url)["dbname"])
    assert err.count("\n") == 1, err
