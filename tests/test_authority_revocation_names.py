"""``revoke`` names the grant a chain's signed token carries, never the id its fields claim."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentgate.authority import Chain, GrantRepository, issue, revoke
from agentgate.authority._revocation import revoked_id
from agentgate.keys import SigningKey
from agentgate.store import SQLiteStore

ROOT, AGENT, OTHER = SigningKey.generate(), SigningKey.generate(), SigningKey.generate()


@pytest.fixture
def repo(tmp_path: Path) -> Iterator[GrantRepository]:
    store = SQLiteStore(tmp_path / "r.db")
    try:
        yield GrantRepository(store)
    finally:
        store.close()


@pytest.mark.parametrize("made", ["replace", "by-hand"])
def test_a_chain_whose_id_field_was_edited_revokes_its_tokens_grant_not_the_named_one(
    repo: GrantRepository, made: str
) -> None:
    """Review R57: revoke read a Chain's id from its fields, so a tip edited to name another grant
    revoked that one and left the token's own grant live."""
    held = issue(ROOT, AGENT.public, ["tool:pay"], ttl=60)
    innocent = issue(ROOT, OTHER.public, ["tool:pay"], ttl=60)
    tip = dataclasses.replace(held.tip, id=innocent.id)
    forged = dataclasses.replace(held, links=(tip,)) if made == "replace" else Chain((tip,), held.token)
    assert forged.id == innocent.id  # what the fields claim
    assert revoked_id(forged) == held.id
    assert revoke(repo, forged, reason="leaked") == held.id
    assert repo.revoked([held.id, innocent.id]) == {held.id}
