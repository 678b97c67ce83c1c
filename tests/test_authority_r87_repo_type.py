"""Review R87: every authority entry point that takes a grant repository (``decide``,
``Authority``, ``revoke``, ``revoke_holder``, ``scan_holder``, ``record``, ``prune_grants``)
refuses one that is not a ``GrantRepository`` with ``InputError`` at the call, naming the entry
point and what it got by its type, and for a ``Store`` how to make one of it. Until R87 any
object was taken: the ``Store`` itself (``open_store(...)`` where ``GrantRepository(store)`` was
meant) or ``None`` raised a bare ``AttributeError`` from inside the decision, and only on an
allow path, so a misconfigured ``Authority`` passed refusal tests and failed on the first valid
call."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from agentgate.authority import (
    Authority,
    GrantRepository,
    Invocation,
    decide,
    issue,
    prune_grants,
    record,
    revoke,
    revoke_holder,
    scan_holder,
)
from agentgate.capabilities import Call
from agentgate.errors import InputError
from agentgate.keys import SigningKey
from agentgate.store import SQLiteStore, Store

ROOT, AGENT, STRANGER = SigningKey.generate(), SigningKey.generate(), SigningKey.generate()
NOW = 1_800_000_000
CALL = Call.tool("x")
CHAIN = issue(ROOT, AGENT.public, ["tool:x"], ttl=3600, now=NOW)
INVOCATION = Invocation.sign(AGENT, CHAIN, CALL, now=NOW)
STORE_FIX = ": make one of the store, GrantRepository(store)"

Use = Callable[[object], object]
USES: dict[str, tuple[str, Use]] = {
    "decide": ("a decision", lambda repo: decide(INVOCATION, repo=repo, trusted=ROOT.public, now=NOW)),  # type: ignore[arg-type]
    "decide, untrusted chain": (
        "a decision",
        lambda repo: decide(INVOCATION, repo=repo, trusted=STRANGER.public, now=NOW),  # type: ignore[arg-type]
    ),
    "Authority": ("Authority", lambda repo: Authority(repo, ROOT.public)),  # type: ignore[arg-type]
    "revoke": ("revoke", lambda repo: revoke(repo, CHAIN, now=NOW)),  # type: ignore[arg-type]
    "revoke_holder": ("revoke_holder", lambda repo: revoke_holder(repo, AGENT.public, now=NOW)),  # type: ignore[arg-type]
    "scan_holder": ("scan_holder", lambda repo: scan_holder(repo, AGENT.public)),  # type: ignore[arg-type]
    "record": ("record", lambda repo: record(repo, CHAIN, now=NOW)),  # type: ignore[arg-type]
    "prune_grants": ("prune_grants", lambda repo: prune_grants(repo, NOW)),  # type: ignore[arg-type]
}


@pytest.fixture
def opened(tmp_path: Path) -> Iterator[Store]:
    """A store as ``open_store`` gives it (the type is what is checked: one backend is enough)."""
    store = SQLiteStore(tmp_path / "s.db")
    yield store
    store.close()


def _rows(store: Store) -> list[object]:
    return [
        *store.query("SELECT id FROM agentgate_grants"),
        *store.query("SELECT grant_id FROM agentgate_revocations"),
    ]


@pytest.mark.parametrize("use", USES, ids=list(USES))
def test_the_store_itself_is_refused_as_a_repository_naming_the_fix(opened: Store, use: str) -> None:
    GrantRepository(opened)  # its tables exist: only the type is wrong
    taker, call = USES[use]
    with pytest.raises(InputError) as raised:
        call(opened)
    assert str(raised.value) == f"{taker} takes a GrantRepository as its repo, got a SQLiteStore{STORE_FIX}"
    assert _rows(opened) == []  # nothing recorded or revoked


@pytest.mark.parametrize("use", USES, ids=list(USES))
@pytest.mark.parametrize(("wrong", "named"), [(None, "None"), ("grants.db", "a str")])
def test_anything_else_is_refused_by_its_type(use: str, wrong: object, named: str) -> None:
    taker, call = USES[use]
    with pytest.raises(InputError) as raised:
        call(wrong)
    assert str(raised.value) == f"{taker} takes a GrantRepository as its repo, got {named}"


def test_a_grant_repository_is_taken(opened: Store) -> None:
    repo = GrantRepository(opened)
    assert Authority(repo, ROOT.public).decide(INVOCATION, now=NOW).allowed
    assert decide(
        Invocation.sign(AGENT, CHAIN, CALL, now=NOW), repo=repo, trusted=ROOT.public, now=NOW
    ).allowed
