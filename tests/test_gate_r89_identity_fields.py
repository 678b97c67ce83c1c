"""Review R89: ``AgentIdentity(name, key, chain)``, which docs/langgraph.md has a caller build by
hand, checked none of its fields. One built with a grant's token text as its chain, its DID as
its key or a number as its name was taken, and ``Gate.authorize`` or ``Gate.budget_usage`` then
failed deep inside with a bare ``AttributeError`` (``'str' object has no attribute 'holder'``)
or ``TypeError``. Such an identity is now refused when it is made, with an ``InputError`` naming
the field.

Real components: a Gate on a SQLite file and the grant it issued."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from agentgate.authority import parse_chain
from agentgate.capabilities import Call
from agentgate.errors import InputError
from agentgate.gate import AgentIdentity, Gate
from agentgate.keys import SigningKey
from agentgate.policy import parse_policy
from agentgate.store import SQLiteStore

POLICY = """
version: 1
trust_anchors: {{root: {{did: "{root}"}}}}
principals:
  agent: {{kind: agent, did: "{agent}", roles: [worker]}}
tools:
  lookup:
    args: {{id: {{type: string, required: true}}}}
    idempotent: true{lookup}
roles:
  worker:
    kind: agent
    capabilities: [{{resource: tool:lookup}}]{budget}
    ttl_s: 600
"""
"""One agent's policy with one tool, ``lookup`` (here and in test_gate_r89_registry_tracer,
test_gate_r89_exception_eq and test_gate_r95_closed_loop_close): ``policy_text`` fills in the
DIDs and the lines ``lookup`` and ``budget`` add to the tool and the role."""

BUDGET = "\n    budget: {limit: 5, unit: calls}"


def policy_text(keys: dict[str, SigningKey], *, lookup: str = "", budget: str = BUDGET) -> str:
    return POLICY.format(lookup=lookup, budget=budget, **{n: k.did for n, k in keys.items()})


@contextmanager
def gate_and_agent(tmp_path: Path, *, lookup: str = "") -> Iterator[tuple[Gate, AgentIdentity]]:
    """A Gate on a SQLite file under ``tmp_path`` and the agent it issued a grant to."""
    keys = {name: SigningKey.generate() for name in ("root", "agent")}
    text = policy_text(keys, lookup=lookup)
    with Gate(parse_policy(text, source="p.yaml"), SQLiteStore(tmp_path / "a.db")) as gate:
        yield gate, gate.issue(keys["root"], name="agent", key=keys["agent"], role="worker")


LOOKUP = Call.tool("lookup", {"id": "1"})


@pytest.fixture
def desk(tmp_path: Path) -> Iterator[tuple[Gate, AgentIdentity]]:
    with gate_and_agent(tmp_path) as made:
        yield made


WRONG: dict[str, tuple[str, Callable[[AgentIdentity], AgentIdentity]]] = {
    "chain-as-token-text": ("chain", lambda a: AgentIdentity("agent", a.key, a.chain.token)),  # type: ignore[arg-type]
    "key-as-did": ("key", lambda a: AgentIdentity("agent", a.key.did, a.chain)),  # type: ignore[arg-type]
    "key-as-public-key": ("key", lambda a: AgentIdentity("agent", a.key.public, a.chain)),  # type: ignore[arg-type]
    "name-as-int": ("name", lambda a: AgentIdentity(7, a.key, a.chain)),  # type: ignore[arg-type]
    "tenant-as-int": ("tenant", lambda a: AgentIdentity("agent", a.key, a.chain, 7)),  # type: ignore[arg-type]
}


@pytest.mark.parametrize("case", list(WRONG))
def test_an_identity_with_a_field_of_the_wrong_type_is_refused_naming_it(
    desk: tuple[Gate, AgentIdentity], case: str
) -> None:
    _, agent = desk
    field, make = WRONG[case]
    with pytest.raises(InputError, match=rf"^AgentIdentity\.{field} must be "):
        make(agent)


def test_an_identity_built_by_hand_from_its_parts_is_decided(desk: tuple[Gate, AgentIdentity]) -> None:
    gate, agent = desk
    built = AgentIdentity("agent", agent.key, parse_chain(agent.chain.token))
    assert gate.authorize(built, LOOKUP).allowed
    assert gate.budget_usage(built) == {agent.grant_id: (0, 5)}
