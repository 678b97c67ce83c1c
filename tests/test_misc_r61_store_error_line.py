"""A PostgreSQL failure in the grants store (agentgate/store/grants.py) is one line: the server's
primary message and SQLSTATE (``driver_error_line``), not psycopg's whole text with its ``LINE 1:``
and caret lines."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from agentgate.errors import StoreError
from agentgate.store._postgres import PostgresStore
from agentgate.store.grants import GrantRepository

pytestmark = pytest.mark.postgres

ROW = ("g1", None, "did:key:issuer", "did:key:holder", 2_000_000_000, "token")


@pytest.fixture
def repo(postgres_url: str) -> Iterator[GrantRepository]:
    store = PostgresStore(postgres_url)
    try:
        yield GrantRepository(store)
    finally:
        store.close()


def _renamed(repo: GrantRepository, table: str, column: str) -> None:
    """Schema drift: ``column`` of ``table`` renamed, so that a statement naming it fails with
    a text of several lines (``LINE 1: ...`` and a caret under the column)."""
    with repo.store.transaction() as tx:
        tx.execute(f"ALTER TABLE {table} RENAME COLUMN {column} TO {column}_old")


def _bound(repo: GrantRepository, act: Callable[[], object]) -> StoreError:
    """The StoreError of ``act`` run in a transaction bound to ``repo`` (``within``), as a gate runs it."""
    with pytest.raises(StoreError) as refused, repo.store.transaction() as tx, repo.within(tx):
        act()
    return refused.value


def test_a_bound_grant_record_that_fails_is_one_line(repo: GrantRepository) -> None:
    """Review R61: ``cannot record grants: {exc}`` quoted psycopg's whole text, its LINE 1 and
    caret lines included, into what the CLI prints as one error line."""
    _renamed(repo, "agentgate_grants", "recorded_at")
    error = _bound(repo, lambda: repo.record_grants([ROW], now=1))
    assert str(error) == (
        'cannot record grants: column "recorded_at" of relation "agentgate_grants" does not exist '
        "(SQLSTATE 42703)"
    )


def test_a_bound_revocation_and_its_read_that_fail_are_one_line(repo: GrantRepository) -> None:
    """Review R61: the revocation's write, a holder's revocations and the revocation read in a
    bound transaction each quoted the driver's text of several lines."""
    repo.record_grants([ROW], now=1)  # a grant to the holder, for revoke_holder to revoke
    _renamed(repo, "agentgate_revocations", "revoked_at")
    said = [
        str(_bound(repo, lambda: repo.revoke("g1", now=1))),
        str(_bound(repo, lambda: repo.revoke_holder("did:key:holder", now=1, holds=lambda *_: True))),
    ]
    _renamed(repo, "agentgate_revocations", "grant_id")
    said.append(str(_bound(repo, lambda: repo.revoked(["g1"]))))
    assert said[0] == (
        'cannot record the revocation: column "revoked_at" of relation "agentgate_revocations" '
        "does not exist (SQLSTATE 42703)"
    )
    assert said[1].startswith("cannot record the revocations: column ") and said[1].endswith(
        "(SQLSTATE 42703)"
    )
    assert said[2] == 'cannot read revocations: column "grant_id" does not exist (SQLSTATE 42703)'
    assert all("\n" not in line for line in said)


def test_a_nonce_that_cannot_be_recorded_is_one_line(repo: GrantRepository) -> None:
    """Review R61: the nonce statement's failure, bound or in its own round trip, quoted the
    driver's text of several lines."""
    _renamed(repo, "agentgate_nonces", "principal")
    consume = lambda: repo.consume_nonce("did:key:holder", "n1", 2_000_000_000, ["g1"])  # noqa: E731
    with pytest.raises(StoreError) as own:
        consume()
    said = [str(own.value), str(_bound(repo, consume))]
    for line in said:
        assert line.startswith('cannot record the invocation nonce: column "principal" ')
        assert line.endswith("does not exist (SQLSTATE 42703)") and "\n" not in line
