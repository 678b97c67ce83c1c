"""Review R88c: ``GateMiddleware``'s constructor refused a ``max_tokens`` that is no whole number
above 0 quoting it with its whole ``repr``: ``-10**5000`` was a bare ``ValueError`` out of
``repr``, and a text of 1 MB a refusal of 1 MB. It is quoted as the model call quotes its limit
now (``quoted``: at most 80 characters, an integer past 128 bits by its size)."""

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

SAYS = "agentgate[a]: max_tokens must be a whole number > 0, got "


@pytest.fixture
def gate(tmp_path: Path) -> Iterator[Gate]:
    root = SigningKey.generate()
    policy = parse_policy(f'version: 1\ntrust_anchors: {{root: {{did: "{root.did}"}}}}\n', source="p.yaml")
    gate = Gate(policy, SQLiteStore(tmp_path / "agentgate.db"))
    yield gate
    gate.close()


@pytest.mark.parametrize(
    ("limit", "quote"),
    [
        (-(10**5000), "an integer of 16610 bits"),
        ("x" * 1_000_000, "'" + "x" * 76 + "..."),
        (-5, "-5"),
        (0.5, "0.5"),
    ],
    ids=["huge-integer", "megabyte-text", "negative", "fraction"],
)
def test_a_refused_limit_is_quoted_short(gate: Gate, limit: object, quote: str) -> None:
    with pytest.raises(InputError) as refused:
        GateMiddleware(gate, agent="a", max_tokens=limit)  # type: ignore[arg-type]
    assert str(refused.value) == SAYS + quote
