"""Review R65: YAML a policy (or an inventory) must not read differently from how it is written."""

from __future__ import annotations

import pytest
import yaml

import agentgate._yaml
from agentgate._yaml import load_yaml
from agentgate.errors import PolicyError
from agentgate.policy import parse_policy


@pytest.fixture(params=["libyaml", "pure-python"])
def parser(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Both parsers agentgate may run on."""
    if request.param == "pure-python":
        monkeypatch.setattr(agentgate._yaml, "_Loader", yaml.SafeLoader)
    return str(request.param)


def _refusal(text: str | bytes) -> PolicyError:
    with pytest.raises(PolicyError) as info:
        parse_policy(text, source="p.yaml")
    return info.value


# --- a byte order mark is one, at the start, and nowhere else ------------------------------------


@pytest.mark.parametrize("text", ["\ufeff\ufeffa: !!str 1e3\n", "\ufeff\ufeff\ufeffa: ! 5\n"])
def test_a_second_byte_order_mark_is_refused_at_its_place(text: str, parser: str) -> None:
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
def test_a_byte_order_mark_after_the_start_is_refused_with_its_line_and_column(
    text: str, parser: str
) -> None:
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


def test_a_byte_order_mark_written_as_an_escape_is_a_value(parser: str) -> None:
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
