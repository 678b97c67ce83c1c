"""``CallerGone`` and ``GatewayStopped`` are made as any exception is: with no message, one, or
several arguments, ``sent`` by keyword only (review R90b: R90's ``sent`` made the message
required and refused a second argument, a ``TypeError`` where ``Exception`` took them)."""

from __future__ import annotations

import copy
import pickle

import pytest

from agentgate.errors import CallerGone, DispatchError, GatewayStopped


@pytest.mark.parametrize("cls", [CallerGone, GatewayStopped])
@pytest.mark.parametrize("args", [(), ("gone",), ("gone", 499)], ids=["none", "one", "two"])
def test_a_cut_error_takes_the_arguments_an_exception_takes(
    cls: type[DispatchError], args: tuple[object, ...]
) -> None:
    error = cls(*args)
    assert error.args == args
    assert error.sent is True  # type: ignore[attr-defined]  # may have been sent, unless told


@pytest.mark.parametrize("cls", [CallerGone, GatewayStopped])
def test_sent_is_given_by_keyword_only_and_kept_by_a_copy(cls: type[DispatchError]) -> None:
    positional = cls("gone", False)
    assert positional.args == ("gone", False) and positional.sent is True  # type: ignore[attr-defined]
    unsent = cls("gone", sent=False)
    assert unsent.args == ("gone",) and str(unsent) == "gone"
    for again in (pickle.loads(pickle.dumps(unsent)), copy.copy(unsent)):
        assert type(again) is cls and again.args == ("gone",) and again.sent is False  # type: ignore[attr-defined]
