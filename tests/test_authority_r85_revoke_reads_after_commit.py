"""Review R85: ``agentgate grant revoke ID`` reads the grant's record and its recorded
descendants once the revocation and its audit entry have committed, as ``--holder`` does since
review R71. Until R85 it read them on another connection while its revoking transaction was
still open (on SQLite with the write lock held, which every decision waits for). A read that
fails then says that the revocation committed, as ``--holder``'s does, on SQLite and PostgreSQL.
"""

from __future__ import annotations

import json

import pytest
from test_authority_revoke_holder import CAP, KEYS, cli, recorded, repo, revocations, url

from agentgate.authority import GrantRepository, delegate, issue
from agentgate.errors import StoreError
from agentgate.store import Store, open_store

__all__ = ["repo", "url"]  # the fixtures, imported for their use here


def _committed(url: str) -> set[str]:
    """The revocations another connection sees: only committed ones."""
    with open_store(url) as other:
        return revocations(other)


def test_the_record_and_the_descendants_are_read_after_the_commit(
    url: str, repo: GrantRepository, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    agent = KEYS["agent"]
    one = recorded(repo, issue(KEYS["root"], agent.public, CAP, ttl=600))
    below = recorded(repo, delegate(one, agent, KEYS["other"].public, CAP, ttl=60))
    seen: list[tuple[str, object, set[str]]] = []
    descendants, record_of = GrantRepository.descendants, GrantRepository.recorded

    def listed(self: GrantRepository, grant_id: str) -> list[str]:
        seen.append(("descendants", self._bound_tx(), _committed(url)))
        return descendants(self, grant_id)

    def read(store: Store, grant_id: str) -> object:
        seen.append(("recorded", None, _committed(url)))
        return record_of(store, grant_id)

    monkeypatch.setattr(GrantRepository, "descendants", listed)
    monkeypatch.setattr(GrantRepository, "recorded", staticmethod(read))
    rc, out, err = cli(capsys, "grant", "revoke", one.id, "--json")

    assert (rc, err) == (0, ""), err
    shown = json.loads(out)
    assert (shown["revoked"], shown["descendants"], shown["recorded"]) == ([one.id], [below.id], True)
    assert seen == [("descendants", None, {one.id}), ("recorded", None, {one.id})]


def test_a_read_that_fails_after_the_commit_says_the_revocation_committed(
    repo: GrantRepository, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    one = recorded(repo, issue(KEYS["root"], KEYS["agent"].public, CAP, ttl=600))

    def descendants(self: GrantRepository, grant_id: str) -> list[str]:
        raise StoreError("cannot reach the store (a fault injected after the commit)")

    monkeypatch.setattr(GrantRepository, "descendants", descendants)
    rc, out, err = cli(capsys, "grant", "revoke", one.id)

    assert rc == 2 and out == "", (rc, out)
    assert f"grant {one.id} revoked and audited (committed); then reading" in err, err
    assert "cannot reach the store (a fault injected after the commit)" in err, err
    assert revocations(repo.store) == {one.id}
