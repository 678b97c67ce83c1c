"""``Gate.record_refusal`` and R69's ``Gate.record_refusals`` are public entry points (an
integration's own refusals): a ``refusals`` item that is no (call, reasons) pair, or reasons that
are no list of text, ended in a bare ``ValueError``/``TypeError``/``AttributeError`` from deep
inside the entry's encoding, where ``call`` of the wrong type is an ``InputError`` naming it.
Real Gate, real SQLite file."""

from __future__ import annotations

import re

import pytest
from test_gate_run import Setup
from test_gate_run import setup as setup  # the fixture

from agentgate.capabilities import Call
from agentgate.errors import InputError

CALL = Call.tool("search")


@pytest.mark.parametrize(
    ("refusals", "named"),
    [
        ([(CALL,)], "refusals[0]"),
        ([CALL], "refusals[0]"),
        ([(CALL, ("fine",)), (CALL, [1])], "refusals[1]"),
        ([(CALL, 5)], "refusals[0]"),
        ([(CALL, "one reason, not a list")], "refusals[0]"),
        (7, "refusals"),
        (None, "refusals"),
    ],
)
def test_bad_refusals_are_an_input_error_naming_the_item_and_nothing_is_written(
    setup: Setup, refusals: object, named: str
) -> None:
    """Review R70: a bad ``refusals`` item ended in ``ValueError: not enough values to unpack``,
    ``TypeError: cannot unpack non-iterable Call object``, ``AttributeError: 'int' object has
    no attribute 'isascii'``; now ``InputError`` naming which item, nothing written."""
    before = len(setup.entries())
    with pytest.raises(InputError, match="^" + re.escape(named) + " "):
        setup.gate.record_refusals(setup.agent, refusals)  # type: ignore[arg-type]
    assert len(setup.entries()) == before


@pytest.mark.parametrize("reasons", [[1], 5, None, "one reason, not a list"])
def test_bad_reasons_of_one_refusal_are_an_input_error_and_nothing_is_written(
    setup: Setup, reasons: object
) -> None:
    """Review R70: ``record_refusal(identity, call, [1])`` ended in ``AttributeError: 'int' object
    has no attribute 'isascii'``, and ``5`` in ``TypeError``; a single string was written one
    reason per character. Now ``InputError`` naming ``reasons``, nothing written."""
    before = len(setup.entries())
    with pytest.raises(InputError, match=r"^reasons "):
        setup.gate.record_refusal(setup.agent, CALL, reasons)  # type: ignore[arg-type]
    assert len(setup.entries()) == before


def test_good_refusals_are_written_as_before(setup: Setup) -> None:
    """Review R70: the checks refuse nothing a caller passed rightly (tuples or lists)."""
    written = setup.gate.record_refusals(setup.agent, [(CALL, ("a",)), (CALL, ["b", "c"])])
    assert [auth.reasons for auth in written] == [("a",), ("b", "c")]
    assert setup.gate.record_refusal(setup.agent, CALL, ["d"]).reasons == ("d",)
