"""``revoke_holder`` reads, checks and revokes a leaked key's grants a page at a time, in one
transaction (review R71), on SQLite and PostgreSQL.

Until R71 the revoking transaction read every one of the holder's rows (with its token) in one
statement, then parsed each token before its next statement: with about a million grants of one
key, PostgreSQL's ``idle_in_transaction_session_timeout`` (30 s, set by agentgate since R70) ended
the session mid-way, and every token was held in memory at once. The tests count what runs
between two statements with a small page (no timing) and show that a failure in the middle
revokes nothing.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Sequence
from typing import Any

import pytest
from test_authority_r68_holder_rows import _plant
from test_authority_revoke_holder import CAP, KEYS, cli, recorded, repo, revocations, url

from agentgate.authority import GrantRepository, delegate, issue, revoke
from agentgate.authority import _revocation as revocation
from agentgate.authority._revocation import revoke_holder, scan_holder
from agentgate.errors import StoreError
from agentgate.store import grants as grants_module

__all__ = ["repo", "url"]  # the fixtures, imported for their use here

PAGE = 3


class _Counted:
    """A real transaction whose statements are counted: the most rows one statement returned,
    and the most token checks made between two statements (what a PostgreSQL session spends
    idle in its transaction)."""

    def __init__(self, tx: Any) -> None:
        self.tx, self.since, self.most_checks, self.most_rows, self.inserts = tx, 0, 0, 0, 0

    def execute(self, sql: str, params: Sequence[Any] = ()) -> Any:
        self.since = 0
        rows = self.tx.execute(sql, params)
        self.most_rows = max(self.most_rows, len(rows))
        self.inserts += sql.startswith("INSERT INTO agentgate_revocations")
        return rows

    def checked(self) -> None:
        self.since += 1
        self.most_checks = max(self.most_checks, self.since)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.tx, name)


@pytest.fixture
def counted_checks(monkeypatch: pytest.MonkeyPatch) -> list[_Counted]:
    """A small page, and every token check counted on the transaction counted then (none before
    one is appended: ``scan_holder`` reads outside any transaction)."""
    monkeypatch.setattr(grants_module, "_HOLDER_PAGE", PAGE, raising=False)
    bound: list[_Counted] = []
    real = revocation._holds

    def holds(token: object, grant_id: str, did: str) -> bool:
        if bound:
            bound[0].checked()
        return real(token, grant_id, did)

    monkeypatch.setattr(revocation, "_holds", holds)
    return bound


def test_the_holders_grants_are_read_checked_and_revoked_a_page_at_a_time(
    repo: GrantRepository, counted_checks: list[_Counted]
) -> None:
    """Review R71: the revoking transaction read all of the holder's rows in one statement and
    parsed every token before its next statement: with a million grants of one key the server
    ended the session (``idle_in_transaction_session_timeout``) before anything was revoked, and
    every token was held at once. Now no statement returns more than a page of rows and no more
    than a page of tokens is checked between two statements; what is revoked is unchanged."""
    agent, other = KEYS["agent"], KEYS["other"]
    own = [recorded(repo, issue(KEYS["root"], agent.public, CAP, ttl=600)) for _ in range(10)]
    revoke(repo, own[4].id)
    hidden = [issue(KEYS["root"], agent.public, CAP, ttl=600) for _ in range(4)]
    for chain in hidden:
        _plant(repo, chain, other.did, chain.token)  # the holder's, its row naming another
    theirs = issue(KEYS["root"], other.public, CAP, ttl=600)
    _plant(repo, theirs, agent.did, theirs.token)  # another's, its row naming the holder
    scan = scan_holder(repo, agent.did)

    with repo.store.transaction() as tx:
        work = _Counted(tx)
        counted_checks.append(work)
        with repo.within(work):  # type: ignore[arg-type]
            done = revoke_holder(repo, agent.did, reason="leaked", scan=scan)

    assert done.revoked == tuple(sorted(c.id for c in [*own, *hidden] if c is not own[4]))
    assert done.already == (own[4].id,)
    assert done.untrusted == (theirs.id,)
    assert done.mislabeled == tuple(sorted(c.id for c in hidden))
    assert revocations(repo.store) == {c.id for c in [*own, *hidden]}
    assert work.most_rows <= PAGE, work.most_rows
    assert work.most_checks <= PAGE, work.most_checks


def test_a_failure_in_the_middle_revokes_nothing(
    repo: GrantRepository, counted_checks: list[_Counted]
) -> None:
    """Review R71: paged, the revocations of the first pages are written before a later page is
    read: a refusal of a later one (here a trigger of the database) must still leave none of the
    holder's grants revoked, the earlier pages' rows rolled back with it."""
    agent = KEYS["agent"]
    own = [recorded(repo, issue(KEYS["root"], agent.public, CAP, ttl=600)) for _ in range(9)]
    last = own[-1].id  # read in the last page: SQLite's by insertion, PostgreSQL's by heap order
    with repo.store.transaction() as tx:
        if repo.store.dialect == "sqlite":
            tx.execute(
                "CREATE TRIGGER refuse BEFORE INSERT ON agentgate_revocations "
                f"WHEN NEW.grant_id = '{last}' BEGIN SELECT RAISE(ABORT, 'refused by a trigger'); END"
            )
        else:
            tx.execute(
                "CREATE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
                f"IF NEW.grant_id = '{last}' THEN RAISE EXCEPTION 'refused by a trigger'; END IF; "
                "RETURN NEW; END $$"
            )
            tx.execute(
                "CREATE TRIGGER refuse BEFORE INSERT ON agentgate_revocations "
                "FOR EACH ROW EXECUTE FUNCTION refuse()"
            )
    scan = scan_holder(repo, agent.did)

    with pytest.raises(StoreError, match="refused by a trigger"), repo.store.transaction() as tx:
        work = _Counted(tx)
        counted_checks.append(work)
        with repo.within(work):  # type: ignore[arg-type]
            revoke_holder(repo, agent.did, reason="leaked", scan=scan)

    assert work.inserts >= 2  # earlier pages were written before the refusal
    assert revocations(repo.store) == set()
    with pytest.raises(StoreError, match="refused by a trigger"):
        revoke_holder(repo, agent.did, reason="leaked")  # in a transaction of its own too
    assert revocations(repo.store) == set()


def test_the_command_reads_the_descendants_after_its_transaction(
    repo: GrantRepository, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R71: ``grant revoke --holder`` listed the recorded descendants of the revoked grants
    with one read per grant on another connection while its revoking transaction stayed open:
    a million grants of the key kept that transaction idle (PostgreSQL ended it after
    ``idle_in_transaction_session_timeout``, nothing revoked) and, on SQLite, every decision
    waiting for the write lock it held. Now they are read once it has committed."""
    agent = KEYS["agent"]
    one = recorded(repo, issue(KEYS["root"], agent.public, CAP, ttl=600))
    below = recorded(repo, delegate(one, agent, KEYS["other"].public, CAP, ttl=60))
    bound: list[object] = []
    real = GrantRepository.descendants_of  # the listing's one statement (review R72)

    def descendants_of(self: GrantRepository, grant_ids: Collection[str]) -> list[str]:
        bound.append(self._bound_tx())
        return real(self, grant_ids)

    monkeypatch.setattr(GrantRepository, "descendants_of", descendants_of)
    rc, out, err = cli(capsys, "grant", "revoke", "--holder", agent.did, "--json")
    assert (rc, err) == (0, ""), err
    shown = json.loads(out)
    assert (shown["revoked"], shown["descendants"]) == ([one.id], [below.id])
    assert bound == [None]  # read once, in no transaction of the command's
