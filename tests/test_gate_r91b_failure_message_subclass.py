"""Review R91b: review R91 left out the message of a ``NoBackend`` or ``BackendFailed`` whose
``__str__`` raises, but not one whose ``__str__`` returns a ``str`` subclass whose ``__bool__``
or ``__getitem__`` raises: those were read outside the guard, and their error replaced the call's
own, no outcome written and the reservation held (the gateway's streams share the reason). The
message is now read as plain text, and the call settled with it.

Real components: a Gate on a SQLite file (``test_gate``'s policy and budget)."""

from __future__ import annotations

import pytest
from test_gate import Setup
from test_gate import setup as setup  # the fixture
from test_gate_r91_hostile_failure import _raised_from_the_call

from agentgate.capabilities import Call
from agentgate.errors import BackendFailed, NoBackend

MODEL = Call.model("small")
TOKENS = (100, 100)


class RaisingBool(str):
    def __bool__(self) -> bool:
        raise RuntimeError("hostile message __bool__")


class RaisingSlice(str):
    def __getitem__(self, _index: object) -> str:
        raise RuntimeError("hostile message __getitem__")


class DownNoBackend(NoBackend):
    def __str__(self) -> str:
        return RaisingBool("all backends down")


class CutBackendFailed(BackendFailed):
    def __str__(self) -> str:
        return RaisingSlice("stream cut")


def _outcome(setup: Setup) -> tuple[str, tuple[str, ...]]:
    (entry,) = [e for e in setup.entries() if e.kind == "outcome"]
    return entry.status, entry.reasons


@pytest.mark.parametrize("mode", ["sync", "async"])
@pytest.mark.parametrize(
    ("failure", "reason"),
    [
        (DownNoBackend("x"), "DownNoBackend: all backends down"),
        (CutBackendFailed("x"), "CutBackendFailed: stream cut"),
    ],
)
def test_a_failure_whose_message_is_a_hostile_str_is_settled_with_it(
    setup: Setup, mode: str, failure: BaseException, reason: str
) -> None:
    root = setup.agent.chain.root.id
    _raised_from_the_call(setup, mode, failure)
    assert _outcome(setup) == ("error", (reason,))
    assert setup.gate.ledger.usage(root)[1] == 0  # nothing held


def test_a_returned_failure_whose_message_is_a_hostile_str_is_settled_with_it(setup: Setup) -> None:
    failure = DownNoBackend("x")
    root = setup.agent.chain.root.id
    auth = setup.gate.authorize(setup.agent, MODEL, tokens=TOKENS)
    with pytest.raises(DownNoBackend) as raised:
        setup.gate.run(auth, lambda: "answer", failed=lambda _result: failure)
    assert raised.value is failure
    assert _outcome(setup) == ("error", ("DownNoBackend: all backends down",))
    assert setup.gate.ledger.usage(root)[1] == 0  # nothing held
