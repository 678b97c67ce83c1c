"""A delegation handed on again claims its name too (review R69).

``Gate.delegate`` with a ``call`` hands on the grant recorded for that call, parent, key, name
(signed into the purpose) and terms (``_delegated_before``) instead of making a new one. That
path claimed no name in the store (``agentgate_agent_names``) yet kept the name as this Gate's
(``_remember_name``), and a name this Gate keeps is never claimed by its later grants: a name
granted before the store kept names (a store upgraded from version 2) stayed unclaimed for
good, and another Gate granted a name reading as it. A real SQLite file.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
from test_langgraph import NAMES, _policy_text

from agentgate.errors import Denied
from agentgate.gate import AgentIdentity, Gate
from agentgate.keys import SigningKey
from agentgate.policy import parse_policy
from agentgate.store import open_store


def _gate(url: str, keys: dict[str, SigningKey]) -> Gate:
    policy = parse_policy(
        _policy_text({n: k.did for n, k in keys.items()}, 1_000_000, "usd_micros"), source="team.yaml"
    )
    return Gate(policy, open_store(url))


def _hand_on(gate: Gate, parent: AgentIdentity, name: str, key: SigningKey) -> AgentIdentity:
    return gate.delegate(
        parent,
        name=name,
        key=key,
        capabilities=["tool:search"],
        ttl=timedelta(minutes=1),
        call="thread-1/step-2/c1",
    )


def test_a_name_handed_on_first_is_claimed(tmp_path: Path) -> None:
    """Review R69: a name a Gate first met on the handed-on path (granted by a version before
    the store kept names) was kept in its memory unclaimed; another Gate then granted a name
    reading as it. Shown with the row removed by hand, as a store upgraded from version 2 has
    no row for its names."""
    url = str(tmp_path / "agentgate.db")
    keys = {name: SigningKey.generate() for name in NAMES}
    sub = SigningKey.generate()
    first = _gate(url, keys)
    supervisor = first.issue(keys["root"], name="supervisor", key=keys["supervisor"], role="supervisor")
    _hand_on(first, supervisor, "helper", sub)
    first.close()
    store = open_store(url)
    try:
        with store.transaction() as tx:
            tx.execute("DELETE FROM agentgate_agent_names", ())
    finally:
        store.close()
    again = _gate(url, keys)
    try:
        assert _hand_on(again, supervisor, "helper", sub).name == "helper"
    finally:
        again.close()
    other = _gate(url, keys)
    try:
        with pytest.raises(Denied, match="'heIper' reads as 'helper'"):
            other.delegate(
                supervisor,
                name="heIper",
                key=SigningKey.generate(),
                capabilities=["tool:search"],
                ttl=timedelta(minutes=1),
            )
    finally:
        other.close()
