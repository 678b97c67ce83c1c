"""Review R91c: ``run`` compares its ``call_id`` and ``run_id`` with those the allow was decided
with (review R90), the given ones as plain text (review R91b), but the decided ones kept their
``str`` subclass, whose own ``__ne__`` was called: a case-insensitive id decided as ``"ABC"``
let a run with ``"abc"`` through (the once-only key and approval bound to ``"ABC"``, the call
keyed under ``"abc"``), and one whose ``__ne__`` raised made ``run`` raise an untyped error.
``Gate.authorize`` now keeps the ids as plain text, and ``run`` compares plain text on both sides.

Real components: a Gate on a SQLite file (``test_gate``'s policy)."""

from __future__ import annotations

import pytest
from test_gate import Setup
from test_gate import setup as setup  # the fixture

from agentgate.capabilities import Call
from agentgate.errors import InputError


class CaseBlind(str):
    """An id equal to any text with its letters in another case."""

    def __eq__(self, other: object) -> bool:
        return isinstance(other, str) and self.lower() == other.lower()

    def __ne__(self, other: object) -> bool:
        return not self.__eq__(other)

    __hash__ = str.__hash__


class Hostile(str):
    """An id whose inequality raises."""

    def __ne__(self, other: object) -> bool:
        raise RuntimeError("hostile __ne__")

    __hash__ = str.__hash__


def test_an_id_decided_as_a_subclass_is_plain_text(setup: Setup) -> None:
    auth = setup.gate.authorize(
        setup.agent, Call.tool("lookup", {"id": "1"}), call_id=CaseBlind("ABC"), run_id="r"
    )
    assert type(auth.call_id) is str and auth.call_id == "ABC"


def test_a_case_blind_decided_id_does_not_let_other_text_run(setup: Setup) -> None:
    auth = setup.gate.authorize(
        setup.agent, Call.tool("lookup", {"id": "1"}), call_id=CaseBlind("ABC"), run_id="r"
    )
    ran = []
    with pytest.raises(InputError, match="call_id 'abc' is not the one"):
        setup.gate.run(auth, lambda: ran.append(1), call_id="abc", run_id="r")
    assert ran == []
    assert setup.gate.run(auth, lambda: "ran", call_id="ABC", run_id="r") == "ran"  # the allow is unused


def test_a_decided_id_whose_inequality_raises_runs_its_call(setup: Setup) -> None:
    auth = setup.gate.authorize(
        setup.agent, Call.tool("lookup", {"id": "2"}), call_id=Hostile("c2"), run_id="r"
    )
    assert setup.gate.run(auth, lambda: 1, call_id="c2", run_id="r") == 1
    other = setup.gate.authorize(
        setup.agent, Call.tool("lookup", {"id": "3"}), call_id=Hostile("c3"), run_id="r"
    )
    with pytest.raises(InputError, match="call_id 'c4' is not the one"):
        setup.gate.run(other, lambda: 1, call_id="c4", run_id="r")
