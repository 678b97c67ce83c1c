"""Review R84 (regression): a '?' with no key right before ',' or ':' inside ``[...]`` was refused
as a place "YAML parsers disagree on" wherever it was written, also where both read the same
value (``- [? ,]``, ``[?, ]``, ``[?:]``: ``[{None: None}]`` with libyaml and with PyYAML's own
parser). libyaml skips the ',' or ':' after such a key; only where what follows does not end
the pair either way (``[?, c]``) do the two read it apart. Elsewhere the key is refused as any
key that is not text, at the token after the '?' whichever parser runs (libyaml marks it past
the ',' it skips) (agentgate/_yaml.py, ``_disagreed`` and ``_Builder.empty_at``)."""

from __future__ import annotations

import pytest
import yaml
from test_yaml import _error, parser  # noqa: F401 (the fixture)

READ_ALIKE = [
    ("- [? ,]\n", (1, 6)),
    ("a: [?, ]\n", (1, 6)),
    ("a: [?,]\n", (1, 6)),
    ("a: [?:]\n", (1, 6)),
    ("a: [? : ]\n", (1, 7)),
    ("a: [?:, b]\n", (1, 6)),
    ("a: [b, ?\n# c\n,]\n", (3, 1)),
    ("a: [[?, ]]\n", (1, 7)),
]

READ_APART = [
    ("a: [?, c]\n", (1, 5)),  # libyaml skips the ',' and refuses 'c'; PyYAML: [{None: None}, 'c']
    ("a: [?,: x]\n", (1, 5)),  # libyaml: [{None: 'x'}]; PyYAML refuses the ':'
    ("a: [?,,]\n", (1, 5)),  # libyaml: [{None: None}]; PyYAML refuses the second ','
    ("a: [?: x]\n", (1, 5)),
]


@pytest.mark.parametrize(("text", "_at"), READ_ALIKE)
def test_these_lists_are_read_alike_by_both_parsers(text: str, _at: tuple[int, int]) -> None:
    assert yaml.load(text, Loader=yaml.CSafeLoader) == yaml.load(text, Loader=yaml.SafeLoader)


@pytest.mark.usefixtures("parser")
@pytest.mark.parametrize(("text", "at"), READ_ALIKE)
def test_an_empty_key_both_parsers_read_alike_is_refused_as_a_key_not_a_disagreement(
    text: str, at: tuple[int, int]
) -> None:
    error = _error(text)
    assert error.message == "mapping keys must be plain strings", error.message
    assert "disagree" not in str(error)
    assert (error.line, error.column) == at, (text, error)


@pytest.mark.usefixtures("parser")
@pytest.mark.parametrize(("text", "at"), READ_APART)
def test_an_empty_key_the_parsers_read_apart_is_still_refused_as_a_disagreement(
    text: str, at: tuple[int, int]
) -> None:
    error = _error(text)
    assert error.message.startswith("'?' with no key right before ',' or ':' inside [...]"), error.message
    assert (error.line, error.column) == at, (text, error)
