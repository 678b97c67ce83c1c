"""``Call``: a call's action is one that a capability could name, checked when the call is built."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentgate.authority import Authority, GrantRepository, issue
from agentgate.capabilities import MAX_NAME_LENGTH, Call, Capability, covers
from agentgate.errors import CapabilityError
from agentgate.keys import SigningKey
from agentgate.store import SQLiteStore

ROOT, AGENT = SigningKey.generate(), SigningKey.generate()


@pytest.mark.parametrize(
    ("action", "named"),
    [
        ("invoke\n", r"holds control character '\\n' \(U\+000A\)"),
        ("", "is not a lower-case identifier"),
        ("in\u200bvoke", "holds invisible format character U\\+200B"),
        ("a" * 5000, "is 5000 characters long, more than 200"),
        ("x" * (MAX_NAME_LENGTH + 1), "more than 200"),
        ("Invoke", "is not a lower-case identifier"),
        (" invoke", "is not a lower-case identifier"),
        ("read-all", "is not a lower-case identifier"),
        ("*", "names every action"),
    ],
)
def test_a_call_whose_action_no_capability_could_name_is_refused(action: str, named: str) -> None:
    """Review R56: a call's action was any string: under an action-``*`` grant a call with action
    "invoke\\n", "", a zero-width character or 5,000 characters was allowed, and its audit entry
    and spans carried that action. Rule: a call's action is a lower-case identifier (a
    capability's action grammar) of at most 200 characters, never ``*``; else a CapabilityError
    naming it."""
    with pytest.raises(CapabilityError, match="a call's action") as refused:
        Call("tool:pay", action, {"amount": 1})
    assert refused.match(named)
    assert len(str(refused.value)) < 200  # the action is named, cut, never quoted whole


def test_a_call_of_any_action_a_capability_can_name_is_built_and_decided(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "a.db")
    try:
        authority = Authority(GrantRepository(store), ROOT.public)
        chain = issue(ROOT, AGENT.did, [Capability.of("tool:pay", "*")], ttl=60)
        for action in ("invoke", "read", "refund_2", "r" * MAX_NAME_LENGTH):
            call = Call("tool:pay", action, {})
            assert type(call.action) is str and call.action == action
            assert authority.decide_held(AGENT, chain, call).allowed
        assert not covers(Capability.of("tool:pay", "invoke"), Call("tool:pay", "read", {}))
    finally:
        store.close()


def test_an_action_of_a_str_subclass_is_checked_as_the_text_it_holds() -> None:
    class Text(str):
        def __eq__(self, other: object) -> bool:
            return True

        __hash__ = str.__hash__

    assert type(Call("tool:pay", Text("read")).action) is str
    with pytest.raises(CapabilityError, match="a call's action"):
        Call("tool:pay", Text("read\n"))
