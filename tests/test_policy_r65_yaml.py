"""Review R65: YAML a policy (or an inventory) must not read differently from how it is written."""

from __future__ import annotations

import pytest
from test_policy_yaml_tags import _refusal, parser  # noqa: F401 (parser is a fixture)

from agentgate._yaml import load_yaml
from agentgate.errors import PolicyError

pytestmark = pytest.mark.usefixtures("parser")  # every case under both YAML parsers

# --- a byte order mark is one, at the start, and nowhere else ------------------------------------


@pytest.mark.parametrize("text", ["\ufeff\ufeffa: !!str 1e3\n", "\ufeff\ufeff\ufeffa: ! 5\n"])
def test_a_second_byte_order_mark_is_refused_at_its_place(text: str) -> None:
    """Review R65: libyaml drops a byte order mark at the start of what it reads without counting
    it in its marks, so after the first (which agentgate drops itself) a second shifted every mark
    one character left: ``!!str 1e3`` loaded as the float 1000.0 and ``! 5`` as the integer 5 (the
    tag was looked for one character early), and every column on line 1 was one too low."""
    with pytest.raises(PolicyError) as info:
        load_yaml(text, source="p.yaml")
    assert (info.value.line, info.value.column) == (1, 1)
    assert "U+FEFF" in info.value.message


@pytest.mark.parametrize(
    "text",
    ["version: 1\n# note\n\ufeffname: x\n", "---\n\ufeffversion: 1\n", "version: 1\nname: a\ufeffb\n"],
)
def test_a_byte_order_mark_after_the_start_is_refused_with_its_line_and_column(text: str) -> None:
    """Review R65: a U+FEFF anywhere but at the very start is refused where it is: libyaml skips
    one that starts a line (the key ``\\ufeffname`` read as ``name``) where PyYAML's own reader
    keeps it, so the same file loaded differently with how PyYAML was installed; elsewhere it is
    an invisible character a reviewer cannot see. Written as an escape it is a value's."""
    error = _refusal(text)
    index = text.index("\ufeff")
    line = text.count("\n", 0, index) + 1
    column = index - (text.rfind("\n", 0, index) + 1) + 1
    assert (error.line, error.column) == (line, column)
    assert "U+FEFF" in error.message


def test_a_byte_order_mark_written_as_an_escape_is_a_value() -> None:
    """Review R65: the refusal is of the raw character only: ``"\\ufeff"`` in a double-quoted
    string is the value's, and a single leading byte order mark still loads."""
    data, _ = load_yaml('\ufeffa: "x\\ufeffy"\nb: !!str 1e3\n', source="p.yaml")
    assert data == {"a": "x\ufeffy", "b": "1e3"}


# --- an empty key is named as one -----------------------------------------------------------------

_POLICY = "version: 1\nroles:\n  lead: {ttl_s: 60}\n"


@pytest.mark.parametrize(
    ("text", "named"),
    [
        (_POLICY + "'': 1\n", "unknown field ''"),
        (_POLICY.replace("{ttl_s", "{'': 1, ttl_s"), "unknown field roles.lead.''"),
        (_POLICY + "  '': {}\n", "roles.'': '' is not a valid name"),
    ],
)
def test_an_empty_key_is_named_in_the_key_path(text: str, named: str) -> None:
    """Review R65: an empty key (``'': 1``) was left out of the key path an error names: at the
    top ``unknown field <top>`` (the policy itself, not its key), below it ``roles.lead.`` and
    ``roles.:``. It is quoted, as a key that is not printable is."""
    assert _refusal(text).message.startswith(named)


# --- an explicit number or boolean tag on what is neither is refused ----------------------------


@pytest.mark.parametrize(
    ("value", "said"),
    [
        ("!!bool yes", "not a boolean"),
        ("!!bool 'no'", "not a boolean"),
        ("&a !!bool on", "not a boolean"),
        ("!!int 10:30", "not a number"),
        ("!<tag:yaml.org,2002:int> 1:00:00", "not a number"),
        ("!!float 1:30.5", "not a number"),
        ("!!merge <<", "tag 'tag:yaml.org,2002:merge' is not allowed"),
        ("!!value =", "tag 'tag:yaml.org,2002:value' is not allowed"),
    ],
)
def test_an_explicit_tag_is_not_silently_read_as_text(value: str, said: str) -> None:
    """Review R65: ``!!bool yes`` and ``!!int 10:30`` loaded as the texts ``yes`` and ``10:30``,
    while ``!!int 3600.0`` was refused as not a number: the tag says the author meant a boolean
    (a number), which YAML 1.1 reads them as and YAML 1.2 has no such value for. Untagged, they
    are text (YAML 1.2); tagged, they are refused where they are written. So are ``!!merge <<``
    and ``!!value =``, YAML 1.1 tags YAML 1.2 does not have, which loaded as ``<<`` and ``=``."""
    with pytest.raises(PolicyError) as info:
        load_yaml(f"a: 1\nb: [x, {value}]\n", source="p.yaml")
    assert (info.value.line, info.value.column) == (2, 8)
    assert said in info.value.message


def test_untagged_yes_and_sexagesimal_stay_text_and_tagged_booleans_load() -> None:
    """Review R65: what the refusal above leaves as it was: plain ``yes``, ``10:30`` and
    ``1:30.5`` are text, and ``!!bool 'true'`` is the boolean the tag names."""
    data, _ = load_yaml(
        "a: [yes, 10:30, 1:30.5, !!bool 'true', !!bool FALSE, !!int '7', <<, =]\n", source="p.yaml"
    )
    assert data == {"a": ["yes", "10:30", "1:30.5", True, False, 7, "<<", "="]}
