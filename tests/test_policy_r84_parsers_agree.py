"""Review R84: two more places where libyaml and PyYAML's own parser read a policy differently,
a tag with ',' in it or right after it (``[!, a]``) and a '?' with no key before ',' inside
``[...]`` (``[?, c]``). Each is refused by both parsers with one message at one line and column
(agentgate/_yaml.py), as docs/policy-reference.md says of every such place."""

from __future__ import annotations

import pytest
from test_yaml import _error, parser  # noqa: F401 (the fixture)

from agentgate._yaml import load_yaml
from agentgate.errors import PolicyError
from agentgate.policy import parse_policy

TAG_CUT_SHORT = [
    ("a: [!, b]\n", (1, 5)),  # libyaml: ['', 'b']; PyYAML: the tag '!,'
    ("a: [!,b]\n", (1, 5)),
    ("a: {x: !, }\n", (1, 8)),
    ("a: [\n !,\n  c\n]\n", (2, 2)),
    (".nana: {b: [!,c, d], e: f}\n", (1, 13)),
    ("a: [!!str, b]\n", (1, 5)),
    ("a: [&x !, b]\n", (1, 8)),
    ("a: {!,: 1}\n", (1, 5)),
    ("a: [!foo, b]\n", (1, 5)),  # refused by both before, naming the tag as each read it
    ("a: !foo,bar x\n", (1, 4)),  # libyaml refuses the ',' outside [...], PyYAML reads it in the tag
    ("a: [!x[y] z]\n", (1, 5)),
    ("a: {x: {le: !,5}}\n", (1, 13)),  # libyaml: le is '', then a key 5; PyYAML refuses the '}'
    ("a: [!<tag:yaml.org,2002:str>, c]\n", (1, 5)),  # a verbatim tag: PyYAML refuses the ','
]

EMPTY_KEY = [
    ("a: [?, c]\n", (1, 5)),  # libyaml skips the ',' and refuses 'c'; PyYAML reads an empty key
    ("a: [? , c]\n", (1, 5)),
    ("a: [?\n# c\n, c]\n", (1, 5)),
    ("a: [a, ?, c]\n", (1, 8)),
    ("a: [?: x, c]\n", (1, 5)),
    ("a: [{b: [?, c]}]\n", (1, 10)),
    ("a}: [?, {c: d*a}, e]\n", (1, 6)),
]


@pytest.mark.usefixtures("parser")
@pytest.mark.parametrize(("text", "at"), TAG_CUT_SHORT)
def test_a_tag_with_a_comma_in_it_or_right_after_it_is_refused_alike(text: str, at: tuple[int, int]) -> None:
    """Review R84: libyaml ends a tag at ',', '[' or ']' (and reads ``[!, b]`` as ``['', 'b']``),
    PyYAML's own parser reads them into the tag (and refused the tag ``!,``)."""
    error = _error(text)
    assert (error.line, error.column) == at, (text, error)
    assert error.message.startswith("a tag with ',', '[' or ']' in it or right after it"), error.message


@pytest.mark.usefixtures("parser")
@pytest.mark.parametrize(("text", "at"), EMPTY_KEY)
def test_a_question_mark_with_no_key_in_a_list_is_refused_alike(text: str, at: tuple[int, int]) -> None:
    """Review R84: ``[?, c]`` was refused by libyaml at the ``c`` ("did not find expected ','")
    and by PyYAML's own parser at the ',' ("mapping keys must be plain strings")."""
    error = _error(text)
    assert (error.line, error.column) == at, (text, error)
    assert error.message.startswith("'?' with no key right before ',' or ':' inside [...]"), error.message


@pytest.mark.usefixtures("parser")
def test_a_policy_with_an_empty_tagged_value_in_a_list_is_refused_at_the_tag() -> None:
    """Review R84: ``in: [!, a]`` loaded with libyaml as the values '' and 'a'."""
    text = (
        "version: 1\ntools: {t: {}}\nprincipals: {p: {kind: human}}\n"
        "approvals:\n  g: {resource: tool:t, when: {to: {in: [!, a]}}, approvers: [p]}\n"
    )
    with pytest.raises(PolicyError) as refused:
        parse_policy(text, source="p.yaml")
    assert (refused.value.line, refused.value.column) == (5, 42)
    assert "YAML parsers disagree" in refused.value.message


@pytest.mark.usefixtures("parser")
def test_tags_and_keys_both_parsers_read_alike_in_a_list_still_load() -> None:
    """A tag followed by a space, a verbatim tag before a space and a key after '?' load as before."""
    text = "a: [! , b]\nb: [!!str 5, !<tag:yaml.org,2002:str> c]\nc: [? x: y, z]\nd: {?: 1}\n"
    with pytest.raises(PolicyError, match="mapping keys must be plain strings"):
        load_yaml(text, source="p.yaml")  # an empty key inside {...}: both parsers read one
    data, _ = load_yaml(text.replace("d: {?: 1}\n", ""), source="p.yaml")
    assert data == {"a": ["", "b"], "b": ["5", "c"], "c": [{"x": "y"}, "z"]}
