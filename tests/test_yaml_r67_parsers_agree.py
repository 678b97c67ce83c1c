"""Review R67: more places where libyaml and PyYAML's own parser read a file differently, and
mapping keys that differ only in their Unicode normalization. Each file is now accepted by both
parsers or refused by both with the same typed error at the same line and column
(agentgate/_yaml.py)."""

from __future__ import annotations

import random

import pytest
import yaml
from test_yaml import _error, parser  # noqa: F401 (the fixture)

import agentgate._yaml
from agentgate._yaml import load_yaml
from agentgate.errors import PolicyError
from agentgate.policy import parse_policy

NFC, NFD = "caf\u00e9", "cafe\u0301"


@pytest.mark.usefixtures("parser")
def test_keys_equal_after_unicode_normalization_are_duplicates() -> None:
    """Review R67: ``café`` written as one character (NFC) and as ``e`` plus a combining accent
    (NFD) look the same everywhere a reader sees them, and loaded as two keys."""
    error = _error(f"a: 1\nb:\n  {NFC}: 1\n  {NFD}: 2\n")
    assert (error.line, error.column) == (4, 3)
    assert "first at line 3" in error.message and "normalization" in error.message, error.message


@pytest.mark.usefixtures("parser")
def test_argument_names_equal_after_normalization_are_refused_in_a_policy() -> None:
    """Review R67: a tool's two arguments ``café`` and ``café`` (NFD) loaded as two arguments."""
    text = f"version: 1\ntools:\n  pay.x:\n    args:\n      {NFD}: {{type: string}}\n      {NFC}: {{type: string}}\n"
    with pytest.raises(PolicyError, match="duplicate key") as info:
        parse_policy(text, source="p.yaml")
    assert (info.value.line, info.value.column) == (6, 7)


@pytest.mark.usefixtures("parser")
def test_keys_that_differ_after_normalization_still_load() -> None:
    """Review R67: only canonically equal keys are one key; ``cafe`` and ``café`` are two."""
    data, _ = load_yaml(f"cafe: 1\n{NFC}: 2\n", source="p.yaml")
    assert data == {"cafe": 1, NFC: 2}


COLON_IN_FLOW = [
    ("{b\n  |,?x:}", (2, 7)),
    ("{x:}", (1, 3)),
    ("[x:]", (1, 3)),
    ("[x:,y]", (1, 3)),
    ("{x:{a: b}}", (1, 3)),
    ("[a:b:]", (1, 5)),
    ("{x :}", (1, 4)),
    ("a: [&a x:]\n", (1, 9)),
    ("[x:?]", (1, 3)),
]


@pytest.mark.usefixtures("parser")
@pytest.mark.parametrize(("text", "at"), COLON_IN_FLOW)
def test_a_colon_right_before_a_flow_indicator_after_plain_text_is_refused(
    text: str, at: tuple[int, int]
) -> None:
    """Review R67: inside ``[...]`` or ``{...}``, ``x:`` right before ``}``, ``]``, ``,``, ``[``,
    ``{`` or ``?`` was refused by libyaml (``found unexpected ':'``) and read as a key by PyYAML's
    own parser (``{x:}`` loaded as ``{x: null}``). Both refuse it now, at the ':'."""
    error = _error(text)
    assert (error.line, error.column) == at, (text, error)
    assert "':' right before" in error.message, error.message


@pytest.mark.usefixtures("parser")
def test_a_colon_both_parsers_read_alike_in_a_flow_collection_still_loads() -> None:
    """Review R67: ``{x: }``, ``{"x":}``, ``[a:b]`` and a ':' before a line break load as before."""
    data, _ = load_yaml('a: {x: }\nb: {"x":}\nc: [a:b]\nd: [x:\n  ]\n', source="p.yaml")
    assert data == {"a": {"x": None}, "b": {"x": None}, "c": ["a:b"], "d": [{"x": None}]}


@pytest.mark.usefixtures("parser")
@pytest.mark.parametrize(("text", "expected"), [("! : 1\n", {"": 1}), ("! 1: a\n", {"1": "a"})])
def test_a_key_with_the_non_specific_tag_is_text(text: str, expected: dict[str, object]) -> None:
    """Review R67: ``! 1`` as a key loaded as the text "1" with libyaml and was refused with
    PyYAML's own parser (which resolves it as the integer 1), as values already were not."""
    data, _ = load_yaml(text, source="p.yaml")
    assert data == expected


@pytest.mark.usefixtures("parser")
@pytest.mark.parametrize("text", ["%x\n---\na: 1\n", "%FOO bar\n--- {a: 1}\n"])
def test_an_unknown_directive_is_refused(text: str) -> None:
    """Review R67: libyaml refuses a directive other than ``%YAML`` and ``%TAG`` (``found unknown
    directive name``), PyYAML's own parser skips it, and the file loaded. Both refuse it now."""
    error = _error(text)
    assert (error.line, error.column) == (1, 1), error
    assert "directive" in error.message, error.message


def _located(text: str, loader: type) -> tuple[str, object]:
    """What ``load_yaml`` makes of ``text`` on one parser: its data, or its error's place."""
    saved = agentgate._yaml._Loader
    agentgate._yaml._Loader = loader
    try:
        return "loaded", load_yaml(text, source="p.yaml")[0]
    except PolicyError as exc:
        return "refused", (exc.line, exc.column)
    finally:
        agentgate._yaml._Loader = saved


MALFORMED = [
    '"x"x\t',  # libyaml: no document start at 1:4; PyYAML: the tab at 1:5
    "'y'>\t",
    "- \r[",  # 2:1 (a simple key) and 2:2 (a flow node)
    '["\\',  # an escape at the end: 1:3 and 1:2
    '"\\|',
    "%x",  # an unknown directive: 1:1 and 1:3
    "k: v\n[",
    "*ab |-\n\t- ",
    "|-\n|#",
    "[x?\"'[null",
    "{x---:- ? \t.5  - 1",
    "  - [  - \u00e9k: v\n\t",
    "!*a! ---",  # a tag libyaml reads and PyYAML refuses: at the '!' on both
    "&a !*a! x",
    "\n{...? \"'y'}",  # PyYAML held the '?' back while it scanned the quote
    "{? ,}",  # an empty key: at the ',' on both
    "{? #c\n ,}",
]


@pytest.mark.skipif(not hasattr(yaml, "CSafeLoader"), reason="PyYAML built without libyaml")
@pytest.mark.parametrize("text", MALFORMED)
def test_a_malformed_file_is_refused_at_one_place_whichever_parser_runs(text: str) -> None:
    """Review R67: in a file already malformed, the two parsers stopped at different places
    (after a tab or a '?' most often) and the error named a column or a line one or two off
    with libyaml from where it was with PyYAML's own parser."""
    libyaml, pure = _located(text, yaml.CSafeLoader), _located(text, yaml.SafeLoader)
    assert libyaml[0] == pure[0] == "refused", (text, libyaml, pure)
    assert libyaml == pure, (text, libyaml, pure)


@pytest.mark.usefixtures("parser")
@pytest.mark.parametrize(
    ("value", "at"), [("{ttl_s: , description: x}", (3, 14)), ("{ttl_s:  # why\n  }", (4, 3))]
)
def test_an_empty_value_in_a_flow_mapping_is_located_at_the_next_token(
    value: str, at: tuple[int, int]
) -> None:
    """Review R67: a policy's ``{ttl_s: , ...}`` was refused at column 14 with libyaml (the ',')
    and at column 13 with PyYAML's own parser (right after the ':'): an empty node is located
    at the token after it on both."""
    with pytest.raises(PolicyError, match="ttl_s") as info:
        parse_policy(f"version: 1\nroles:\n  a: {value}\n", source="p.yaml")
    assert (info.value.line, info.value.column) == at, info.value


_ATOMS = [
    *"abx1 \n:-?[]{},|>#'\"\t\\~%!&*@`=\r",
    ": ",
    "- ",
    "? ",
    "  ",
    " #",
    "&a ",
    "*a",
    "!!str ",
    "! ",
    "---",
    "...",
    "%YAML 1.2\n",
    "\r\n",
    "k: v\n",
    "  - ",
    "|-\n",
    "0o7",
    ".5",
    "null",
    "<<: ",
    "\u00e9",
    NFD,
]


@pytest.mark.skipif(not hasattr(yaml, "CSafeLoader"), reason="PyYAML built without libyaml")
def test_fuzzed_snippets_load_or_are_refused_alike_on_both_parsers() -> None:
    """Review R67: a seeded fuzz of short snippets of YAML's indicators. Each loads to the same
    data on both parsers, or is refused by both at the same line and column, never with another
    exception (a traceback)."""
    rng = random.Random(67)
    for _ in range(3000):
        text = "".join(rng.choice(_ATOMS) for _ in range(rng.randint(1, 10)))
        libyaml, pure = _located(text, yaml.CSafeLoader), _located(text, yaml.SafeLoader)
        assert libyaml == pure, (text, libyaml, pure)
