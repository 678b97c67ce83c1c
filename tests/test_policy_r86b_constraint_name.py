"""Review R86b: the error of a constraint that cannot be compiled (an empty ``in`` list, no
operator at all) names its location as every error of the loader does (``dotted_path``): an
argument name that is empty or holds a line break, a bidi override or an escape is quoted as
Python writes it (``approvals.g.when.'a\\nb'``). R86 quoted it only in the errors that name the
rule (``tests/test_policy_r86_when_name.py``); until R86b this one joined the path raw, and the
message was two lines, or reordered."""

from __future__ import annotations

import pytest
from test_policy_r86_when_name import _gate, _message, _role

_NAMES = [("a\\nb", "'a\\nb'"), ("a\\u202eb", "'a\\u202eb'"), ("a\\eb", "'a\\x1bb'"), ("", "''")]
_SPECS = [
    ("{in: []}", "'in' takes a non-empty list of at most 1000 values"),
    ("{}", "expected a non-empty mapping of operators"),
]


@pytest.mark.parametrize(("written", "shown"), _NAMES)
@pytest.mark.parametrize(("spec", "said"), _SPECS)
def test_a_gates_argument_name_is_quoted_in_a_constraint_error(
    written: str, shown: str, spec: str, said: str
) -> None:
    message = _message(_gate(written, spec))
    assert message.startswith(f"approvals.g.when.{shown}: {said}")
    assert message.isprintable()


@pytest.mark.parametrize(("written", "shown"), _NAMES)
@pytest.mark.parametrize(("spec", "said"), _SPECS)
def test_a_rules_argument_name_is_quoted_in_a_constraint_error(
    written: str, shown: str, spec: str, said: str
) -> None:
    message = _message(_role(written, spec))
    assert message.startswith(f"roles.r.capabilities.0.constraints.{shown}: {said}")
    assert message.isprintable()


def test_a_printable_argument_name_is_written_as_it_is() -> None:
    message = _message(_gate("url", "{in: []}"))
    assert message.startswith("approvals.g.when.url: 'in' takes a non-empty list")


def test_the_rule_name_quotes_an_argument_name_as_the_location_path_does() -> None:
    """One rule for both messages: a name holding a dot is quoted in each, so that it does not
    read as a path (``approvals.g.when.a.b`` would be a key ``b`` under ``a``)."""
    assert _message(_gate("a.b", "{in: []}")).startswith("approvals.g.when.'a.b': 'in' takes")
    long = "x" * 1025
    assert _message(_gate("a.b", f'{{eq: "{long}"}}')).startswith(
        "approval gate g, argument 'a.b': its 'eq' value is 1025 characters long"
    )
