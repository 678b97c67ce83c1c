"""Review R70: R70's input checks of ``Gate.record_refusal``/``record_refusals`` (the reasons, the
items) left their other arguments as they came: an ``identity`` that is no ``AgentIdentity``, a
``findings`` that is no list of ``Finding``, a ``call_id`` that is no text ended in a bare
``AttributeError``/``TypeError`` from deep inside the entry's encoding (or, for ``call_id``, was
taken as it was), where ``Gate.authorize`` refuses each with an ``InputError`` naming it. Real
Gate, real SQLite file."""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest
from test_gate_run import Setup
from test_gate_run import setup as setup  # the fixture

from agentgate.capabilities import Call
from agentgate.errors import InputError
from agentgate.findings import Finding, FindingKind

CALL = Call.tool("search")


BAD: list[tuple[str, Callable[[Setup], object], str]] = [
    ("identity-one", lambda s: s.gate.record_refusal("agent", CALL, ["x"]), "identity"),  # type: ignore[arg-type]
    ("identity-many", lambda s: s.gate.record_refusals("agent", [(CALL, ["x"])]), "identity"),  # type: ignore[arg-type]
    ("finding-item", lambda s: s.gate.record_refusal(s.agent, CALL, ["x"], findings=[1]), "findings"),  # type: ignore[list-item]
    ("findings-int", lambda s: s.gate.record_refusal(s.agent, CALL, ["x"], findings=5), "findings"),  # type: ignore[arg-type]
    ("call-id-int", lambda s: s.gate.record_refusal(s.agent, CALL, ["x"], call_id=5), "call_id"),  # type: ignore[arg-type]
]


@pytest.mark.parametrize(("refused", "named"), [(f, n) for _, f, n in BAD], ids=[i for i, _, _ in BAD])
def test_a_bad_identity_findings_or_call_id_of_a_refusal_is_an_input_error_naming_it(
    setup: Setup, refused: Callable[[Setup], object], named: str
) -> None:
    """Review R70: ``record_refusal("agent", ...)`` ended in ``AttributeError: 'str' object has no
    attribute 'did'``, ``findings=[1]`` in ``AttributeError: 'int' object has no attribute
    'code'``, ``findings=5`` in ``TypeError``, and ``call_id=5`` was written as it came. Now
    ``InputError`` naming the argument, nothing written."""
    before = len(setup.entries())
    with pytest.raises(InputError, match="^" + re.escape(named) + " "):
        refused(setup)
    assert len(setup.entries()) == before


def test_a_refusal_with_findings_and_a_call_id_is_written_as_before(setup: Setup) -> None:
    """Review R70: the checks refuse nothing a caller passed rightly."""
    finding = Finding(kind=FindingKind.AUTHORITY_CHAIN_OPACITY, code="no_chain", message="no chain")
    auth = setup.gate.record_refusal(setup.agent, CALL, ["x"], findings=(finding,), call_id="c1")
    assert auth.findings == (finding,)
    assert setup.gate.record_refusal(None, CALL, ["y"]).identity is None
