"""Review R85b: the R85 fix for a ``failed`` that returned an exception class (``lambda r:
ValueError``) refused every value that was neither a ``bool`` nor an exception: a ``failed``
returning numpy's ``bool_`` (a comparison on a numpy score) or a return code, read for its truth
until then, had every call that ran fine recorded ``error``, charged as reserved, and
``InputError`` raised. Such values are read for their truth again (``None`` is not failed); a
value whose truth cannot be read is a ``failed`` that raised; an exception class is still refused
with ``InputError`` naming it, by its module where it is not built in.

Real components: a Gate on a SQLite file (``test_gate``'s policy; ``small`` costs 1 micro-dollar
a prompt token and 2 an output token)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_gate import Setup

from agentgate.capabilities import Call
from agentgate.errors import InputError


class Verdict:
    """A value that is not a bool but has a truth, as numpy's ``bool_`` has."""

    def __init__(self, failed: bool) -> None:
        self.failed = failed

    def __bool__(self) -> bool:
        return self.failed


class Ambiguous:
    """A value whose truth cannot be read, as a numpy array of several values."""

    def __bool__(self) -> bool:
        raise ValueError("the truth value of an array with more than one element is ambiguous")


class ParseError(Exception):
    """An exception class of the caller's own, returned where an instance was meant."""


@pytest.fixture
def setup(tmp_path: Path) -> Iterator[Setup]:
    made = Setup(tmp_path)
    yield made
    made.gate.close()


def _run(setup: Setup, returned: object, arun: bool) -> str:
    auth = setup.gate.authorize(setup.agent, Call.model("small"), tokens=(10, 10))
    assert auth.allowed

    def failed(_result: str) -> object:
        return returned

    async def answer() -> str:
        return "text"

    if arun:
        return asyncio.run(setup.gate.arun(auth, answer, failed=failed, spent=lambda _: (1, 1)))  # type: ignore[arg-type]
    return setup.gate.run(auth, lambda: "text", failed=failed, spent=lambda _: (1, 1))  # type: ignore[arg-type]


@pytest.mark.parametrize("arun", [False, True])
@pytest.mark.parametrize("returned", [Verdict(False), 0, None, "", False])
def test_a_falsy_value_failed_returns_is_a_call_that_worked(
    setup: Setup, arun: bool, returned: object
) -> None:
    assert _run(setup, returned, arun) == "text"
    outcome = setup.entries()[-1]
    assert outcome.kind == "outcome" and outcome.status == "ok"
    assert outcome.budget_delta == 3  # the usage spent read: 1 + 2 * 1


@pytest.mark.parametrize("arun", [False, True])
@pytest.mark.parametrize("returned", [Verdict(True), 1, "declined", True])
def test_a_truthy_value_failed_returns_is_a_call_that_failed_at_its_usage(
    setup: Setup, arun: bool, returned: object
) -> None:
    assert _run(setup, returned, arun) == "text"
    outcome = setup.entries()[-1]
    assert outcome.kind == "outcome" and outcome.status == "error"
    assert outcome.budget_delta == 3


def test_numpys_bool_is_read_for_its_truth(setup: Setup) -> None:
    numpy = pytest.importorskip("numpy")
    assert _run(setup, numpy.float64(0.9) < 0.5, False) == "text"
    assert setup.entries()[-1].status == "ok"
    assert _run(setup, numpy.float64(0.1) < 0.5, False) == "text"
    assert setup.entries()[-1].status == "error"


def test_a_value_whose_truth_cannot_be_read_is_a_failed_that_raised(setup: Setup) -> None:
    with pytest.raises(ValueError, match="ambiguous"):
        _run(setup, Ambiguous(), False)
    outcome = setup.entries()[-1]
    assert outcome.status == "error" and outcome.reasons[0] == "ValueError"
    assert outcome.budget_delta == 30  # charged as reserved: 10 + 2 * 10


def test_an_exception_class_of_the_callers_own_is_refused_naming_its_module(setup: Setup) -> None:
    name = f"{ParseError.__module__}.ParseError"
    with pytest.raises(InputError, match=rf"got the exception class {name}, not an exception"):
        _run(setup, ParseError, False)
    outcome = setup.entries()[-1]
    assert outcome.status == "error" and outcome.reasons[0] == "InputError"
    assert outcome.budget_delta == 30
