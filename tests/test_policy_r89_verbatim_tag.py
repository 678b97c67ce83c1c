"""Review R89: the non-specific tag written verbatim (``!<!>``, ``!<%21>``) is refused at its '!'
by both parsers (agentgate/_yaml.py). Both resolved its node as if it were untagged, so
``!<!> 5`` was the integer 5 where ``! 5`` is the text '5', and read an empty value after it
apart: libyaml as '', PyYAML's own parser as null (a policy's ``action: !<!>`` was refused with
one and loaded as the default action with the other)."""

from __future__ import annotations

import pytest
from test_yaml import _error, parser  # noqa: F401 (the fixture)

from agentgate._yaml import load_yaml
from agentgate.errors import PolicyError
from agentgate.policy import parse_policy

REFUSED = [
    ("k: [!<!> 5, !<!> true, !<!> null]\n", (1, 5), "!<!>"),
    ("k: !<!>\n", (1, 4), "!<!>"),  # libyaml: '', PyYAML: None
    ("k: !<%21> 5\n", (1, 4), "!<%21>"),
    ("k: !<%21>\n", (1, 4), "!<%21>"),
    ("!<!> : x\n", (1, 1), "!<!>"),  # libyaml: a key '', PyYAML: a null key
    ("k: &a !<!> 5\n", (1, 7), "!<!>"),
    ("k: !<!> &a [a]\n", (1, 4), "!<!>"),
    ("k:\n  - !<!> {a: b}\n", (2, 5), "!<!>"),
    ("k: {a: !<!> }\n", (1, 8), "!<!>"),
    ("k: {!<!> 5: x}\n", (1, 5), "!<!>"),
]


@pytest.mark.usefixtures("parser")
@pytest.mark.parametrize(("text", "at", "written"), REFUSED)
def test_the_non_specific_tag_written_verbatim_is_refused_at_its_bang(
    text: str, at: tuple[int, int], written: str
) -> None:
    error = _error(text)
    assert (error.line, error.column) == at, (text, error)
    expected = f"tag '{written}' is not allowed: the non-specific tag '!'"
    assert error.message.startswith(expected), error.message


@pytest.mark.usefixtures("parser")
def test_a_policy_action_tagged_verbatim_non_specific_is_refused_by_both_parsers() -> None:
    """With PyYAML's own parser ``action: !<!>`` loaded as no action, so the default ``invoke``."""
    text = (
        "version: 1\nprincipals:\n  alice: {kind: human, roles: [r]}\ntools:\n  t.x: {}\nroles:\n"
        "  r:\n    capabilities:\n      - resource: tool:t.x\n        action: !<!>\n"
    )
    with pytest.raises(PolicyError) as refused:
        parse_policy(text, source="p.yaml")
    assert (refused.value.line, refused.value.column) == (10, 17)
    assert "tag '!<!>' is not allowed" in refused.value.message


@pytest.mark.usefixtures("parser")
def test_the_non_specific_tag_alone_and_other_verbatim_tags_read_as_before() -> None:
    text = "a: [! 5, ! true]\nb: !<tag:yaml.org,2002:str> 5\nc: '!<!>'\nd: x !<!> y\n"
    assert load_yaml(text, source="p.yaml")[0] == {"a": ["5", "true"], "b": "5", "c": "!<!>", "d": "x !<!> y"}
    with pytest.raises(PolicyError, match="tag '!x' is not allowed"):
        load_yaml("k: !<!x> 5\n", source="p.yaml")
