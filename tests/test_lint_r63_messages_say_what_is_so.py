"""The messages of the lint findings on switches agentgate does not honour.

Review R63: ``settings.revocation: false``, a role's ``revocable: false``, a tool's ``audit: false``
and ``delegation.share_grant: true`` switch nothing (docs/policy-reference.md; r63-docs showed each
with a real Gate). Their lint findings' messages read as if the switch worked ("revocation checks
are switched off for the whole policy", "grants for role R cannot be revoked", "calls to tool:T
would not be audited", "role R lets sub-agents run on its own grant"): a reader of ``policy lint``
took the policy at its word. Each message now says what the policy asks and what agentgate does.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from agentgate.errors import PolicyError
from agentgate.policy import load_policy
from agentgate.policy._lint import lint

CORPUS = Path(__file__).resolve().parent / "corpus"

CASES = {
    "032-revocation-disabled": ("revocation_disabled", "agentgate always checks revocation"),
    "040-tool-not-audited": ("tool_not_audited", "agentgate audits every call"),
    "027-sub-agent-shares-grant": ("sub_agent_shares_grant", "agentgate refuses"),
}
UNTRUE = ("are switched off", "grants for role", "would not be audited", "lets sub-agents run")


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_message_says_the_switch_does_nothing(case: str) -> None:
    code, truth = CASES[case]
    messages = [f.message for f in lint(load_policy(CORPUS / case / "policy.yaml")) if f.code == code]
    assert messages, case
    for message in messages:
        assert truth in message, message
        assert not any(words in message for words in UNTRUE), message


@pytest.mark.parametrize(
    ("text", "field"),
    [("version: 1\ndelegation: {}\n", "delegation"), ("version: 1\nroles: {r: {audit: false}}\n", "audit")],
)
def test_a_field_of_another_section_is_not_suggested_as_itself(tmp_path: Path, text: str, field: str) -> None:
    """Review R63 (r63-docs's finding): a field valid in another section but written in the wrong
    one had the hint "did you mean 'delegation'?", the very name written. The hint says the field
    belongs to another section."""
    path = tmp_path / "p.yaml"
    path.write_text(text)
    with pytest.raises(PolicyError) as caught:
        load_policy(path)
    message = str(caught.value)
    assert "unknown field" in message and f"did you mean {field!r}" not in message, message
    assert f"{field!r} is a field of another section" in message, message
