"""Performance round r44: ``Gate.delegate(call=...)`` reads the parent's live delegations to the
sub-agent each time (to hand one on again for the same call); each recorded token is parsed once
per gate, not once per delegation, and the answers are those of parsing it every time."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from unittest import mock

import pytest

from agentgate.errors import TokenFormatError
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


def test_a_malformed_recorded_token_still_raises(team: Team) -> None:
    gate = team[0]
    _delegate(team, "call-0")
    with gate.store.transaction() as tx:
        tx.execute("UPDATE agentgate_grants SET token = 'ag1.!!.y' WHERE parent IS NOT NULL")
    for _ in range(2):  # not cached: raised every time, as parsing it each time did
        with pytest.raises(TokenFormatError):
            _delegate(team, "call-1")
