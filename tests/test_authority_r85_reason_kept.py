"""Review R85: a revocation's reason is kept whole by its row in ``agentgate_revocations`` as by
its audit entry, up to one limit, ``agentgate._names.MAX_FREE_TEXT`` (1,000 characters), which
``agentgate grant revoke --reason`` takes and the library refuses beyond. Until R85 ``grant
revoke --reason`` accepted 1,000 characters, the audit entry kept them all and the row cut them
to 500 (``reason[:500]`` in the store); the Python API (``revoke``, ``revoke_holder``,
``Gate.revoke``) took any length, cut the same way in the row alone. Now a longer reason is
refused (``InputError``) before anything is written, on SQLite and PostgreSQL."""

from __future__ import annotations

import pytest
from test_api_types_gate import World, _refused, world
from test_authority_revoke_holder import CAP, KEYS, cli, recorded, repo, revoke_entries, url

from agentgate import _names
from agentgate.authority import GrantRepository, issue, revoke, revoke_holder
from agentgate.cli._common import MAX_FREE_TEXT
from agentgate.errors import InputError
from agentgate.store import Store

__all__ = ["repo", "url", "world"]  # the fixtures, imported for their use here

WHOLE = "".join(chr(ord("a") + i % 26) for i in range(MAX_FREE_TEXT))
LONGER = WHOLE + "z"


def _reasons(store: Store) -> dict[str, str]:
    return {str(g): str(r) for g, r in store.query("SELECT grant_id, reason FROM agentgate_revocations")}


def test_one_limit_for_the_flag_and_the_library() -> None:
    assert getattr(_names, "MAX_FREE_TEXT", None) == MAX_FREE_TEXT == 1000


def test_grant_revoke_keeps_a_reason_of_the_limit_whole_in_the_row_and_the_entry(
    repo: GrantRepository, capsys: pytest.CaptureFixture[str]
) -> None:
    one = recorded(repo, issue(KEYS["root"], KEYS["agent"].public, CAP, ttl=600))
    two = recorded(repo, issue(KEYS["root"], KEYS["other"].public, CAP, ttl=600))

    rc, _, err = cli(capsys, "grant", "revoke", one.id, "--reason", WHOLE)
    assert rc == 0, err
    rc, _, err = cli(capsys, "grant", "revoke", "--holder", KEYS["other"].did, "--reason", WHOLE)
    assert rc == 0, err

    assert _reasons(repo.store) == {one.id: WHOLE, two.id: WHOLE}
    assert [e["reasons"] for e in revoke_entries(capsys)] == [[WHOLE], [WHOLE]]


def test_the_library_refuses_a_longer_reason_and_revokes_nothing(repo: GrantRepository) -> None:
    one = recorded(repo, issue(KEYS["root"], KEYS["agent"].public, CAP, ttl=600))
    said = f"reason is {len(LONGER):,} characters long; at most {MAX_FREE_TEXT:,}"
    with pytest.raises(InputError) as raised:
        revoke(repo, one.id, reason=LONGER)
    assert str(raised.value) == said
    with pytest.raises(InputError) as raised:
        revoke_holder(repo, KEYS["agent"].public, reason=LONGER)
    assert str(raised.value) == said
    assert _reasons(repo.store) == {}

    revoke(repo, one.id, reason=WHOLE)
    assert _reasons(repo.store) == {one.id: WHOLE}


def test_gate_revoke_refuses_a_longer_reason_writing_nothing(world: World) -> None:
    said = f"reason is {len(LONGER):,} characters long; at most {MAX_FREE_TEXT:,}"
    assert _refused(world, lambda w: w.gate.revoke(w.agent, reason=LONGER)) == said
    assert _refused(world, lambda w: w.gate.revoke_holder(w.keys["agent"].public, reason=LONGER)) == said
    world.gate.revoke(world.agent, reason=WHOLE)
    assert _reasons(world.gate.store) == {world.agent.grant_id: WHOLE}
