"""Revocation by holder reads the holder from each grant's token, never from its row alone.

Review R68 found that ``revoke_holder`` (``agentgate grant revoke --holder``, ``Gate.revoke_holder``)
revoked every grant whose ``audience`` column named the key: a row inserted ahead of time by a
role that may insert into ``agentgate_grants`` (the application role), with a real grant's id and
another audience, had an operator's ``revoke --holder X`` revoke that other holder's grant, and
report it as X's. What holds now, on SQLite and PostgreSQL:

- a row whose recorded token does not carry its id (its tip's hash) to the key named is not
  revoked, whatever its column says; it is reported (``HolderRevocation.untrusted``, the
  command's ``untrusted`` in JSON and a ``warning:`` line), and the grants the key does hold are
  revoked alongside, with one audit entry each;
- a row whose token is no token at all (edited by hand) is reported the same way;
- each of the holder's rows is checked once, none of another holder's (the work grows with the
  holder's rows, not the table's).
"""

from __future__ import annotations

import json

import pytest
from test_authority_revoke_holder import CAP, KEYS, cli, recorded, repo, revocations, url

from agentgate.authority import Chain, GrantRepository, issue, record
from agentgate.authority._revocation import revoke_holder

__all__ = ["repo", "url"]  # the fixtures, imported for their use here


def _plant(repo: GrantRepository, chain: Chain, audience: str, token: str) -> None:
    """A row for ``chain``'s grant written ahead of its record, as the application role may."""
    tip = chain.links[-1]
    with repo.store.transaction() as tx:
        tx.execute(
            "INSERT INTO agentgate_grants (id, parent, issuer, audience, expires, token, recorded_at) "
            "VALUES (?, ?, ?, ?, ?, ?, ?)",
            (tip.id, tip.parent, tip.issuer, audience, tip.expires, token, 1),
        )


def test_a_row_naming_another_audience_than_its_token_is_not_revoked_but_reported(
    repo: GrantRepository,
) -> None:
    """Review R68: ``revoke_holder(X)`` revoked the grant of another key whose row was planted
    with X as its audience (the column's word alone), and reported it revoked as X's."""
    agent, other = KEYS["agent"], KEYS["other"]
    theirs = issue(KEYS["root"], agent.public, CAP, ttl=600)  # the agent's grant, not other's
    _plant(repo, theirs, other.did, theirs.token)
    record(repo, theirs)  # the real record meets the planted row and leaves it as it is
    own = recorded(repo, issue(KEYS["root"], other.public, CAP, ttl=600))

    done = revoke_holder(repo, other.did, reason="leaked")

    assert (done.revoked, done.already) == ((own.id,), ())
    assert done.untrusted == (theirs.id,)
    assert revocations(repo.store) == {own.id}  # the agent's grant lives
    again = revoke_holder(repo, other.did)
    assert (again.revoked, again.already, again.untrusted) == ((), (own.id,), (theirs.id,))


def test_a_row_whose_token_is_no_token_is_not_revoked_but_reported(repo: GrantRepository) -> None:
    """Review R68: a row edited by hand (its token not a chain token) was revoked on its
    ``audience`` column alone."""
    other = KEYS["other"]
    chain = issue(KEYS["root"], KEYS["agent"].public, CAP, ttl=600)
    _plant(repo, chain, other.did, "not a token")
    done = revoke_holder(repo, other.public)
    assert (done.revoked, done.already, done.untrusted) == ((), (), (chain.id,))
    assert revocations(repo.store) == set()


def test_the_command_reports_the_rows_it_could_not_trust(
    repo: GrantRepository, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R68: ``grant revoke --holder`` revoked and logged a planted row's grant as the
    key's; now it revokes and logs the key's own grants and names the row it left."""
    agent, other = KEYS["agent"], KEYS["other"]
    theirs = issue(KEYS["root"], agent.public, CAP, ttl=600)
    _plant(repo, theirs, other.did, theirs.token)
    own = recorded(repo, issue(KEYS["root"], other.public, CAP, ttl=600))

    rc, out, err = cli(capsys, "grant", "revoke", "--holder", other.did, "--by", "ops", "--json")
    assert (rc, err) == (0, ""), err
    shown = json.loads(out)
    assert shown["revoked"] == [own.id] and shown["untrusted"] == [theirs.id]
    assert revocations(repo.store) == {own.id}
    rc, out, err = cli(capsys, "audit", "show", "--kind", "revoke", "--json")
    assert [json.loads(line)["chain_hash"] for line in out.splitlines()] == [own.id]

    rc, out, err = cli(capsys, "grant", "revoke", "--holder", other.did)
    assert rc == 0 and out.splitlines()[0] == f"revoked 0 grant(s) held by {other.did}"
    assert err == (
        f"agentgate: warning: 1 recorded row(s) name {other.did} as the holder but their token does not "
        f"(a row written by hand, not by agentgate): not revoked: {theirs.id}\n"
    )


def test_each_of_the_holders_rows_is_checked_once_and_no_other(repo: GrantRepository) -> None:
    """Review R68: the check the fix adds reads each row the column names once, and none of
    the rows of other holders (no scan of the whole table, no check per pair of rows)."""
    other = KEYS["other"]
    mine = [recorded(repo, issue(KEYS["root"], other.public, CAP, ttl=600)) for _ in range(5)]
    for _ in range(20):
        recorded(repo, issue(KEYS["root"], KEYS["agent"].public, CAP, ttl=600))
    checked: list[str] = []

    def holds(token: object, grant_id: str) -> bool:
        checked.append(grant_id)
        return True

    revoked, already, untrusted = repo.revoke_holder(other.did, now=1, holds=holds)
    assert sorted(checked) == revoked == sorted(c.id for c in mine)
    assert (already, untrusted) == ([], [])
