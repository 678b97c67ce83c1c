"""Review R92's regression review of fd7984d4: roles were checked in the order written, so a role
inheriting ``hub`` and written before it was refused for the rules ``hub`` already held too many
of; the user edited it, and ``hub`` was refused next. Roles are checked parents first now."""

from __future__ import annotations

import pytest
from test_policy_r92b_combined_cap import _role, _rules, _text

from agentgate.errors import PolicyError
from agentgate.policy import parse_policy


def test_a_refusal_names_the_role_that_first_holds_too_many() -> None:
    text = _text(
        [
            *_role("child", [], ["hub", "z"]),
            *_role("z", ["      - {resource: 'tool:x'}"]),
            *_role("hub", [], ["b0", "b1"]),
            *_role("b0", _rules("tool:*", 40)),
            *_role("b1", _rules("tool:*", 40, 100)),
        ]
    )
    with pytest.raises(PolicyError) as caught:
        parse_policy(text, source="p.yaml")
    assert "role hub holds 80 rules on tool:*, inherited ones" in caught.value.message
    assert caught.value.line == text.splitlines().index("  hub:") + 3  # hub's inherits
