"""Review R72 (r72-rev-c): a review of ``_redact``'s masking of libpq key=value connection
strings and of ``GrantRepository.descendants_of``, the one statement ``grant revoke --holder``
lists the cut-off grants with."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import psycopg
import pytest

from agentgate.errors import StoreError
from agentgate.store import Store
from agentgate.store._postgres import PostgresStore, _redact
from agentgate.store._sqlite import SQLiteStore
from agentgate.store.grants import GrantRepository


@pytest.mark.parametrize(
    ("conninfo", "password"),
    [
        ("host=db password=pa://ss dbname=agentgate", "pa://ss"),
        ("password='s3c://ret' host=db", "s3c://ret"),
        ("application_name=http://x password=hunter2 host=db", "hunter2"),
        ("host=db sslpassword=key://phrase", "key://phrase"),
    ],
)
def test_a_key_value_string_with_a_url_in_a_value_has_its_password_masked(
    conninfo: str, password: str
) -> None:
    """Review R72: ``_redact`` took any string holding ``://`` for a URL, so a key=value string
    with a ``://`` in a value (the password's, or any other's) was shown whole, password and
    all, though libpq reads it as key=value (a URL starts with its scheme)."""
    parsed = psycopg.conninfo.conninfo_to_dict(conninfo)
    assert password in (parsed.get("password"), parsed.get("sslpassword"))  # libpq's reading
    shown = _redact(conninfo)
    assert password not in shown and "***" in shown, shown
    assert "host=db" in shown, shown  # the server is still named


def test_a_store_given_such_a_string_never_quotes_its_password() -> None:
    """Review R72: the store's own refusal (a parameter libpq does not know) quoted the password
    of a key=value string with a ``://`` in a value."""
    with pytest.raises(StoreError) as raised:
        PostgresStore("host=db password=pa://ss sslmod=require")
    assert "pa://ss" not in str(raised.value) and "ss " not in str(raised.value), raised.value
    assert "host=db" in str(raised.value)


@pytest.mark.parametrize(
    "conninfo",
    [
        "host=db password=ab\u00a0cd=ef",
        "host=db password=ab\u2003cd=ef port=5432",
        "host=db password=ab\x1ccd=ef",
        "host=db password=\u00a0cd=ef",
    ],
)
def test_a_password_holding_white_space_libpq_does_not_end_a_value_at_is_masked_whole(conninfo: str) -> None:
    """Review R72: ``_redact_conninfo`` ended an unquoted value at what Python calls white space
    (a no-break space, an em space, ``\\x1c``), where libpq ends it only at a space, tab or line
    break: the rest of such a password, ``cd=ef``, read as another parameter and was shown."""
    assert psycopg.conninfo.conninfo_to_dict(conninfo)["password"].endswith("cd=ef")  # libpq's reading
    shown = _redact(conninfo)
    assert "cd=ef" not in shown and "ef" not in shown.partition("password=")[2], shown
    assert shown.startswith("host=db password=***"), shown


@pytest.mark.parametrize(
    "url",
    [
        "postgresql://u:hunter2@db/agentgate?application_name=a=b",
        "postgres://u:hunter2@db:5432/agentgate?sslmode=require",
        "POSTGRESQL://u:hunter2@db/agentgate",
        "mysql://u:hunter2@db/agentgate?x=y",
    ],
)
def test_a_url_with_an_equals_sign_is_still_masked_as_a_url(url: str) -> None:
    """A URL (a ``scheme://`` at its start) holding an ``=`` is masked as a URL, its host and
    database shown."""
    shown = _redact(url)
    assert "hunter2" not in shown and "@db" in shown and "agentgate" in shown, shown


def _chain(store: Store, root: str, depth: int, *, now: int) -> list[str]:
    """Record ``root`` and a chain of ``depth`` grants below it (ids holding quotes and non-ASCII
    text), every other one expired, the third revoked; their ids, root first."""
    ids = [root] + [f"{root}/k'\"{i}é✓" for i in range(1, depth + 1)]
    with store.transaction() as tx:
        for i, gid in enumerate(ids):
            tx.execute(
                "INSERT INTO agentgate_grants (id, parent, issuer, audience, expires, token, recorded_at) "
                "VALUES (?, ?, 'did:i', 'did:a', ?, 't', 0)",
                (gid, ids[i - 1] if i else None, now - 1 if i % 2 else now + 600),
            )
        if depth >= 3:
            tx.execute(
                "INSERT INTO agentgate_revocations (grant_id, revoked_at) VALUES (?, ?)", (ids[3], now)
            )
    return ids


def test_descendants_of_is_the_union_of_the_per_grant_listings(store: Store) -> None:
    """Review R72 (found sound): on chains 0, 1, 64 and 65 deep, with expired and revoked grants
    and ids holding quotes and non-ASCII text, ``descendants_of`` lists what the per-grant
    ``descendants`` did, less the ids given, sorted; and nothing for no ids."""
    repo = GrantRepository(store)
    chains = {depth: _chain(store, f"root-{depth}", depth, now=1000) for depth in (0, 1, 64, 65)}
    held = [chains[0][0], chains[1][0], chains[64][0], chains[65][0], chains[65][1], chains[64][10]]
    per_grant = sorted({d for gid in held for d in repo.descendants(gid)} - set(held))
    assert repo.descendants_of(held) == per_grant
    assert chains[65][-1] in per_grant  # 64 levels below the held second grant of the chain
    assert repo.descendants_of([]) == []
    assert repo.descendants_of([chains[65][0]]) == sorted(chains[65][1:65])  # 64 levels, not 65


def test_the_listing_seeds_through_the_parent_index_on_sqlite(
    sqlite_store: SQLiteStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Review R72 (found sound): on SQLite the seeds (``json_each``) and every recursive step
    search ``agentgate_grants`` through its ``parent`` index, never scanning the table (the
    plan of the statement the listing runs, read from the real store)."""
    repo = GrantRepository(sqlite_store)
    plans: list[str] = []
    real = sqlite_store.query

    def planned(sql: str, params: Sequence[Any] = ()) -> Any:
        plans.extend(str(row[3]) for row in real("EXPLAIN QUERY PLAN " + sql, params))
        return real(sql, params)

    monkeypatch.setattr(sqlite_store, "query", planned)
    assert repo.descendants_of(["a", "b"]) == []
    assert sum("USING INDEX agentgate_grants_parent" in p for p in plans) == 2, plans
    assert not [p for p in plans if p.startswith("SCAN") and ("agentgate_grants" in p or p == "SCAN g")], (
        plans
    )


def test_many_ids_are_one_parameter(store: Store) -> None:
    """Review R72 (found sound): 40,000 ids are one statement on either store."""
    repo = GrantRepository(store)
    ids = _chain(store, "big", 2, now=1000)
    held = [ids[0]] + [f"absent-{i}" for i in range(40_000)]
    assert repo.descendants_of(held) == sorted(ids[1:])
