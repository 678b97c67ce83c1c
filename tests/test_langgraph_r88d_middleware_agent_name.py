"""Review R88d: ``GateMiddleware`` wrote its agent's name whole into the refusal of its
``max_tokens`` (``agentgate[NAME]: ...``) before the name was checked at all: a name holding a
line break made a refusal of two lines, one of 1 MB a refusal of 1 MB, and such a name was taken
with a good ``max_tokens`` (the Gate then refuses every call under it). The name is checked first
now, as ``Gate.issue`` checks an agent's name (``check_agent_name``)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from agentgate.errors import InputError
from agentgate.gate import Gate
from agentgate.integrations.langgraph import GateMiddleware
from agentgate.keys import SigningKey
from agentgate.policy import parse_policy
from agentgate.store import SQLiteStore


@pytest.fixture
def gate(tmp_path: Path) -> Iterator[Gate]:
    root = SigningKey.generate()
    policy = parse_policy(f'version: 1\ntrust_anchors: {{root: {{did: "{root.did}"}}}}\n', source="p.yaml")
    gate = Gate(policy, SQLiteStore(tmp_path / "agentgate.db"))
    yield gate
    gate.close()


@pytest.mark.parametrize("max_tokens", [0, 5], ids=["bad-limit", "good-limit"])
@pytest.mark.parametrize(
    ("agent", "says"),
    [
        ("a\nb", "holds control character"),
        ("x" * 1_000_000, "must be at most 200 characters"),
        ("researcher ", "opens or ends with a space"),
    ],
    ids=["line-break", "megabyte", "edge-space"],
)
def test_agent_name_is_checked_before_it_is_quoted(
    gate: Gate, agent: str, says: str, max_tokens: int
) -> None:
    with pytest.raises(InputError, match=f"^GateMiddleware: the agent's name .*{says}") as refused:
        GateMiddleware(gate, agent=agent, max_tokens=max_tokens)
    message = str(refused.value)
    assert len(message.splitlines()) == 1
    assert len(message) < 300


def test_a_good_name_is_still_quoted_in_the_limit_refusal(gate: Gate) -> None:
    with pytest.raises(InputError, match=r"^agentgate\[researcher\]: max_tokens must be a whole number > 0"):
        GateMiddleware(gate, agent="researcher", max_tokens=0)
    assert GateMiddleware(gate, agent="researcher").name == "agentgate[researcher]"
