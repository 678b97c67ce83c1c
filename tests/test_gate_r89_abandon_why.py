"""Review R89: ``Gate.abandon(auth, why)`` took a ``why`` that was not text and wrote its
``repr`` into the outcome (``CancelledError: None``), where ``Gate.decline`` refuses a
``reason`` that is not text. ``abandon`` now refuses it too, with ``InputError`` naming ``why``,
writing nothing and leaving the allow unused: it can still be abandoned (or run).

Real components: a Gate on a SQLite file (``test_gate``'s policy and setup)."""

from __future__ import annotations

import pytest
from test_gate import Setup
from test_gate import setup as setup  # the fixture

from agentgate.capabilities import Call
from agentgate.errors import InputError


@pytest.mark.parametrize("why", [None, 123, b"cancelled"], ids=["none", "int", "bytes"])
def test_abandon_refuses_a_why_that_is_not_text_and_leaves_the_allow_unused(
    setup: Setup, why: object
) -> None:
    auth = setup.gate.authorize(setup.agent, Call.tool("lookup", {"id": "1"}))
    assert auth.allowed
    before = len(setup.entries())

    with pytest.raises(InputError, match=r"^why must be text, got "):
        setup.gate.abandon(auth, why)  # type: ignore[arg-type]

    assert len(setup.entries()) == before
    setup.gate.abandon(auth, "the run was cancelled")
    outcome = setup.entries()[-1]
    assert (outcome.kind, outcome.status, outcome.ref) == ("outcome", "error", auth.audit_index)
    assert outcome.reasons == ("CancelledError: the run was cancelled",)
