"""Gate.issue and the command line's ``grant issue --role``: a role name written with ``_`` for
the policy's ``-`` (``support_agent``) gets "did you mean", as a misspelt policy field does."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentgate import Gate
from agentgate.errors import PolicyError
from agentgate.keys import SigningKey, save_key

POLICY = """\
version: 1
trust_anchors:
  root: {key: keys/root.pub}
principals:
  support-agent: {kind: agent, key: keys/agent.pub, roles: [support-agent]}
tools:
  docs.read:
    args: {path: {type: string, required: true}}
roles:
  support-agent:
    kind: agent
    capabilities:
      - resource: tool:docs.read
    ttl_s: 3600
  auditor:
    kind: agent
    capabilities:
      - resource: tool:docs.read
"""


@pytest.mark.parametrize(("written", "meant"), [("support_agent", "support-agent"), ("auditr", "auditor")])
def test_an_unknown_role_given_to_issue_is_told_the_role_meant(
    tmp_path: Path, written: str, meant: str
) -> None:
    """Review R73: ``Gate.issue(role="support_agent")`` listed the policy's roles and hinted "see
    the roles section"; the loader's did-you-mean, used for misspelt fields and names, now names
    the close one."""
    keys = {name: SigningKey.generate() for name in ("root", "agent")}
    for name, key in keys.items():
        save_key(key, tmp_path / "keys", name)
    (tmp_path / "p.yaml").write_text(POLICY)
    gate = Gate.open(tmp_path / "p.yaml", tmp_path / "s.db")
    try:
        with pytest.raises(PolicyError) as refused:
            gate.issue(keys["root"], name="support-agent", key=keys["agent"], role=written)
    finally:
        gate.close()
    assert refused.value.hint == f"did you mean {meant!r}?", str(refused.value)
    assert "one of: support-agent, auditor" in str(refused.value)


def test_a_role_close_to_none_keeps_the_roles_hint(tmp_path: Path) -> None:
    """Review R73: no close role, no guess: the hint still points at the roles section."""
    from agentgate.policy import parse_policy
    from agentgate.policy._index import role_grant_template

    policy = parse_policy(
        POLICY.replace("trust_anchors:\n  root: {key: keys/root.pub}\n", "").replace(
            "principals:\n  support-agent: {kind: agent, key: keys/agent.pub, roles: [support-agent]}\n", ""
        ),
        source="p.yaml",
    )
    with pytest.raises(PolicyError) as refused:
        role_grant_template(policy, "xyzzy")
    assert refused.value.hint == "see the roles section of the policy"
