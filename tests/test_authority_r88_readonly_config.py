"""Review R88: ``Authority`` checks its ``repo``, trust anchors and cache when it is made (R87, and
R53 for ``skew``), but until R88 ``repo``, ``anchors``, ``approvals`` and ``cache`` were plain
attributes, and a value assigned afterwards reached the decision unchecked: the ``Store`` itself as
``repo`` denied refusals and raised ``AttributeError`` on the first allowed call, a list of anchors
made every valid call raise ``TypeError`` (unhashable), a string of them made the trust check a
substring test, and ``cache = None`` raised ``AttributeError``. Each is read-only now, as ``skew``:
assigning one raises ``AttributeError`` and the engine decides with what it checked."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from agentgate.authority import Authority, GrantRepository, Invocation, issue
from agentgate.capabilities import Call
from agentgate.findings import Outcome
from agentgate.keys import SigningKey
from agentgate.store import SQLiteStore, Store

ROOT, AGENT = SigningKey.generate(), SigningKey.generate()
NOW = 1_800_000_000
CALL = Call.tool("search")
CHAIN = issue(ROOT, AGENT.public, ["tool:search"], ttl=3600, now=NOW)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    store = SQLiteStore(tmp_path / "s.db")
    try:
        yield store
    finally:
        store.close()


def _assigned(store: Store) -> dict[str, object]:
    """For each checked attribute, a value the constructor refuses or the decision cannot use."""
    return {
        "repo": store,
        "anchors": [ROOT.did],
        "approvals": "alice",
        "cache": None,
        "skew": 10**12,
    }


@pytest.mark.parametrize("name", ["repo", "anchors", "approvals", "cache", "skew"])
def test_an_authoritys_checked_configuration_cannot_be_replaced(store: Store, name: str) -> None:
    engine = Authority(GrantRepository(store), ROOT.public)
    kept = getattr(engine, name)
    with pytest.raises(AttributeError, match=name):
        setattr(engine, name, _assigned(store)[name])
    assert getattr(engine, name) is kept
    allowed = engine.decide(Invocation.sign(AGENT, CHAIN, CALL, now=NOW), now=NOW)
    assert allowed.outcome is Outcome.ALLOW, allowed.reasons


def test_anchors_given_as_text_cannot_turn_the_trust_check_into_a_substring_test(store: Store) -> None:
    """``anchors = "did1, did2"`` made ``issuer not in anchors`` a substring test."""
    stranger = SigningKey.generate()
    engine = Authority(GrantRepository(store), stranger.public)
    with pytest.raises(AttributeError, match="anchors"):
        engine.anchors = f"{stranger.did}, {ROOT.did}"  # type: ignore[misc]
    denied = engine.decide(Invocation.sign(AGENT, CHAIN, CALL, now=NOW), now=NOW)
    assert denied.outcome is Outcome.DENY
    assert denied.findings[0].code == "untrusted_root"
