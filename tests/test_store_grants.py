"""The grant repository (agentgate/store/grants.py): grants are sought by their holder through an
index, also on a store made before the index existed, and revoking a holder's grants reaches
every one of them."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from agentgate.authority import issue, record, revoke
from agentgate.authority._decision import revoke_holder
from agentgate.keys import SigningKey
from agentgate.store import SQLiteStore, open_store
from agentgate.store.grants import GrantRepository

_HOLDER_READ = (
    "SELECT g.id FROM agentgate_grants g LEFT JOIN agentgate_revocations r ON r.grant_id = g.id "
    "WHERE g.audience = ? ORDER BY g.id"
)


def _plan(path: Path) -> str:
    with sqlite3.connect(path) as conn:
        return " | ".join(
            str(row[-1]) for row in conn.execute("EXPLAIN QUERY PLAN " + _HOLDER_READ, ("did:key:zA",))
        )


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
        assert repo.revoke_holder("did:key:zA", now=2) == (
            ["did:key:zA-g0", "did:key:zA-g1", "did:key:zA-g2"],
            [],
        )
        assert repo.revoke_holder("did:key:zA", now=3) == (
            [],
            ["did:key:zA-g0", "did:key:zA-g1", "did:key:zA-g2"],
        )
    finally:
        repo.close()
        store.close()


def test_a_store_made_before_the_index_gets_it_when_opened_and_keeps_its_grants(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    with sqlite3.connect(path) as conn:  # the grants table as earlier versions made it
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
        assert repo.revoke_holder("did:key:zOld", now=2) == (["did:key:zOld-g0", "did:key:zOld-g1"], [])
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
