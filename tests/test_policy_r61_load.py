"""Loading refusals added in review R61 (agentgate/policy/_load.py): a role or a parent role
listed twice, and a ``%YAML 1.1`` directive."""

from __future__ import annotations

import pytest

from agentgate.errors import PolicyError
from agentgate.policy import parse_policy

POLICY = """\
version: 1
principals:
  alice: {kind: human, roles: ROLES}
  bob: {kind: human}
tools:
  tickets.read: {}
roles:
  base:
    capabilities: [{resource: tool:tickets.read}]
  clerk:
    inherits: INHERITS
approvals:
  read:
    resource: tool:tickets.read
    approvers: APPROVERS
"""


def _policy(roles: str = "[clerk]", inherits: str = "[base]", approvers: str = "[bob]") -> str:
    return POLICY.replace("ROLES", roles).replace("INHERITS", inherits).replace("APPROVERS", approvers)


@pytest.mark.parametrize(
    ("written", "line", "said"),
    [
        ({"roles": "[clerk, clerk]"}, 3, "principal alice lists role clerk twice (entries 1 and 2)"),
        ({"inherits": "[base, base]"}, 11, "role clerk lists role base twice in inherits (entries 1 and 2)"),
    ],
)
def test_a_name_listed_twice_is_refused_at_its_line(written: dict[str, str], line: int, said: str) -> None:
    """Review R61: ``roles: [r, r]`` (and a repeated parent role) loaded silently.

    A repeat means nothing the single entry does not, so it is almost surely a typo for another
    name (``[reader, reader]`` for ``[reader, writer]``): refused, as a repeated ``retry_on``
    class is, at the line of the list, naming both entries."""
    with pytest.raises(PolicyError) as info:
        parse_policy(_policy(**written))
    assert info.value.line == line
    assert info.value.message == said
    assert info.value.hint


def test_names_listed_once_load() -> None:
    """The same policy with every role listed once loads; an approver named twice still does (the
    reference allows it: it counts once toward the quorum)."""
    policy = parse_policy(_policy(roles="[clerk, base]", approvers="[bob, alice, bob]"))
    assert policy.document.principals["alice"].roles == ["clerk", "base"]


YAML_11 = """\
# a policy written for a YAML 1.1 reader
%YAML 1.1
---
version: 1
principals:
  alice: {kind: human, roles: [clerk]}
tools:
  shipping.send: {args: {express: {type: string}}}
roles:
  clerk:
    capabilities: [{resource: tool:shipping.send, constraints: {express: {in: [no, off]}}}]
"""


def test_a_yaml_1_1_directive_is_refused_at_its_line() -> None:
    """Review R61: a ``%YAML 1.1`` directive was accepted and the file read as YAML 1.2.

    The file says ``in: [no, off]`` means two booleans (false), and agentgate read the texts
    "no" and "off": the rule allowed values its author wrote out. Refused at the directive's
    line, with a typed error."""
    with pytest.raises(PolicyError) as info:
        parse_policy(YAML_11, source="p.yaml")
    error = info.value
    assert (error.file, error.line, error.column) == ("p.yaml", 2, 1)
    assert error.message.startswith("%YAML 1.1 directive: agentgate reads a policy as YAML 1.2")
    assert error.hint


def test_a_yaml_1_2_directive_or_none_loads() -> None:
    """``%YAML 1.2`` says how agentgate reads the file anyway: it loads, as does the file without
    a directive; a ``%YAML`` inside a text value is no directive."""
    assert parse_policy(YAML_11.replace("%YAML 1.1", "%YAML 1.2")).document.roles["clerk"]
    assert parse_policy(YAML_11.replace("%YAML 1.1\n---\n", "")).document.roles["clerk"]
    assert parse_policy('version: 1\ndescription: "a\n  %YAML 1.1"\n').document.description == "a %YAML 1.1"
