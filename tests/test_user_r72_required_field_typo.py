"""A misspelt required field (agentgate/policy/_load.py, schema errors), found by following
docs/policy-reference.md as a newcomer in review R72."""

from __future__ import annotations

import pytest

from agentgate.errors import PolicyError
from agentgate.policy import parse_policy

POLICY = """\
version: 1
principals:
  bob: {kind: human}
tools:
  mail.send: {}
roles:
  mailer:
    capabilities: [{resource: tool:mail.send}]
    BUDGET
approvals:
  bulk-mail:
    resource: tool:mail.send
    APPROVERS
"""


def _policy(budget: str = "ttl_s: 60", approvers: str = "approvers: [bob]") -> str:
    return POLICY.replace("BUDGET", budget).replace("APPROVERS", approvers)


@pytest.mark.parametrize(
    ("written", "line", "said", "hint"),
    [
        (
            {"approvers": "approver: [bob]"},
            13,
            "unknown field approvals.bulk-mail.approver",
            "did you mean 'approvers'?",
        ),
        (
            {"budget": "budget: {limt: 1000}"},
            9,
            "unknown field roles.mailer.budget.limt",
            "did you mean 'limit'?",
        ),
    ],
)
def test_a_misspelt_required_field_is_named_as_written(
    written: dict[str, str], line: int, said: str, hint: str
) -> None:
    """Review R72: a required field written with a typo (``approver:`` for ``approvers:``,
    ``limt:`` for ``limit:``) was reported as the required field missing, at the section's first
    key, with the hint "add it" and "(and 1 more error)": the unknown field actually written, and
    its "did you mean", were the error left out, so the message sent the writer to add a field
    that was, to their eye, already there. The unknown field beside the missing one is the error
    reported, at its own line, with the missing field's name as the suggestion."""
    with pytest.raises(PolicyError) as info:
        parse_policy(_policy(**written))
    assert info.value.message == said
    assert info.value.line == line
    assert info.value.hint == hint


def test_a_required_field_left_out_is_still_named_missing() -> None:
    """Without a misspelt field beside it, a required field left out is reported as before."""
    with pytest.raises(PolicyError) as info:
        parse_policy(_policy(approvers=""))
    assert info.value.message == "approvals.bulk-mail.approvers is required"
    assert info.value.hint == "add it"
