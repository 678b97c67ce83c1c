"""Review R71 of ``agentgate grant revoke --holder`` listing the revoked grants' descendants once
its transaction committed (helper r71-pg's change), on SQLite and PostgreSQL.

What holds: the listing runs once, after the commit, never after a failure (the helper's tests);
the output is as before; a listing that fails after the commit says that the revocations and
their audit entries committed, and how many, instead of a bare store error that reads as if
nothing was revoked.
"""

from __future__ import annotations

import pytest
from test_authority_revoke_holder import CAP, KEYS, cli, recorded, repo, revocations, url

from agentgate.authority import GrantRepository, delegate, issue
from agentgate.errors import StoreError

__all__ = ["repo", "url"]  # the fixtures, imported for their use here


def test_a_descendants_listing_that_fails_after_the_commit_says_the_revocations_committed(
    repo: GrantRepository, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R71: the descendants are now read after the revoking transaction committed, so a
    store error there (the server gone, the file unreadable) came after the revocations were
    made and audited, but the command said only the store's error, exit 1, as a failure before
    the commit did: an operator cutting off a leaked key read that nothing was revoked. Now the
    error says that the revocations committed, how many, and that a second run lists them."""
    agent = KEYS["agent"]
    one = recorded(repo, issue(KEYS["root"], agent.public, CAP, ttl=600))
    recorded(repo, delegate(one, agent, KEYS["other"].public, CAP, ttl=60))

    def descendants_of(self: GrantRepository, grant_ids: object) -> list[str]:
        raise StoreError("cannot reach the store (a fault injected after the commit)")

    # The listing's one statement (review R72; it was ``descendants``, once per grant)
    monkeypatch.setattr(GrantRepository, "descendants_of", descendants_of)
    rc, out, err = cli(capsys, "grant", "revoke", "--holder", agent.did)

    assert rc != 0 and out == "", (rc, out)
    assert "cannot reach the store (a fault injected after the commit)" in err, err
    assert "1 grant(s) of " + agent.did + " revoked and audited (committed)" in err, err
    assert revocations(repo.store) == {one.id}
