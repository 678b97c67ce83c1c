"""Review R89: a file libyaml refuses is read again by PyYAML's own parser, to locate the error
where that parser stops (agentgate/_yaml.py ``_refused``), but only so far (``_Window``: at most
``_REREAD_CHARACTERS`` characters, ``_REREAD_STEPS`` steps, ``_REREAD_TOKENS`` tokens). Until
then it read the whole file again, two or three times: an unclosed quote in an 8 MiB policy took
26 s to refuse, where a valid one loads in under one."""

from __future__ import annotations

import random

import pytest
import yaml
from test_yaml import _error

import agentgate._yaml
from agentgate._yaml import _BREAK, Mark, mark_at
from agentgate.errors import PolicyError
from agentgate.policy import parse_policy

libyaml = pytest.mark.skipif(not hasattr(yaml, "CSafeLoader"), reason="PyYAML is built without libyaml")
BIG = 2 * 1024 * 1024


@pytest.fixture
def furthest_read(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The furthest character any of PyYAML's own readers has passed, as the test goes."""
    furthest = [0]
    forward = yaml.reader.Reader.forward

    def counted(self: yaml.reader.Reader, length: int = 1) -> None:
        forward(self, length)
        furthest[0] = max(furthest[0], self.index)

    monkeypatch.setattr(yaml.reader.Reader, "forward", counted)
    return furthest


@libyaml
@pytest.mark.parametrize(
    ("text", "at"),
    [
        ('version: 1\nname: "' + "a\n" * (BIG // 2), (2, 7)),  # the quote is never closed
        ("version: 1\n" + "# a comment\n" * (BIG // 12) + 'name: "x\n', (BIG // 12 + 2, 7)),
    ],
)
def test_an_error_far_into_a_file_is_refused_without_reading_the_file_again(
    text: str, at: tuple[int, int], furthest_read: list[int]
) -> None:
    with pytest.raises(PolicyError) as refused:
        parse_policy(text, source="p.yaml")
    assert (refused.value.line, refused.value.column) == at
    assert refused.value.message.startswith(
        f"malformed YAML: while scanning a quoted scalar at line {at[0]}, column 7"
    )
    assert 0 < furthest_read[0] < len(text) // 4  # not read again whole


@libyaml
@pytest.mark.parametrize(
    ("start", "at"),
    [
        ('"x"x\t', (1, 5)),  # libyaml stops at the second x (1:4), PyYAML's own parser at the tab
        ("a: {x:}", (1, 6)),  # libyaml alone refuses the ':' before the '}'
        ("[x?\"'[null", (1, 3)),  # libyaml stops at the quote (1:6), PyYAML's own parser reads a key at '?'
    ],
)
def test_an_error_early_in_a_long_file_is_where_pyyamls_own_parser_stops(
    start: str, at: tuple[int, int], monkeypatch: pytest.MonkeyPatch, furthest_read: list[int]
) -> None:
    text = start + "\n" + "# a comment\n" * (BIG // 12)
    with_libyaml = _error(text)
    assert furthest_read[0] < len(text) // 4
    # PyYAML's own parser, which reads the comments after it to the end, says of the first line
    # alone what it says of the long file.
    monkeypatch.setattr(agentgate._yaml, "_Loader", agentgate._yaml._PureLoader)
    with_pyyaml = _error(start + "\n")
    assert (with_libyaml.line, with_libyaml.column) == (with_pyyaml.line, with_pyyaml.column) == at
    assert with_libyaml.message == with_pyyaml.message


def test_mark_at_counts_line_breaks_as_yaml_does() -> None:
    """``mark_at`` counts with ``str`` methods since review R89 (a loop over every break took
    seconds at the end of an 8 MiB file): the same line and column as the breaks ``_BREAK`` finds."""
    rng = random.Random(89)
    for _ in range(300):
        text = "".join(rng.choice(["a", "\r", "\n", "\r\n", "é"]) for _ in range(rng.randint(0, 12)))
        for index in range(len(text) + 1):
            line, start = 1, 0
            for found in _BREAK.finditer(text, 0, index):
                line, start = line + 1, found.end()
            assert mark_at(text, index) == Mark(line, index - start + 1), (text, index)
