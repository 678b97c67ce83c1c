"""Review R85: ``Gate.authorize`` says it raises ``InputError``, writing nothing, for ``tokens``
that are not two token counts, but only an allowed model call's were checked (when its cost was
reckoned): ``tokens="garbage"``, ``(-5, 10)`` or ``(nan, 1)`` on a tool call was recorded as
allowed, and behind an approval gate opened a request. They are now refused for every call before
anything is written, whatever the call and whatever the decision would be.

Real components: a Gate on a SQLite file (``test_gate``'s policy: ``refund`` above 100 needs the
lead's approval, ``vault`` is outside the agent's grant)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from test_gate import Setup

from agentgate.capabilities import Call
from agentgate.errors import InputError

GARBAGE = ["garbage", (-5, 10), (float("nan"), 1), (1, 2, 3), (True, 1), (1, 2.0), {"prompt": 1, "output": 2}]

CALLS = {
    "allowed tool": Call.tool("lookup", {"id": "42"}),
    "tool behind an approval gate": Call.tool("refund", {"amount": 500}),
    "refused tool": Call.tool("vault", {"pin": "99"}),
    "model": Call.model("small"),
}


@pytest.fixture
def setup(tmp_path: Path) -> Iterator[Setup]:
    made = Setup(tmp_path)
    yield made
    made.gate.close()


@pytest.mark.parametrize("name", CALLS)
def test_tokens_that_are_not_two_counts_are_refused_for_any_call_writing_nothing(
    setup: Setup, name: str
) -> None:
    call = CALLS[name]
    for tokens in GARBAGE:
        with pytest.raises(InputError, match="token counts must be two non-negative integers"):
            setup.gate.authorize(setup.agent, call, tokens=tokens)  # type: ignore[arg-type]
    assert setup.entries() == []
    assert setup.gate.approvals.open_records() == []
    assert setup.gate.ledger.usage(setup.agent.chain.root.id) == (0, 0)


def test_two_counts_on_a_tool_call_are_decided_as_before(setup: Setup) -> None:
    """What ``tokens`` a tool call is given changes nothing of what it costs (one call)."""
    auth = setup.gate.authorize(setup.agent, Call.tool("lookup", {"id": "42"}), tokens=[10, 20])
    assert auth.allowed and auth.output_tokens is None and auth.reservations == ()
