"""Review R84 (regression): the hint for an argument declared by its type's name alone writes the
name as YAML reads it back, double-quoted if it is not printable; a long such name was quoted
and then cut, closing quote and all (``write "a\\nb\\u202ezzz... (1004 characters): ...``), so
the hint was no YAML. The name is now cut inside the quotes, its length said after them
(agentgate/policy/_load.py, ``_yaml_key``)."""

from __future__ import annotations

import json
import re

import pytest

from agentgate._yaml import MAX_QUOTED
from agentgate.errors import PolicyError
from agentgate.policy import parse_policy

_HINT = re.compile(r'write (".*")(?:\.\.\. \((\d+) characters\))?: \{type: string\}')


def quoted_name_in_hint(name_escaped: str) -> tuple[str, int | None]:
    """The name the hint writes, read back as YAML (JSON) reads it, and the length it says."""
    text = f'version: 1\ntools:\n  t:\n    args:\n      ? "{name_escaped}"\n      : string\n'
    with pytest.raises(PolicyError) as refused:
        parse_policy(text, source="p.yaml")
    hint = refused.value.hint
    assert hint is not None
    found = _HINT.fullmatch(hint)
    assert found is not None, hint
    said = int(found.group(2)) if found.group(2) else None
    return json.loads(found.group(1)), said


def test_a_long_name_with_a_line_break_is_cut_inside_its_quotes() -> None:
    name = "a\nb\u202e" + "z" * 1000
    written, said = quoted_name_in_hint("a\\nb\\u202e" + "z" * 1000)
    assert said == len(name)
    assert name.startswith(written) and 0 < len(written) < len(name)
    assert len(json.dumps(written)) <= MAX_QUOTED + 2


def test_a_name_of_escapes_only_is_cut_between_escapes() -> None:
    """Each character written as a six-character escape: the cut never splits one."""
    written, said = quoted_name_in_hint("\\u202e" * 200)
    assert said == 200
    assert written == "\u202e" * (MAX_QUOTED // 6)


def test_a_short_name_is_written_whole_with_no_length() -> None:
    written, said = quoted_name_in_hint("a\\nb")
    assert (written, said) == ("a\nb", None)
