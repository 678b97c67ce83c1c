"""U+0085, U+2028 and U+2029 in a YAML file: libyaml and PyYAML read each as a line break, an
editor and ``grep -n`` show the text after it on the same line. A file holding one is refused at
the character (agentgate/_yaml.py, ``load_yaml``); an escape in a double-quoted string still reads."""

from __future__ import annotations

import pytest
from test_yaml import _error, parser  # noqa: F401 (the fixture)

from agentgate.errors import PolicyError
from agentgate.policy import parse_policy

pytestmark = pytest.mark.usefixtures("parser")
"""Every test runs on both parsers (libyaml and the pure-Python one)."""

SEPARATORS = [
    pytest.param("\u2028", "line separator U+2028", id="line-separator"),
    pytest.param("\u2029", "paragraph separator U+2029", id="paragraph-separator"),
    pytest.param("\x85", "(U+0085)", id="next-line"),
]
POLICY = "version: 1\nname: t\nroles:\n  r:\n    ttl_s: 60\n"


@pytest.mark.parametrize(("separator", "named"), SEPARATORS)
def test_text_after_a_separator_in_a_comment_is_not_read_as_yaml(separator: str, named: str) -> None:
    """Review R57, a policy hid what it set in a comment: ``# note<U+2028>ttl_s: 99999`` loaded as
    ``ttl_s: 99999`` (YAML ends the comment at the separator) while an editor showed one comment
    line. The file is refused at the separator, on the line and column an editor shows."""
    text = POLICY.replace("    ttl_s: 60\n", f"    ttl_s: 60\n    # reviewed{separator}    ttl_s: 99999\n")
    text = text.replace("    ttl_s: 60\n", "", 1)
    with pytest.raises(PolicyError) as caught:
        parse_policy(text, source="p.yaml")
    error = caught.value
    assert (error.line, error.column) == (5, 15), error
    assert named in error.message and "line break" in error.message, error.message


@pytest.mark.parametrize(("separator", "named"), SEPARATORS)
def test_a_separator_anywhere_is_refused_where_it_is(separator: str, named: str) -> None:
    """Review R57: in a plain value, a quoted value or a key alike (YAML folds or breaks each)."""
    for text, at in [
        (f"a: 1\nb: x{separator}y\n", (2, 5)),
        (f'a: 1\nb: "x{separator}y"\n', (2, 6)),
        (f"a{separator}: 1\n", (1, 2)),
    ]:
        error = _error(text)
        assert (error.line, error.column) == at, (text, error)
        assert named in error.message, error.message


def test_a_separator_written_as_an_escape_reads() -> None:
    """Review R57: the refusal is of the character in the file, not of the value: an escape in a
    double-quoted string is one line of the file."""
    policy = parse_policy('version: 1\nname: "a\\u2028b"\n', source="p.yaml")
    assert policy.document.name == "a\u2028b"
