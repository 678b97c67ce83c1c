"""Review R72 (helper r72-rev-a) of the round's changes: a misspelt required field in a policy
(agentgate/policy/_load.py) and ``audit prove/report --out`` over a saved checkpoint
(agentgate/cli/audit.py)."""

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
"""


def _refused(text: str) -> PolicyError:
    with pytest.raises(PolicyError) as info:
        parse_policy(POLICY + text)
    return info.value


def test_two_misspelt_required_fields_are_two_errors() -> None:
    """Review R72: with two required fields misspelt (``inpt:``, ``outpt:``), only the first pair
    was counted once: four errors of pydantic (two missing, two unknown) were reported as "(and 2
    more errors)", three mistakes, where the writer made two."""
    error = _refused("models:\n  m1:\n    cost_per_mtok: {inpt: 1, outpt: 2}\n")
    assert error.message == "unknown field models.m1.cost_per_mtok.inpt (and 1 more error)"
    assert error.hint == "did you mean 'input'?"


def test_a_misspelt_required_field_after_another_error_is_counted_once() -> None:
    """Review R72: a misspelt required field was counted once only when its missing error came
    first: after another error (a value of the wrong type) it counted twice, "(and 2 more
    errors)" for two mistakes."""
    error = _refused(
        "  fetch: {timeout_s: soon}\napprovals:\n  g:\n    resource: tool:mail.send\n    approver: [bob]\n"
    )
    assert error.message.endswith("(and 1 more error)"), error.message


def test_a_field_of_another_section_is_not_called_a_misspelling_alone() -> None:
    """Review R72: a GPU written under ``models`` (``cost_per_gpu_hour:``, a field of ``gpus``)
    was reported with "did you mean 'cost_per_mtok'?" alone, as a typo: until R72 the hint said
    the field belongs to another section (review R63), which the writer needs to know (the two
    fields do not take the same value). Both are said now."""
    error = _refused("models:\n  m1:\n    cost_per_gpu_hour: 2.0\n")
    assert error.message == "unknown field models.m1.cost_per_gpu_hour"
    assert error.hint == (
        "did you mean 'cost_per_mtok'? 'cost_per_gpu_hour' is a field of another section: "
        "see docs/policy-reference.md"
    )
