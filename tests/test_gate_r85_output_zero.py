"""Review R85: a model call authorized with an estimate of 0 output tokens (``tokens=(100, 0)``)
had no output cap: the cap was tested for truth, and 0 read as "no limit", so one backend report
of 1,000,000 completion tokens was charged whole and spent the caller's budget. The gateway and
the LangGraph middleware refuse ``max_tokens`` 0; ``Gate.authorize`` now refuses such an estimate
too, with ``InputError``, writing nothing, and an output cap of 0 where one is set caps at 0.

Real components: a Gate on a SQLite file (``test_gate``'s policy: ``small`` costs 1 micro-dollar
a prompt token and 2 an output token, on a ``usd_micros`` budget of 10,000)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from test_gate import Setup

from agentgate.capabilities import Call
from agentgate.errors import InputError
from agentgate.gate import Authorization, Verdict
from agentgate.gate._costs import charged_counts


@pytest.fixture
def setup(tmp_path: Path) -> Iterator[Setup]:
    made = Setup(tmp_path)
    yield made
    made.gate.close()


@pytest.mark.parametrize("call", [Call.model("small"), Call.tool("lookup", {"id": "42"})])
@pytest.mark.parametrize("tokens", [(100, 0), (0, 0), [5, 0]])
def test_an_estimate_of_no_output_is_refused_writing_nothing(
    setup: Setup, call: Call, tokens: tuple[int, int]
) -> None:
    with pytest.raises(InputError, match=r"output count of at least 1, got 0.*not read as no limit"):
        setup.gate.authorize(setup.agent, call, tokens=tokens)
    assert setup.entries() == []
    assert setup.gate.ledger.usage(setup.agent.chain.root.id) == (0, 0)


def test_an_output_of_one_token_caps_what_a_backend_reports(setup: Setup) -> None:
    """The smallest estimate allowed still caps: 10^6 completion tokens reported are charged 1."""
    auth = setup.gate.authorize(setup.agent, Call.model("small"), tokens=(100, 1))
    assert auth.allowed and auth.output_tokens == 1
    setup.gate.run(auth, lambda: "x", spent=lambda _: (100, 1_000_000))
    outcome = setup.entries()[-1]
    assert outcome.kind == "outcome" and outcome.budget_delta == 100 + 2 * 1
    assert "over the call's max_tokens of 1; charged 1" in " ".join(outcome.reasons)
    assert setup.gate.ledger.spent(setup.agent.chain.root.id) == 102


def test_an_output_cap_of_zero_caps_at_zero_not_at_no_limit() -> None:
    """Where a cap of 0 is set (``Authorization.output_tokens``), a report is charged no output."""
    capped = Authorization(Verdict.ALLOW, Call.model("small"), None, output_tokens=0)
    assert charged_counts((100, 1_000_000), capped) == (100, 0)
    uncapped = Authorization(Verdict.ALLOW, Call.model("small"), None)
    assert charged_counts((100, 1_000_000), uncapped) == (100, 1_000_000)
