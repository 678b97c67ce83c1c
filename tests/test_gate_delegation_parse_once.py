"""Performance round r44: ``Gate.delegate(call=...)`` reads the parent's live delegations to the
sub-agent each time (to hand one on again for the same call); each recorded token is parsed once
per gate, not once per delegation, and the answers are those of parsing it every time."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from unittest import mock

import pytest

from agentgate.gate import AgentIdentity, Gate
from agentgate.gate import _delegation as delegation_module
from agentgate.keys import SigningKey
from agentgate.policy import parse_policy
from agentgate.store import SQLiteStore

POLICY = """
version: 1
trust_anchors: {{root: {{did: "{root}"}}}}
principals:
  boss: {{kind: agent, did: "{boss}", roles: [boss]}}
  alpha: {{kind: agent, did: "{alpha}", roles: [worker]}}
tools:
  lookup: {{args: {{key: {{type: string, required: true}}}}}}
roles:
  boss:
    kind: agent
    capabilities: [{{resource: tool:lookup}}]
    ttl_s: 3600
    delegation: {{max_depth: 1, max_ttl_s: 600, capabilities: [{{resource: tool:lookup}}]}}
  worker:
    kind: agent
    capabilities: [{{resource: tool:lookup}}]
    ttl_s: 600
"""


Team = tuple[Gate, SigningKey, AgentIdentity]


@pytest.fixture
def team(tmp_path: Path) -> Iterator[Team]:
    keys = {n: SigningKey.generate() for n in ("root", "boss", "alpha")}
    text = POLICY.format(root=keys["root"].did, boss=keys["boss"].did, alpha=keys["alpha"].did)
    gate = Gate(parse_policy(text, source="t.yaml"), SQLiteStore(tmp_path / "g.db"))
    boss = gate.issue(keys["root"], name="boss", key=keys["boss"], role="boss")
    yield gate, keys["alpha"], boss
    gate.close()


def _delegate(team: Team, call: str) -> AgentIdentity:
    gate, key, boss = team
    return gate.delegate(
        boss, name="alpha", key=key, capabilities=["tool:lookup"], ttl=timedelta(minutes=5), call=call
    )


def test_each_delegated_token_is_parsed_once_and_handed_on_again(
    team: Team,
) -> None:
    parsed: list[str] = []
    real = delegation_module.parse_chain  # type: ignore[attr-defined]

    def counting(token: str) -> object:
        parsed.append(token)
        return real(token)

    with mock.patch.object(delegation_module, "parse_chain", counting):
        first = [_delegate(team, f"call-{i}") for i in range(5)]
        assert len(parsed) == len(set(parsed)) == 4  # 10 reads of 4 tokens: each parsed once
        _delegate(team, "call-5")  # reads all five live ones: only call-4's for the first time
        assert len(parsed) == len(set(parsed)) == 5
        again = _delegate(team, "call-2")  # handed on again (found before or after call-5's token)
        assert _delegate(team, "call-2").chain == again.chain
        assert len(parsed) == len(set(parsed)) <= 6
    assert again.chain == first[2].chain
    assert len({d.chain.id for d in first}) == 5


def test_a_malformed_recorded_token_is_read_each_time_and_ignored(team: Team) -> None:
    """Until review R68 a recorded token that does not parse raised ``TokenFormatError`` at every
    delegation for the same parent and sub-agent; it is now ignored (never cached: read, and
    named in the fresh grant's allow entry, each time), and a fresh grant is issued."""
    gate = team[0]
    first = _delegate(team, "call-0")
    with gate.store.transaction() as tx:
        tx.execute("UPDATE agentgate_grants SET token = 'ag1.!!.y' WHERE parent IS NOT NULL")
    for call in ("call-1", "call-2"):
        again = _delegate(team, call)
        assert again.chain.id != first.chain.id
        gate.flush()
        reasons = [e for e in gate.audit.entries() if e.kind == "allow"][-1].reasons
        assert any(first.chain.id in r and "does not parse" in r for r in reasons)
