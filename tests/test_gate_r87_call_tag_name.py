"""Review R87: ``Gate.delegate`` signs ``sub-agent NAME`` into a grant's purpose, then
``; call TAG`` (32 hex digits) for a delegating call, and the name check reads the name granted
as the purpose without that ending. A name that itself ended so was delegated to: its grant read
as one to the shorter name, so every call under the name granted was refused, and the same key
and grant ran as the shorter name (another sub-agent's). Such a name is now refused, with an
``InputError`` before anything is written.

Real components: a Gate on a SQLite file (``test_gate``'s policy)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from test_gate import Setup
from test_gate import setup as setup  # the fixture

from agentgate.capabilities import Call
from agentgate.errors import InputError
from agentgate.gate import AgentIdentity
from agentgate.keys import SigningKey

TAG = "0123456789abcdef0123456789abcdef"


def _delegate(setup: Setup, name: str) -> AgentIdentity:
    return setup.gate.delegate(
        setup.agent,
        name=name,
        key=SigningKey.generate(),
        capabilities=["tool:lookup"],
        ttl=timedelta(seconds=60),
    )


@pytest.mark.parametrize("name", [f"helper; call {TAG}", f"; call {TAG}", f"a; call {TAG}; call {TAG}"])
def test_a_name_ending_as_a_call_tag_is_refused_before_anything_is_written(setup: Setup, name: str) -> None:
    before = setup.gate.audit.size()
    with pytest.raises(InputError, match="ends as a delegating call's tag") as refused:
        _delegate(setup, name)
    assert repr(name)[:60] in str(refused.value)  # quoted, cut at 80 characters
    setup.gate.flush()
    assert setup.gate.audit.size() == before


@pytest.mark.parametrize(
    "name",
    [f"helper; call {TAG.upper()}", f"helper; call {TAG[1:]}", f"helper call {TAG}", f"helper;call {TAG}"],
)
def test_a_name_that_only_looks_near_a_call_tag_is_delegated_and_runs_under_it(
    setup: Setup, name: str
) -> None:
    child = _delegate(setup, name)
    assert setup.gate.authorize(child, Call.tool("lookup", {"id": "1"})).allowed
