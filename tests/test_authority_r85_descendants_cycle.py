"""Review R85: ``GrantRepository.descendants`` (what ``grant revoke ID`` lists as dead with the
grant) on rows planted to form a cycle of parents. No issued chain loops (a grant's id hashes
its parent's), but a row is the word of whoever may insert into ``agentgate_grants``: until R85
two rows naming each other listed 64 ids for the first, two distinct, the revoked grant itself
among them. Now each id is listed once and the grant itself never, as ``descendants_of``
(``grant revoke --holder``) lists them, on SQLite and PostgreSQL: the two share one statement.
"""

from __future__ import annotations

from agentgate.authority import GrantRepository
from agentgate.store import Store

X, Y, Z = ("a" * 64, "b" * 64, "c" * 64)


def _plant(store: Store, *rows: tuple[str, str]) -> None:
    with store.transaction() as tx:
        for grant_id, parent in rows:
            tx.execute(
                "INSERT INTO agentgate_grants (id, parent, issuer, audience, expires, recorded_at, token) "
                "VALUES (?, ?, ?, ?, ?, ?, ?)",
                (grant_id, parent, "i", "a", 9_999_999_999, 0, "t"),
            )


def test_a_cycle_of_two_rows_lists_the_other_once_and_never_the_grant_itself(store: Store) -> None:
    repo = GrantRepository(store)
    _plant(store, (Y, X), (X, Y))
    assert repo.descendants(X) == [Y]
    assert repo.descendants(Y) == [X]
    assert repo.descendants_of([X]) == [Y]


def test_a_longer_cycle_is_listed_nearest_first_each_once(store: Store) -> None:
    repo = GrantRepository(store)
    _plant(store, (Z, Y), (Y, X), (X, Z))  # X -> Y -> Z -> X
    assert repo.descendants(X) == [Y, Z]
    assert repo.descendants(Z) == [X, Y]
    assert repo.descendants_of([Y]) == [X, Z]
    assert repo.descendants_of([X, Y]) == [Z]
