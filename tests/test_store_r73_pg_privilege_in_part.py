"""Review R73 (reviewer): a role without its rights on agentgate's tables is named as such, with
the store, by ``PostgresStore``'s transaction (test_store_r73_pg_hostile.py), but a part that
says the driver's error in its own words inside the transaction (``GrantRepository.revoked``
bound to one: ``cannot read revocations: permission denied ...``) was re-raised as it was:
neither the store nor what to grant. On the suite's real server."""

from __future__ import annotations

import pytest
from psycopg.conninfo import conninfo_to_dict
from test_store_r73_pg_hostile import _as_role, _names_the_store_masked
from test_store_r73_pg_hostile import limited_role as limited_role  # the fixture

from agentgate.authority import GrantRepository
from agentgate.errors import StoreError
from agentgate.store._postgres import PostgresStore

pytestmark = pytest.mark.postgres


def test_a_part_refused_a_right_inside_a_transaction_names_the_store(
    postgres_url: str, limited_role: str
) -> None:
    """Review R73: the part's words stay (what it was doing), and the store and the set-up
    section that lists the grants are named, as for a statement run by the store itself."""
    owner = PostgresStore(postgres_url)
    try:
        GrantRepository(owner)
    finally:
        owner.close()
    store = PostgresStore(_as_role(postgres_url, limited_role, "Zq2-limited"))
    try:
        repo = GrantRepository(store)
        refusal = "cannot read revocations: permission denied"
        with pytest.raises(StoreError, match=refusal) as refused, store.transaction() as tx, repo.within(tx):
            repo.revoked(["ab" * 32])
    finally:
        store.close()
    said = str(refused.value)
    _names_the_store_masked(said, conninfo_to_dict(postgres_url)["dbname"])
    assert "PostgreSQL set-up" in said, said


def test_a_refusal_naming_the_store_already_is_said_once(postgres_url: str, limited_role: str) -> None:
    """Review R73: the store's own refusal of a role without CREATE (``... is missing in the
    PostgreSQL store URL and this role may not create it``), raised inside its transaction, is
    not said again in other words around it: the store named once, no ``PostgreSQL error``."""
    store = PostgresStore(_as_role(postgres_url, limited_role, "Zq2-limited"))
    try:
        with pytest.raises(StoreError, match="may not create it") as refused:
            GrantRepository(store)
    finally:
        store.close()
    said = str(refused.value)
    assert said.count(f"@/{conninfo_to_dict(postgres_url)['dbname']}?") == 1, said
    assert not said.startswith("PostgreSQL error"), said
