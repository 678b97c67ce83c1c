"""Review R86: an error about a constraint names its argument on one line. A gate's ``when``
names are any text (only their length is bounded), and a rule's constraints are compiled before
its argument names are checked, so a name holding a line break, a bidi override or an escape is
quoted as Python writes it (``'a\\nb'``), as the location path quotes it. Until R86 it was
written raw: the message was two lines, or reordered, or moved a terminal's cursor."""

from __future__ import annotations

import pytest

from agentgate.errors import PolicyError
from agentgate.policy import parse_policy

LONG = "x" * 1025


def _gate(arg: str, spec: str) -> str:
    return f"""version: 1
principals:
  alice: {{kind: human, roles: []}}
tools:
  t: {{}}
approvals:
  g:
    resource: tool:t
    when:
      "{arg}": {spec}
    approvers: [alice]
"""


def _role(arg: str, spec: str) -> str:
    return f"""version: 1
tools:
  t: {{}}
roles:
  r:
    kind: agent
    capabilities: [{{resource: tool:t, constraints: {{"{arg}": {spec}}}}}]
"""


def _message(text: str) -> str:
    with pytest.raises(PolicyError) as raised:
        parse_policy(text, source="p.yaml")
    assert raised.value.line is not None
    return raised.value.message


@pytest.mark.parametrize(
    ("written", "shown"), [("a\\nb", "'a\\nb'"), ("a\\u202eb", "'a\\u202eb'"), ("a\\eb", "'a\\x1bb'")]
)
@pytest.mark.parametrize(
    ("spec", "said"),
    [
        (f'{{eq: "{LONG}"}}', "its 'eq' value is 1025 characters long"),
        ("{le: 9007199254740993.0}", "its 'le' value, 9007199254740993.0, is a number no float holds"),
    ],
)
def test_a_gates_argument_name_is_quoted_on_one_line(written: str, shown: str, spec: str, said: str) -> None:
    message = _message(_gate(written, spec))
    assert message.startswith(f"approval gate g, argument {shown}: {said}")
    assert message.isprintable()


def test_a_rules_argument_name_is_quoted_on_one_line() -> None:
    message = _message(_role("a\\nb", f'{{eq: "{LONG}"}}'))
    assert message == "role r rule 1, argument 'a\\nb': its 'eq' value is 1025 characters long"


def test_an_empty_argument_name_is_quoted() -> None:
    message = _message(_gate("", f'{{eq: "{LONG}"}}'))
    assert message == "approval gate g, argument '': its 'eq' value is 1025 characters long"


def test_a_printable_argument_name_is_written_as_it_is() -> None:
    message = _message(_gate("url", f'{{eq: "{LONG}"}}'))
    assert message == "approval gate g, argument url: its 'eq' value is 1025 characters long"
