"""Review R85: ``Gate.run(..., failed=...)`` takes a ``failed`` that returns a boolean, or the
exception the call failed with; whatever else it returned was read for its truth. An exception
class (``failed=lambda r: ValueError``, an instance meant) recorded an ``error`` outcome with no
reason, and nothing was raised: the caller went on as if the call had worked. Such a ``failed`` is
now a broken one, as one that raises: the outcome is an ``error`` charged as reserved (the call
ran), its reason ``InputError``, and the ``InputError`` naming the class is raised, by ``run`` and
``arun`` alike. Any other value is read for its truth, as before R85 (review R85b:
``test_regress_r85_gate_failed_truth``).

Real components: a Gate on a SQLite file (``test_gate``'s policy; ``small`` costs 1 micro-dollar
a prompt token and 2 an output token)."""

from __future__ import annotations

import pytest
from test_gate import Setup
from test_regress_r85_gate_failed_truth import _run
from test_regress_r85_gate_failed_truth import setup as setup  # the fixture

from agentgate.capabilities import Call
from agentgate.errors import InputError


@pytest.mark.parametrize("arun", [False, True])
@pytest.mark.parametrize(
    ("returned", "said"),
    [
        (ValueError, r"got the exception class ValueError, not an exception \(return ValueError\(\.\.\.\)\)"),
    ],
)
def test_a_failed_that_returns_an_exception_class_raises_and_records_why(
    setup: Setup, arun: bool, returned: object, said: str
) -> None:
    with pytest.raises(InputError, match=f"failed must return a bool or an exception, {said}"):
        _run(setup, returned, arun)
    outcome = setup.entries()[-1]
    assert outcome.kind == "outcome" and outcome.status == "error"
    assert outcome.reasons[0] == "InputError" and "charged as reserved" in outcome.reasons[-1]
    assert outcome.budget_delta == 30  # charged as reserved: 10 + 2 * 10


def test_a_failed_that_returns_an_exception_still_raises_it_at_the_usage_read(setup: Setup) -> None:
    auth = setup.gate.authorize(setup.agent, Call.model("small"), tokens=(10, 10))
    with pytest.raises(ValueError, match="unparsable"):
        setup.gate.run(
            auth, lambda: "text", failed=lambda _: ValueError("unparsable"), spent=lambda _: (1, 1)
        )
    outcome = setup.entries()[-1]
    assert outcome.status == "error" and outcome.reasons == ("ValueError",) and outcome.budget_delta == 3
