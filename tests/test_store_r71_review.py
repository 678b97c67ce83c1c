"""Review R71 of the paged ``GrantRepository.revoke_holder`` and the PostgreSQL busy error that
names a prepared transaction (helper r71-pg's change), on SQLite and PostgreSQL.

What holds:
- the paged revocation returns the same ``(revoked, already, untrusted)`` and writes the same
  revocations as the one-statement code it replaced, on random small stores (rows of several
  audiences, some revoked before, some whose token does not hold, ids of ``also`` that are the
  holder's own, another's, or recorded nowhere), for a page smaller and larger than the holder's;
- inside a caller's transaction (``within``), a call that fails midway leaves that transaction
  as it found it: no revocation of its earlier pages stays behind, and a second call in the same
  transaction works (on PostgreSQL the first call's cursor is gone with it);
- the SQL command the busy error suggests for a prepared transaction names its gid exactly,
  on one line, whatever the gid holds (quotes, backslashes, line breaks, controls).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Collection

import pytest

from agentgate.store import Store
from agentgate.store import grants as grants_module
from agentgate.store._base import Transaction
from agentgate.store._postgres import _prepared_holder
from agentgate.store.grants import GrantRepository

HOLDER = "did:key:holder"
AUDIENCES = [HOLDER, "did:key:other", "did:key:third"]


def _old_revoke_holder(
    tx: Transaction,
    audience: str,
    now: int,
    reason: str,
    holds: Callable[[object, str], bool],
    also: Collection[str],
) -> tuple[list[str], list[str], list[str]]:
    """The one-statement logic that R71 replaced (6e902529), verbatim but for its names."""
    read = (
        "SELECT g.id, g.token, CASE WHEN r.grant_id IS NULL THEN 0 ELSE 1 END FROM agentgate_grants g "
        "LEFT JOIN agentgate_revocations r ON r.grant_id = g.id WHERE "
    )
    rows = tx.execute(f"{read}g.audience = ? ORDER BY g.id", (audience,))
    trusted = [(str(gid), was) for gid, token, was in rows if holds(token, str(gid))]
    untrusted = sorted({str(gid) for gid, _, _ in rows} - {gid for gid, _ in trusted})
    elsewhere = sorted(set(also) - {str(gid) for gid, _, _ in rows})
    for i in range(0, len(elsewhere), 200):
        part = elsewhere[i : i + 200]
        found = tx.execute(f"{read}g.id IN ({','.join('?' * len(part))})", part)
        trusted += [(str(gid), was) for gid, token, was in found if holds(token, str(gid))]
    held = [gid for gid, _ in trusted]
    todo = [gid for gid, was in trusted if not was]
    revoked: set[str] = set()
    for i in range(0, len(todo), 200):
        part = todo[i : i + 200]
        values = ",".join(["(?, ?, ?)"] * len(part))
        params = [v for gid in part for v in (gid, now, reason[:500])]
        inserted = tx.execute(
            f"INSERT INTO agentgate_revocations (grant_id, revoked_at, reason) VALUES {values} "
            "ON CONFLICT DO NOTHING RETURNING grant_id",
            params,
        )
        revoked.update(str(r[0]) for r in inserted)
    return sorted(revoked), sorted(set(held) - revoked), untrusted


def _holds(token: object, grant_id: str) -> bool:
    """A stand-in for the authority layer's token check: a row's token says whether it holds."""
    return token == f"holds:{grant_id}"


class _Undone(Exception):
    """Raised to roll a transaction back once its result is read."""


def _random_store(store: Store, rng: random.Random) -> tuple[list[str], list[str]]:
    """Rows of random audiences, tokens and revocations; returns the ids and an ``also``."""
    ids = [f"{rng.getrandbits(64):016x}" for _ in range(rng.randrange(0, 14))]
    with store.transaction() as tx:
        for gid in ids:
            token = f"holds:{gid}" if rng.random() < 0.7 else "garbage"
            tx.execute(
                "INSERT INTO agentgate_grants (id, parent, issuer, audience, expires, token, recorded_at) "
                "VALUES (?, ?, ?, ?, ?, ?, ?)",
                (gid, None, "did:key:root", rng.choice(AUDIENCES), 2_000_000_000, token, 1),
            )
            if rng.random() < 0.3:
                tx.execute("INSERT INTO agentgate_revocations (grant_id, revoked_at) VALUES (?, ?)", (gid, 1))
    also = [gid for gid in ids if rng.random() < 0.4] + ["f" * 16] * rng.randrange(0, 2)
    return ids, also


def _revocations(store: Store) -> set[tuple[str, int]]:
    return {
        (str(gid), int(at))
        for gid, at in store.query("SELECT grant_id, revoked_at FROM agentgate_revocations")
    }


@pytest.mark.parametrize("page", [1, 2, 1000])
def test_the_paged_revocation_returns_and_writes_what_the_one_statement_code_did(
    store: Store, page: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Review R71: the holder's rows are now read, checked and revoked a page at a time (a SQLite
    rowid seek, a PostgreSQL cursor) where one statement read them all: the three lists and the
    revocations written must be those of the old code for the same store, whatever the page."""
    monkeypatch.setattr(grants_module, "_HOLDER_PAGE", page)
    repo = GrantRepository(store)
    rng = random.Random(7100 + page)
    seen = [0, 0, 0]  # rounds with some revoked, already revoked, untrusted: the lists are exercised
    try:
        for _ in range(12):
            with store.transaction() as tx:
                tx.execute("DELETE FROM agentgate_revocations")
                tx.execute("DELETE FROM agentgate_grants")
            _, also = _random_store(store, rng)
            with pytest.raises(_Undone), store.transaction() as tx:  # the old code, rolled back
                old = _old_revoke_holder(tx, HOLDER, 5, "leaked", _holds, also)
                old_written = _revocations(tx)
                raise _Undone

            new = repo.revoke_holder(HOLDER, now=5, reason="leaked", holds=_holds, also=also)

            assert new == old, (new, old)
            seen = [n + bool(got) for n, got in zip(seen, new, strict=True)]
            with store.transaction() as tx:
                assert _revocations(tx) == old_written
        assert all(seen), seen
    finally:
        repo.close()


def _revocations(tx: Transaction) -> set[tuple[str, int]]:
    return {
        (str(gid), int(at))
        for gid, at in tx.execute("SELECT grant_id, revoked_at FROM agentgate_revocations")
    }


def test_a_call_that_fails_midway_in_the_callers_transaction_leaves_it_as_it_was(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Review R71: paged, a call inside the caller's transaction (``within``, which leaves a failed
    statement's transaction to the caller) wrote its first pages' revocations before a later
    page failed: caught, they stayed in the transaction, and the retry reported those grants as
    ``already`` revoked, so the caller's audit log missed their ``revoke`` entries; on PostgreSQL
    the retry could not even start (``cursor "agentgate_holder_rows" already exists``). Now the
    call is a savepoint: a failure leaves nothing of it behind, and a retry revokes all."""
    monkeypatch.setattr(grants_module, "_HOLDER_PAGE", 2)
    repo = GrantRepository(store)
    ids = [f"{i:064x}" for i in range(1, 6)]
    with store.transaction() as tx:
        for gid in ids:
            tx.execute(
                "INSERT INTO agentgate_grants (id, parent, issuer, audience, expires, token, recorded_at) "
                "VALUES (?, ?, ?, ?, ?, ?, ?)",
                (gid, None, "did:key:root", HOLDER, 2_000_000_000, f"holds:{gid}", 1),
            )
    checked: list[str] = []

    def failing(token: object, grant_id: str) -> bool:
        checked.append(grant_id)
        if len(checked) == 4:  # in the second page: the first page's revocations are written
            raise RuntimeError("a token check failed")
        return _holds(token, grant_id)

    try:
        with store.transaction() as tx, repo.within(tx):
            with pytest.raises(RuntimeError, match="a token check failed"):
                repo.revoke_holder(HOLDER, now=5, reason="leaked", holds=failing)
            assert _revocations(tx) == set()
            done = repo.revoke_holder(HOLDER, now=6, reason="leaked", holds=_holds)
        assert done == (ids, [], [])
        with store.transaction() as tx:
            assert _revocations(tx) == {(gid, 6) for gid in ids}
    finally:
        repo.close()


GIDS = [
    "tool-1",
    "it's",
    "x\\'; SELECT pg_sleep(0); --",
    "two\nlines",
    "tab\tand\rcr\x1b[2J",
    "r\u202etl-override",
    "caf\u00e9 \U0001f600",
    "\\" * 199,
]


@pytest.mark.postgres
@pytest.mark.parametrize("conforming", ["on", "off"])
def test_the_suggested_command_names_the_prepared_transaction_exactly_on_one_line(
    postgres_url: str, conforming: str
) -> None:
    """Review R71: the busy error suggests ``ROLLBACK PREPARED '<gid>'`` with the gid's quotes
    doubled and nothing else: a gid (chosen by whoever prepared it: the application role may)
    with a line break or a terminal control split or rewrote the one-line error, and one with a
    backslash read back, in a session with ``standard_conforming_strings`` off, as another text
    (``x\\'; ...``: a quote that ends the literal early, the rest run as SQL once pasted). Now
    the literal is one line and reads back as the gid whatever that setting."""
    import psycopg

    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute(f"SET standard_conforming_strings = {conforming}")
        conn.execute("SET escape_string_warning = off")
        for gid in GIDS:
            said = _prepared_holder(gid, None)
            assert said.isprintable(), repr(said)
            literal = said.split("ROLLBACK PREPARED ", 1)[1].removesuffix(" (or COMMIT PREPARED)")
            row = conn.execute(f"SELECT {literal}").fetchone()  # type: ignore[arg-type]
            assert row == (gid,), (gid, literal, row)
            assert f"the prepared transaction {literal} (prepared" in said, said
