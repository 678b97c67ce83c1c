"""Review R86d: the policy index quotes an undeclared argument name as ``quoted`` does (cut at 80
characters, a huge integer by its size), and the Gate's ``redact_reasons`` still looked for the
name's whole ``repr`` to hide it. A model-written name longer than about 78 characters (a secret,
say) was then kept in the ``deny`` entry, its first 76 characters; and a name that is not text
(``10**5000``, a tuple nested 100,000 deep) made the Gate raise a bare ``ValueError`` or
``RecursionError`` while recording the deny. Now each such call is a recorded deny, the name
hidden."""

from __future__ import annotations

from typing import Any

import pytest
from test_gate_approvals import _agent
from test_gate_authorization import gate as gate  # the fixture

from agentgate.capabilities import Call
from agentgate.gate import Gate

SECRET = "sk-live-" + "0123456789abcdef" * 6  # a name of 104 characters


def _nested(depth: int) -> Any:
    key: Any = 1
    for _ in range(depth):
        key = (key,)
    return key


def _recorded(gate: Gate, resource: str) -> tuple[str, ...]:
    gate.flush()
    entry = [e for e in gate.audit.entries() if e.resource == resource][-1]
    assert entry.kind == "deny"
    return tuple(entry.reasons)


def test_a_long_undeclared_name_is_hidden_in_the_deny_entry(gate: Gate) -> None:
    refused = gate.authorize(_agent(gate), Call.tool("refund", {"amount": 1, SECRET: 1}), call_id="c1")
    assert not refused.allowed
    reasons = _recorded(gate, "tool:refund")
    assert not any(SECRET[:20] in reason for reason in reasons), reasons
    assert any("<an undeclared argument name>" in reason for reason in reasons), reasons


@pytest.mark.parametrize("name", [10**5000, _nested(100_000)], ids=["huge-int", "deep-tuple"])
def test_an_undeclared_name_that_is_not_text_is_a_recorded_deny(gate: Gate, name: object) -> None:
    refused = gate.authorize(_agent(gate), Call.tool("refund", {"amount": 1, name: 1}), call_id="c2")
    assert not refused.allowed
    assert _recorded(gate, "tool:refund")


@pytest.mark.parametrize("resource", ["model:llama", "tool:lookup"])
def test_a_top_level_key_that_is_not_text_is_a_recorded_deny(gate: Gate, resource: str) -> None:
    refused = gate.authorize(_agent(gate), Call(resource, "generate", {10**5000: 1}), call_id="c3")
    assert not refused.allowed
    assert _recorded(gate, resource)
