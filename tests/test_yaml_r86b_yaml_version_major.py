"""Review R86 (found reviewing R86's YAML fixes): the policy reference said a ``%YAML`` version
number of more than nine digits is refused at its tenth digit, as a place the parsers disagree
on. Where PyYAML reads the version with a major number other than 1 (``1234567890.2``), its
parser refuses the directive at its start as an incompatible YAML document, before libyaml's
tenth digit, and that is the error on either parser: the reference now says so. These tests
hold the behaviour the reference describes (docs/policy-reference.md, agentgate/_yaml.py)."""

from __future__ import annotations

import pytest
from test_yaml import _error, parser  # noqa: F401 (the fixture)


@pytest.mark.usefixtures("parser")
@pytest.mark.parametrize("version", ["1234567890.2", "2.0000000002", "0000000002.1"])
def test_a_long_version_with_a_major_other_than_one_is_incompatible_at_the_directive(version: str) -> None:
    error = _error(f"%YAML {version}\n--- x\n")
    assert error.message == "malformed YAML: found incompatible YAML document (version 1.* is required)"
    assert (error.line, error.column) == (1, 1)


@pytest.mark.usefixtures("parser")
@pytest.mark.parametrize(("version", "column"), [("1.0000000002", 18), ("0000000001.2", 16)])
def test_a_long_version_pyyaml_reads_as_one_point_something_is_a_disagreement_at_its_tenth_digit(
    version: str, column: int
) -> None:
    error = _error(f"%YAML {version}\n--- x\n")
    assert error.message.startswith("a %YAML directive's version number of more than nine digits")
    assert (error.line, error.column) == (1, column)
