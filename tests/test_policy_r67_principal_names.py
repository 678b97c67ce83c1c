"""Principal names that are one name to the Gate (review R67).

Since review R66 the Gate compares an agent's name with the policy's principal names case folded
(NFKC, then case folding: ``gate._checks.principal_named``), so that ``Researcher`` on another
key is refused as ``researcher`` is. A policy declaring both ``Alice`` and ``alice`` loaded (lint
reported it, ``names_differ_only_in_case``), and the Gate's folded table then held one of them:
an agent named ``ALICE`` was compared with whichever came last. Such a policy is now refused at
load, naming both and where."""

from __future__ import annotations

import pytest

from agentgate.errors import PolicyError
from agentgate.policy import parse_policy

POLICY = """\
version: 1
principals:
  alice: {{kind: human, roles: [clerk]}}
  bob: {{kind: agent, roles: [clerk]}}
  {second}: {{kind: agent, roles: [clerk]}}
tools:
  tickets.read: {{}}
roles:
  clerk:
    capabilities: [{{resource: tool:tickets.read}}]
"""


@pytest.mark.parametrize("second", ["Alice", "ALICE", "aLiCe"])
def test_principals_differing_only_in_case_are_refused_at_load(second: str) -> None:
    """Review R67: principals ``alice`` and ``Alice`` loaded as two, though the Gate takes an
    agent's name for a principal's case folded, and so takes them for one."""
    with pytest.raises(PolicyError) as refused:
        parse_policy(POLICY.format(second=second), source="team.yaml")
    error = refused.value
    assert (error.file, error.line) == ("team.yaml", 5)
    assert f"principals {second} and alice differ only in case" in str(error)
    assert "rename one of them" in str(error)


def test_principals_differing_in_more_than_case_load() -> None:
    """Names that fold apart (``alice`` and ``alice2``, ``alice`` and ``al.ice``) load as before."""
    for second in ("alice2", "al.ice", "alice_"):
        policy = parse_policy(POLICY.format(second=second))
        assert set(policy.principal_dids) == {"alice", "bob", second}
