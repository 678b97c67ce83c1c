"""Review R91: settling a model call that failed read the failure's attributes without a guard:
a ``DispatchError`` whose ``sent`` (review R90) or a ``BackendFailed`` whose ``after_output`` has
a truth that cannot be read (a numpy array of several values), and a ``NoBackend`` or
``BackendFailed`` whose ``__str__`` raises (raised by ``fn``, or returned by ``failed``). That
error replaced the call's own: no outcome was written and the reservation stayed held, as a
raising ``__eq__`` did until review R89. Now the call is settled (an unreadable flag read as
"it may have happened": sent, output delivered; an unreadable message left out) and the
caller gets the call's own exception.

Real components: a Gate on a SQLite file (``test_gate``'s policy and budget)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from test_gate import Setup

from agentgate.audit.entry import AuditEntry
from agentgate.capabilities import Call
from agentgate.errors import BackendFailed, DispatchError, NoBackend
from agentgate.gate import Authorization

MODEL = Call.model("small")
TOKENS = (100, 100)
RESERVED = 300
"""What ``TOKENS`` of ``small`` reserve (100 prompt tokens at 1, 100 output tokens at 2)."""


class Ambiguous:
    """A value whose truth cannot be read, as a numpy array of several values."""

    def __bool__(self) -> bool:
        raise ValueError("the truth value of an array with more than one element is ambiguous")


class UnreadableNoBackend(NoBackend):
    def __str__(self) -> str:
        raise RuntimeError("__str__ broke")


class UnreadableBackendFailed(BackendFailed):
    def __str__(self) -> str:
        raise RuntimeError("__str__ broke")


def _unsent_ambiguous() -> BaseException:
    return DispatchError("no route", sent=Ambiguous())  # type: ignore[arg-type]


def _cut_ambiguous() -> BaseException:
    cut = BackendFailed("cut")
    cut.after_output = Ambiguous()  # type: ignore[assignment]
    return cut


RAISED: dict[str, tuple[Callable[[], BaseException], tuple[str, ...], int]] = {
    # what fn raises -> the outcome's reasons, the usage spent
    "sent": (_unsent_ambiguous, ("DispatchError",), 0),
    "str": (lambda: UnreadableNoBackend("x"), ("UnreadableNoBackend",), 0),
    "after_output": (
        _cut_ambiguous,
        ("BackendFailed: cut", "the call ran but its usage could not be read; charged as reserved"),
        RESERVED,
    ),
}


@pytest.fixture
def setup(tmp_path: Path) -> Iterator[Setup]:
    made = Setup(tmp_path)
    yield made
    made.gate.close()


def _outcomes(setup: Setup) -> list[AuditEntry]:
    return [entry for entry in setup.entries() if entry.kind == "outcome"]


def _raised_from_the_call(setup: Setup, mode: str, failure: BaseException) -> Authorization:
    """Run (``mode`` ``sync`` or ``async``) a model call that raises ``failure``; check that the
    gate re-raised it, that very exception, and hand back the call's authorization."""
    auth = setup.gate.authorize(setup.agent, MODEL, tokens=TOKENS)

    def fn() -> str:
        raise failure

    async def afn() -> str:
        raise failure

    with pytest.raises(type(failure)) as raised:
        if mode == "sync":
            setup.gate.run(auth, fn)
        else:
            asyncio.run(setup.gate.arun(auth, afn))
    assert raised.value is failure  # the call's own exception, not the error of reading it
    return auth


@pytest.mark.parametrize("mode", ["sync", "async"])
@pytest.mark.parametrize("case", sorted(RAISED))
def test_a_failure_with_an_unreadable_attribute_is_settled_and_reraised(
    setup: Setup, mode: str, case: str
) -> None:
    make, reasons, spent = RAISED[case]
    failure = make()
    root = setup.agent.chain.root.id
    auth = _raised_from_the_call(setup, mode, failure)
    (outcome,) = _outcomes(setup)
    assert (outcome.ref, outcome.status, outcome.reasons) == (auth.audit_index, "error", reasons)
    assert setup.gate.ledger.usage(root) == (spent, 0)  # nothing held


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_failure_failed_returns_whose_message_cannot_be_read_is_settled_and_raised(
    setup: Setup, mode: str
) -> None:
    failure = UnreadableBackendFailed("x")
    root = setup.agent.chain.root.id
    auth = setup.gate.authorize(setup.agent, MODEL, tokens=TOKENS)

    async def answer() -> str:
        return "answer"

    with pytest.raises(UnreadableBackendFailed) as raised:
        if mode == "sync":
            setup.gate.run(auth, lambda: "answer", failed=lambda _result: failure)
        else:
            asyncio.run(setup.gate.arun(auth, answer, failed=lambda _result: failure))
    assert raised.value is failure
    (outcome,) = _outcomes(setup)
    assert (outcome.status, outcome.reasons) == ("error", ("UnreadableBackendFailed",))
    assert setup.gate.ledger.usage(root)[1] == 0  # nothing held
