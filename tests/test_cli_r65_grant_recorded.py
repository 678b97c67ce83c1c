"""``GrantRepository.recorded`` (agentgate/store/grants.py): whether a grant is recorded, and as
what, on both stores; read by ``grant revoke`` (agentgate/cli/grant.py) and ``audit explain``
(agentgate/cli/audit.py), which queried the grants table themselves until review R65."""

from __future__ import annotations

from agentgate.authority import GrantRepository, delegate, issue, record, revoke
from agentgate.keys import SigningKey
from agentgate.store import Store

ROOT, AGENT, HELPER = SigningKey.generate(), SigningKey.generate(), SigningKey.generate()


def test_a_recorded_grant_is_read_back_as_recorded(store: Store) -> None:
    """Review R65: the repository says whether a grant is recorded, with its parent, issuer,
    audience, expiry, token and revocation, on SQLite and PostgreSQL alike."""
    repo = GrantRepository(store)
    try:
        root = issue(ROOT, AGENT.public, ["tool:pay"], ttl=60)
        child = delegate(root, AGENT, HELPER.public, ["tool:pay"], ttl=30)
        record(repo, child)
        revoke(repo, root.id, reason="leaked")
        got = GrantRepository.recorded(store, child.id)
        assert got is not None
        assert (got.id, got.parent, got.issuer, got.audience, got.expires, got.token, got.revoked) == (
            child.id,
            root.id,
            AGENT.public.did,
            HELPER.public.did,
            child.tip.expires,
            child.token,
            False,
        )
        parent = GrantRepository.recorded(store, root.id)
        assert parent is not None and (parent.parent, parent.revoked) == (None, True)
    finally:
        repo.close()


def test_a_grant_never_recorded_is_none(store: Store) -> None:
    """Review R65: a grant id the store never recorded (a typo, a grant made offline) is ``None``."""
    repo = GrantRepository(store)
    try:
        assert GrantRepository.recorded(store, "0" * 64) is None
    finally:
        repo.close()
