"""The grant repository (agentgate/store/grants.py): grants are sought by their holder through an
index, also on a store made before the index existed; revoking a holder's grants reaches every one
of them, and a revocation refuses every chain below it; ``descendants`` lists every generation;
``delegated`` names only unexpired grants to that audience; a live invocation's nonce is a replay
whatever another process or a host clock ahead prunes."""

from __future__ import annotations

import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from _raw_sqlite import opened
from test_store_approvals import AGENT, ALICE, BOB

from agentgate.authority import issue, record, revoke
from agentgate.authority._revocation import revoke_holder
from agentgate.keys import SigningKey
from agentgate.store import SQLiteStore, Store, open_store
from agentgate.store import grants as grants_module
from agentgate.store.grants import GrantRepository

_HOLDER_READ = (
    "SELECT g.id FROM agentgate_grants g LEFT JOIN agentgate_revocations r ON r.grant_id = g.id "
    "WHERE g.audience = ? ORDER BY g.id"
)


def _plan(path: Path) -> str:
    with opened(path) as conn:
        return " | ".join(
            str(row[-1]) for row in conn.execute("EXPLAIN QUERY PLAN " + _HOLDER_READ, ("did:key:zA",))
        )


def _any(token: object, grant_id: str) -> bool:
    """Trusts every row: these rows' tokens are placeholders (``authority.revoke_holder`` checks
    real ones, tests/test_authority_r68_holder_rows.py)."""
    return True


def _rows(n: int, audience: str) -> list[tuple[str, str | None, str, str, int, str]]:
    return [(f"{audience}-g{i}", None, "did:key:zIssuer", audience, 2_000_000_000, "token") for i in range(n)]


def test_a_new_sqlite_store_seeks_a_holders_grants_by_index(tmp_path: Path) -> None:
    path = tmp_path / "a.db"
    store = open_store(str(path))
    repo = GrantRepository(store)
    try:
        repo.record_grants(_rows(3, "did:key:zA") + _rows(2, "did:key:zB"), now=1)
        assert "agentgate_grants_audience" in _plan(path)
        assert "SCAN g" not in _plan(path)
        assert repo.revoke_holder("did:key:zA", now=2, holds=_any) == (
            ["did:key:zA-g0", "did:key:zA-g1", "did:key:zA-g2"],
            [],
            [],
        )
        assert repo.revoke_holder("did:key:zA", now=3, holds=_any) == (
            [],
            ["did:key:zA-g0", "did:key:zA-g1", "did:key:zA-g2"],
            [],
        )
    finally:
        repo.close()
        store.close()


def test_a_store_made_before_the_index_gets_it_when_opened_and_keeps_its_grants(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    with opened(path) as conn:  # the grants table as earlier versions made it
        conn.executescript(
            "CREATE TABLE agentgate_grants (id TEXT PRIMARY KEY, parent TEXT, issuer TEXT NOT NULL, "
            "audience TEXT NOT NULL, expires INTEGER NOT NULL, recorded_at INTEGER NOT NULL, token TEXT NOT NULL);"
            "CREATE INDEX agentgate_grants_parent ON agentgate_grants (parent);"
            "CREATE TABLE agentgate_revocations (grant_id TEXT PRIMARY KEY, revoked_at INTEGER NOT NULL, "
            "reason TEXT NOT NULL DEFAULT '');"
        )
        conn.executemany(
            "INSERT INTO agentgate_grants VALUES (?, ?, ?, ?, ?, 1, ?)",
            [
                (gid, parent, issuer, aud, exp, tok)
                for gid, parent, issuer, aud, exp, tok in _rows(2, "did:key:zOld")
            ],
        )
    assert "SCAN g" in _plan(path)
    store = open_store(str(path))
    repo = GrantRepository(store)
    try:
        assert "agentgate_grants_audience" in _plan(path)
        assert repo.revoke_holder("did:key:zOld", now=2, holds=_any) == (
            ["did:key:zOld-g0", "did:key:zOld-g1"],
            [],
            [],
        )
    finally:
        repo.close()
        store.close()


def test_revoke_holder_reaches_every_grant_past_one_insert_batch(tmp_path: Path) -> None:
    # Kills: GrantRepository.revoke_holder writing only its first batch of 200 ids (a key that
    # holds more grants than that kept the rest alive), and one reporting as "already" revoked
    # what it revoked now.
    root, agent, other = SigningKey.generate(), SigningKey.generate(), SigningKey.generate()
    store = SQLiteStore(tmp_path / "ag.db")
    repo = GrantRepository(store)
    try:
        chains = [issue(root, agent.public, ["tool:lookup"], ttl=600) for _ in range(205)]
        for chain in chains:
            record(repo, chain)
        bystander = issue(root, other.public, ["tool:lookup"], ttl=600)
        record(repo, bystander)
        revoke(repo, chains[100])  # revoked before: reported as such, not again
        done = revoke_holder(repo, agent.did, reason="leaked")
        ids = sorted(c.id for c in chains)
        assert done.already == (chains[100].id,)
        assert sorted((*done.revoked, *done.already)) == ids and len(done.revoked) == 204
        rows = {str(r[0]) for r in store.query("SELECT grant_id FROM agentgate_revocations")}
        assert rows == set(ids)  # every one of the holder's, and not the bystander's
        again = revoke_holder(repo, agent.public)
        assert (again.revoked, again.already) == ((), tuple(ids))
    finally:
        repo.close()
        store.close()


# Grants, revocations and nonces: each test below names the hand-made mutant it kills (what the
# mutant did) and the rule it pins, and runs on SQLite and on PostgreSQL (the ``store``
# fixture), except where said.


def _grant(
    gid: str, parent: str | None, audience: str, expires: int
) -> tuple[str, str | None, str, str, int, str]:
    return (gid, parent, "did:key:zIssuer", audience, expires, f"token-{gid}")


def test_revoke_holder_revokes_every_grant_past_a_chunk_boundary(store: Store) -> None:
    """Mutant: ``revoke_holder`` wrote its revocations in chunks of 199 of every 200 ids.

    Rule: revoking a holder revokes every grant recorded to it, however many; none is left
    live (e.g. the 200th of 401)."""
    repo = GrantRepository(store)
    try:
        now = int(time.time())
        ids = [f"{i:064x}" for i in range(401)]
        repo.record_grants([_grant(g, None, AGENT, now + 3600) for g in ids], now=now)
        revoked, already, _ = repo.revoke_holder(AGENT, now=now, reason="key lost", holds=_any)
        assert revoked == sorted(ids) and already == []
        assert repo.revoked(ids) == set(ids)
        for i, gid in enumerate(ids):
            assert repo.consume_nonce(AGENT, f"n{i}", now + 60, [gid]) == "revoked"
    finally:
        repo.close()


def test_a_revoked_ancestor_refuses_every_chain_below_it(store: Store) -> None:
    """Mutant: the nonce statement checked only the tip of the chain for revocation.

    Rule: a revocation cascades: once a grant is revoked, a chain through any descendant of it
    is refused in the nonce statement itself, and the nonce is not recorded."""
    repo = GrantRepository(store)
    try:
        now = int(time.time())
        assert repo.revoke("a" * 64, now=now)
        chain = ["a" * 64, "b" * 64, "c" * 64]
        assert repo.consume_nonce(AGENT, "n1", now + 60, chain) == "revoked"
        assert repo.consume_nonce(AGENT, "n1", now + 60, chain[1:]) == "fresh"  # nothing was recorded
        assert repo.consume_nonce(AGENT, "n1", now + 60, chain[1:]) == "replay"
        assert repo.consume_nonce(AGENT, "n2", now + 60, chain[1:]) == "fresh"
        assert repo.revoke("b" * 64, now=now) and not repo.revoke("b" * 64, now=now)
        assert repo.consume_nonce(AGENT, "n3", now + 60, chain[1:]) == "revoked"
    finally:
        repo.close()


def test_descendants_lists_every_generation_nearest_first(store: Store) -> None:
    """Mutant: the recursive query stopped after the children (``level < 2`` for ``< 64``).

    Rule: ``descendants`` (what ``agentgate grant revoke`` shows as cut off with a grant) lists
    children, grandchildren and further down, nearest first."""
    repo = GrantRepository(store)
    try:
        now = int(time.time())
        ids = [f"{c}" * 64 for c in "0123"]
        repo.record_grants(
            [_grant(ids[0], None, AGENT, now + 100)]
            + [_grant(ids[i], ids[i - 1], AGENT, now + 100) for i in range(1, 4)],
            now=now,
        )
        assert repo.descendants(ids[0]) == ids[1:]
        assert repo.descendants(ids[2]) == ids[3:]
    finally:
        repo.close()


def test_a_live_nonce_survives_the_prune_of_a_new_process(store: Store) -> None:
    """Mutant: nonces were pruned up to an hour after now instead of an hour before.

    Rule: a nonce is kept until its invocation expired over an hour ago; a second process,
    which prunes on its first nonce, must still see a live invocation's nonce as a replay."""
    first = GrantRepository(store)
    second = GrantRepository(store)
    try:
        now = int(time.time())
        assert first.consume_nonce(AGENT, "live", now + 600, ["g"]) == "fresh"
        assert second.consume_nonce(AGENT, "other", now + 600, ["g"]) == "fresh"  # prunes
        assert second.consume_nonce(AGENT, "live", now + 600, ["g"]) == "replay"
        assert first.consume_nonce(AGENT, "live", now + 600, ["g"]) == "replay"
    finally:
        first.close()
        second.close()


@pytest.mark.postgres
def test_a_host_clock_ahead_never_prunes_a_live_nonce_on_postgresql(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Mutant: PostgreSQL's prune bound took the server's clock plus an hour, not minus.

    Rule: hosts share one nonce table on PostgreSQL; a host whose clock runs two hours ahead
    prunes up to the earlier of its own cut and the server's (now - 1 h), so the nonce of an
    invocation still live elsewhere stays and its replay is refused. (A SQLite file has one
    host: not tested there.)"""
    from agentgate.store._postgres import PostgresStore

    store = PostgresStore(postgres_url)
    first = GrantRepository(store)
    ahead = GrantRepository(store)
    try:
        now = int(time.time())
        assert first.consume_nonce(AGENT, "live", now + 600, ["g"]) == "fresh"
        real = time.time
        monkeypatch.setattr(grants_module, "time", SimpleNamespace(time=lambda: real() + 7200))
        assert ahead.consume_nonce(AGENT, "other", now + 7800, ["g"]) == "fresh"  # prunes
        assert first.consume_nonce(AGENT, "live", now + 600, ["g"]) == "replay"
    finally:
        first.close()
        ahead.close()
        store.close()


def test_delegated_names_only_unexpired_grants_to_that_audience(store: Store) -> None:
    """Mutants: ``delegated`` ignored the audience, or kept a grant whose expiry is now.

    Rule: a grant handed on again is one delegated from that parent to that very holder and
    still valid (a grant is valid strictly before its ``exp``)."""
    repo = GrantRepository(store)
    try:
        now = int(time.time())
        repo.record_grants(
            [
                _grant("p" * 64, None, AGENT, now + 100),
                _grant("1" * 64, "p" * 64, ALICE, now + 100),
                _grant("2" * 64, "p" * 64, BOB, now + 100),
                _grant("3" * 64, "p" * 64, ALICE, now),
            ],
            now=now,
        )
        assert repo.delegated("p" * 64, ALICE, now=now) == [("1" * 64, "token-" + "1" * 64)]
        assert repo.delegated("p" * 64, BOB, now=now) == [("2" * 64, "token-" + "2" * 64)]
        assert repo.delegated("p" * 64, AGENT, now=now) == []
    finally:
        repo.close()
