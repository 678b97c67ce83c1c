"""Review R86: a tag with a second '!' after a character no tag handle holds (``!a.b!c``,
``!a:b!c``, ``!a%41b!c``) is a local tag to libyaml and a tag handle PyYAML's own parser refuses
at that character. libyaml went on to an error further on (a tab two lines down), PyYAML's own
parser stopped at the tag: the same file was refused at lines apart with how PyYAML was
installed. Both now refuse it at its '!' as a tag the parsers disagree on (agentgate/_yaml.py,
``_tag_read_apart``)."""

from __future__ import annotations

import pytest
from test_yaml import _error, parser  # noqa: F401 (the fixture)

from agentgate._yaml import load_yaml
from agentgate.errors import PolicyError
from agentgate.policy import parse_policy

HANDLE_NO_TAG_HAS = [
    ("version: 1\nname: !a.b!c x\ndescription: [\tx]\n", (2, 7)),  # the reviewer's file
    ("a: !a.b!c x\n", (1, 4)),
    ("a: !a:b!c\n", (1, 4)),
    ("a: !a;b!c\tq\n", (1, 4)),  # before the tab, whose search PyYAML's does not stop at
    ("a: !a%41b!c x\n", (1, 4)),
    ("- &x !('!' y\n- [\tz]\n", (1, 6)),
    ("a: [!a/b!c ]\n", (1, 5)),
    ("a: [b, !~! c]\n", (1, 8)),
]


@pytest.mark.usefixtures("parser")
@pytest.mark.parametrize(("text", "at"), HANDLE_NO_TAG_HAS)
def test_a_tag_handle_no_tag_has_is_refused_at_its_bang_on_either_parser(
    text: str, at: tuple[int, int]
) -> None:
    error = _error(text)
    assert (error.line, error.column) == at, (text, str(error))
    assert error.message.startswith("a tag with a second '!' after a character other than"), error.message


@pytest.mark.usefixtures("parser")
def test_the_reviewers_policy_is_refused_at_the_tag() -> None:
    with pytest.raises(PolicyError) as info:
        parse_policy("version: 1\nname: !a.b!c x\ndescription: [\tx]\n", source="p.yaml")
    assert "p.yaml:2:7: a tag with a second '!'" in str(info.value)


@pytest.mark.usefixtures("parser")
@pytest.mark.parametrize("text", ["a: !a{b!c x\n", "a: !a.b{c! x\n", "a: !aé!c x\n"])
def test_a_handle_both_parsers_refuse_is_refused_in_the_parsers_words(text: str) -> None:
    """A tag libyaml refuses too (it ends it at a character no tag holds) is no disagreement."""
    error = _error(text)
    assert error.message.startswith("malformed YAML: while scanning a tag"), error.message
    assert (error.line, error.column) == (1, 4)


@pytest.mark.usefixtures("parser")
@pytest.mark.parametrize("text", ["a: !a!b.c x\n", "a: !!a.b!c x\n"])
def test_a_handle_of_word_characters_is_no_disagreement(text: str) -> None:
    """``!a!b.c`` is the handle ``!a!`` to both, which no ``%TAG`` declares; ``!!a.b!c`` the
    handle ``!!``: refused alike, as before."""
    error = _error(text)
    assert not error.message.startswith("a tag with a second '!'"), error.message
    assert (error.line, error.column) == (1, 4)


@pytest.mark.usefixtures("parser")
def test_the_non_specific_tag_before_such_text_still_reads_it() -> None:
    """``! a.b!c``: the tag ``!`` alone, then text, to both parsers."""
    assert load_yaml("a: ! a.b!c\n", source="p.yaml")[0] == {"a": "a.b!c"}
