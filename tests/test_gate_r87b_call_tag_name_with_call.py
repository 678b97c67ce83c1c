"""Review R87b: R87 refused a sub-agent name ending as a delegating call's tag (``; call`` and 32
hex digits) for every delegation, but only one without a ``call`` is ambiguous: with a ``call``,
the purpose signed is ``sub-agent NAME; call TAG``, and the name check strips exactly that last
tag, reading the name as given. Such delegations worked before R87, and a grant so delegated
could no longer be resumed by its call (the refusal came before the store was asked for it).
The name is now refused only without a ``call``.

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
NAME = f"scout; call {TAG}"


def _delegate(setup: Setup, key: SigningKey, call: str | None) -> AgentIdentity:
    return setup.gate.delegate(
        setup.agent,
        name=NAME,
        key=key,
        capabilities=["tool:lookup"],
        ttl=timedelta(seconds=60),
        call=call,
    )


def test_a_name_ending_as_a_call_tag_is_delegated_for_a_call_and_runs_under_it(setup: Setup) -> None:
    key = SigningKey.generate()
    child = _delegate(setup, key, "thread-1|call-7")
    assert child.name == NAME
    allowed = setup.gate.authorize(child, Call.tool("lookup", {"id": "1"}))
    assert allowed.allowed, allowed.reasons
    shorter = AgentIdentity("scout", key, child.chain, child.tenant)  # the grant is not scout's
    assert not setup.gate.authorize(shorter, Call.tool("lookup", {"id": "2"})).allowed


def test_a_grant_delegated_so_for_a_call_is_handed_on_again_to_the_same_call(setup: Setup) -> None:
    key = SigningKey.generate()
    first = _delegate(setup, key, "thread-1|call-7")
    setup.gate.flush()
    written = setup.gate.audit.size()
    again = _delegate(setup, key, "thread-1|call-7")  # the call resumed (an approval, a restart)
    assert again.grant_id == first.grant_id
    setup.gate.flush()
    assert setup.gate.audit.size() == written  # handed on again, not granted anew


def test_without_a_call_the_name_is_still_refused(setup: Setup) -> None:
    with pytest.raises(InputError, match="delegated without a call, the grant would read as one to 'scout'"):
        _delegate(setup, SigningKey.generate(), None)
