"""Review R72: ``agentgate grant revoke --holder`` listed the revoked grants' recorded descendants
with one statement per grant (``GrantRepository.descendants`` each), after the commit: a key
holding ten thousand recorded grants cost ten thousand round trips. Now one statement, on SQLite
and PostgreSQL, the listing as before. Counted at the store's transactions (every statement of
either store goes through one), never timed."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import pytest
from test_authority_revoke_holder import CAP, KEYS, cli, recorded, repo, url

from agentgate.authority import GrantRepository, delegate, issue
from agentgate.store._postgres import _PgTransaction
from agentgate.store._sqlite import _SQLiteTransaction

__all__ = ["repo", "url"]  # the fixtures, imported for their use here


def test_the_descendants_are_listed_in_one_statement(
    repo: GrantRepository, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R72: six grants of the key, each with a child and a grandchild: one recursive
    statement lists the twelve, sorted, as the six per-grant statements did."""
    agent, other = KEYS["agent"], KEYS["other"]
    expected = set()
    for _ in range(6):
        mine = recorded(repo, issue(KEYS["root"], agent.public, CAP, ttl=600))
        child = recorded(repo, delegate(mine, agent, other.public, CAP, ttl=60))
        grandchild = recorded(repo, delegate(child, other, KEYS["evil"].public, CAP, ttl=30))
        expected |= {child.id, grandchild.id}

    statements: list[str] = []
    for kind in (_SQLiteTransaction, _PgTransaction):
        real = kind.execute

        def counted(self: Any, sql: str, params: Sequence[Any] = (), real: Any = real) -> Any:
            statements.append(sql)
            return real(self, sql, params)

        monkeypatch.setattr(kind, "execute", counted)
    rc, out, err = cli(capsys, "grant", "revoke", "--holder", agent.did, "--json")

    assert rc == 0, err
    shown = json.loads(out)
    assert len(shown["revoked"]) == 6
    assert shown["descendants"] == sorted(expected), shown
    listing = [s for s in statements if "RECURSIVE" in s.upper()]
    assert len(listing) == 1, listing


def test_no_grant_held_lists_nothing_and_reads_nothing(
    repo: GrantRepository, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A key with no recorded grants: no descendants, and no listing statement."""
    recorded(repo, issue(KEYS["root"], KEYS["other"].public, CAP, ttl=600))
    statements: list[str] = []
    for kind in (_SQLiteTransaction, _PgTransaction):
        real = kind.execute

        def counted(self: Any, sql: str, params: Sequence[Any] = (), real: Any = real) -> Any:
            statements.append(sql)
            return real(self, sql, params)

        monkeypatch.setattr(kind, "execute", counted)
    rc, out, err = cli(capsys, "grant", "revoke", "--holder", KEYS["agent"].did, "--json")
    assert rc == 0, err
    assert json.loads(out)["descendants"] == []
    assert not [s for s in statements if "RECURSIVE" in s.upper()]


def test_any_number_of_grants_is_one_statement(repo: GrantRepository) -> None:
    """The ids are bound as one parameter (an array, a JSON array): 40,000 of them, past
    SQLite's limit on parameters, are one statement, and a recorded one's child is found."""
    agent = KEYS["agent"]
    mine = recorded(repo, issue(KEYS["root"], agent.public, CAP, ttl=600))
    child = recorded(repo, delegate(mine, agent, KEYS["other"].public, CAP, ttl=60))
    many = {f"{i:064x}" for i in range(40_000)} | {mine.id}
    assert repo.descendants_of(many) == [child.id]
    assert repo.descendants_of(set()) == []
