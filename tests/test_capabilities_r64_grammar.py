"""Review R64: the one-line CAP grammar (docs/cli.md) parses or refuses exactly, from one shell
line: hostile text ends in a ``CapabilityError`` naming the part, and what parses renders back
to text that parses to the same capability."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentgate.capabilities import Capability, format_capability, parse_capability
from agentgate.capabilities._capability import MAX_CAPABILITY_TEXT
from agentgate.errors import CapabilityError

NUMBERS_AND_BOOLEANS = [0, -1, 1, 2**63 - 1, -(2**63) + 1, 0.5, -0.0, 1e300, 5e-324, True, False]
NUMERIC_LOOKING_TEXT = [
    "",
    "a",
    "1",
    "-1",
    "1e3",
    "true",
    "false",
    "+1",
    "01",
    ".5",
    "NaN",
    "inf",
    "0x10",
    "1_000",
]
AWKWARD_TEXT = [
    "é",
    "e\u0301",
    "\u0430",
    "a&b",
    "a|b",
    '"',
    "%",
    "%41",
    "a=b",
    "<",
    "?",
    "#",
    " ",
    "\u202e",
    "\x1b",
]
SCALARS = st.sampled_from([*NUMBERS_AND_BOOLEANS, *NUMERIC_LOOKING_TEXT, *AWKWARD_TEXT])
OPERATOR = st.one_of(
    st.tuples(st.just("eq"), SCALARS),
    st.tuples(st.just("in"), st.lists(SCALARS, min_size=1, max_size=3)),
    st.tuples(st.sampled_from(["lt", "le", "gt", "ge"]), st.sampled_from([0, -5, 2**63 - 1, 0.1, 1.5e300])),
    st.tuples(st.just("prefix"), SCALARS.filter(lambda v: isinstance(v, str))),
)
SPECS = st.dictionaries(
    st.sampled_from(["a", "b", "a.b", "_x", "A9"]),
    st.lists(OPERATOR, min_size=1, max_size=3).map(dict),
    max_size=3,
)
RESOURCES = st.sampled_from(
    ["tool:x", "tool:a.b-c_d", "tool:a.*", "tool:*", "model:Qwen/Qwen3-32B", "gpu:h200"]
)
ACTIONS = st.sampled_from([None, "invoke", "generate", "lease", "*", "read_all"])


@settings(max_examples=400, deadline=None, derandomize=True)
@given(RESOURCES, ACTIONS, SPECS)
def test_render_then_parse_is_the_identity(resource: str, action: str | None, spec: dict[str, Any]) -> None:
    """Review R64: every capability the structured form builds, whatever text its values hold
    (numeric-looking text, delimiters, quotes, percent signs, control and bidi characters,
    Unicode look-alikes), renders to one line that parses to an equal capability, and renders
    again to the same line."""
    try:
        cap = Capability.of(resource, action, spec)
    except CapabilityError:
        return  # a spec the algebra refuses (a bound of the wrong type) has no one-line form
    line = format_capability(cap)
    again = parse_capability(line)
    assert again == cap
    assert again.to_dict() == cap.to_dict()
    assert format_capability(again) == line


GRAMMAR_TOKENS = ["tool:x", "?", "&", "|", "=", "<", "<=", ">", ">=", "^=", "#", '"', "%", "%4", "%41", "%ff"]
OTHER_TOKENS = [
    "a",
    "b",
    "1",
    "-",
    ".",
    "e",
    "+",
    "_",
    "1e309",
    "NaN",
    "0x1",
    "*",
    " ",
    "\x00",
    "\u200b",
    "\u0430",
]
TOKENS = st.sampled_from([*GRAMMAR_TOKENS, *OTHER_TOKENS, "!=", "~", "\\"])


@settings(max_examples=1000, deadline=None, derandomize=True)
@given(st.lists(TOKENS, max_size=14).map("".join))
def test_any_line_parses_to_a_capability_that_round_trips_or_is_a_capability_error(text: str) -> None:
    """Review R64: any line built from the grammar's own characters either parses, to a
    capability whose one-line form parses back to it, or is a ``CapabilityError``; never another
    exception (a traceback at the CLI)."""
    try:
        cap = parse_capability(text)
    except CapabilityError as error:
        assert str(error)
        return
    assert parse_capability(format_capability(cap)) == cap


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ("tool:x?a<=NaN", "'le' takes a number"),
        ("tool:x?a<=1e309", "not a finite number"),
        ("tool:x?a>=-1e309", "not a finite number"),
        ("tool:x?a<=0x10", "'le' takes a number"),
        ("tool:x?a<=1_000", "'le' takes a number"),
        ("tool:x?a<=+5", "'le' takes a number"),
        ("tool:x?a<=.5", "'le' takes a number"),
        ("tool:x?a<=5.", "'le' takes a number"),
        ("tool:x?a<=true", "'le' takes a number"),
        ('tool:x?a<="5"', "'le' takes a number"),
        ("tool:x?a<=9223372036854775808", "out of range"),
        ("tool:x?a>=-9223372036854775808", "out of range"),
        ("tool:x?a=9223372036854775808", "out of range"),
        ("tool:x?a<=1e-400", "no float holds"),
        ("tool:x?a<=9007199254740993.0", "no float holds"),
        ("tool:x?a=1&&b=2", "cannot read clause ''"),
        ("tool:x?a=1&", "cannot read clause ''"),
        ("tool:x?&a=1", "cannot read clause ''"),
        ("tool:x?a=1|", "empty value"),
        ("tool:x?a=|1", "empty value"),
        ("tool:x?a=1||2", "empty value"),
        ("tool:x?a=", "empty value"),
        ("tool:x?a^=", "empty prefix"),
        ("tool:x?a!=1", "cannot read clause 'a!=1'"),
        ("tool:x?a~=1", "cannot read clause 'a~=1'"),
        ("tool:x?a==1", "'==' is not an operator"),
        ("tool:x?a=<1", "'=<' is not an operator"),
        ("tool:x?a=>1", "'=>' is not an operator"),
        ("tool:x?a<>1", "'lt' takes a number"),
        ("tool:x?a=1&a=2", "a = given twice"),
        ("tool:x?a<=1&a<=2", "a <= given twice"),
        ("tool:x?a^=x&a^=y", "a ^= given twice"),
        ("tool:x?a..b=1", "argument name 'a..b' is not an identifier"),
        ("tool:x?a.=1", "argument name 'a.' is not an identifier"),
        ("tool:x?=1", "cannot read clause '=1'"),
        ("tool:x?1a=1", "cannot read clause '1a=1'"),
        ("tool:x?", "cannot read clause ''"),
        ("tool:x#", "'#' with no action"),
        ("tool:x#Invoke", "not a lower-case identifier"),
        ("tool:x#invoke#y", "not a lower-case identifier"),
        ('tool:x?a="1', "encloses a whole value"),
        ('tool:x?a=1"', "encloses a whole value"),
        ('tool:x?a="x|y"', "encloses a whole value"),
        ("tool:x?a=%zz", "starts a %XX escape"),
        ("tool:x?a=%ff", "UTF-8"),
        ("tool:x?a=\x1b[31m", "control character"),
        ("tool:x?a=\u202eabc", "U+202E"),
        ("tool:x?a=b\u200b", "U+200B"),
        ("tool:X?a=1", "not canonical"),
        ("tool:x ?a=1", "not canonical"),
        ("", "non-empty string"),
        ("tool:x?" + "a=1&" * (MAX_CAPABILITY_TEXT // 4), f"at most {MAX_CAPABILITY_TEXT} characters"),
    ],
)
def test_a_hostile_line_is_a_capability_error_naming_the_part(text: str, named: str) -> None:
    """Review R64: a line outside the grammar (a float, NaN, infinity, hex, underscores or a
    leading '+' where a bound is wanted, a bound past the integer range, empty clauses and
    alternatives, unknown or misspelled operators, an argument given twice, a stray quote or
    percent sign, a hidden character) is a ``CapabilityError`` that names the part, never
    another exception and never a capability."""
    with pytest.raises(CapabilityError) as raised:
        parse_capability(text)
    assert named in str(raised.value)


def test_a_line_at_the_length_limit_of_repeated_clauses_is_decided_quickly() -> None:
    """Review R64: a line of the most characters the grammar takes, of one-character clauses on
    distinct arguments, parses (a conjunction of all of them) and round-trips."""
    clauses: list[str] = []
    k = 0
    while len("tool:x?" + "&".join([*clauses, f"a{k}=1"])) <= MAX_CAPABILITY_TEXT:
        clauses.append(f"a{k}=1")
        k += 1
    cap = parse_capability("tool:x?" + "&".join(clauses))
    assert len(cap.constraints) == len(clauses)
    assert parse_capability(format_capability(cap)) == cap


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("tool:x?a=01", {"a": {"eq": "01"}}),
        ("tool:x?a=+1", {"a": {"eq": "+1"}}),
        ("tool:x?a=.5", {"a": {"eq": ".5"}}),
        ("tool:x?a=-0", {"a": {"eq": 0}}),
        ("tool:x?a=1e3", {"a": {"eq": 1000.0}}),
        ('tool:x?a="1"', {"a": {"eq": "1"}}),
        ("tool:x?a=true|1", {"a": {"in": [True, 1]}}),
        ("tool:x?a=1|1.0", {"a": {"eq": 1}}),
        ('tool:x?a^=""', {"a": {"prefix": ""}}),
        ("tool:x?a=%26%7C%22%25", {"a": {"eq": '&|"%'}}),
        (
            "tool:x?a<=9223372036854775807&a>=-9223372036854775807",
            {"a": {"le": 2**63 - 1, "ge": -(2**63) + 1}},
        ),
    ],
)
def test_values_read_as_the_grammar_documents(text: str, expected: dict[str, Any]) -> None:
    """Review R64: bare values are typed as docs/cli.md says (`01`, `+1`, `.5` are text; `1e3`
    is a number; quoted is text; `1` and `1.0` are one value; booleans are not numbers), and
    the integer limits either side are bounds."""
    assert parse_capability(text).to_dict()["constraints"] == expected


@pytest.mark.parametrize(
    "text", ["tool:x?path^=/tmp/|/var/", "tool:x?a^=x|", 'tool:x?a^="x|y"', "tool:x?a^=|"]
)
def test_a_bare_bar_in_a_prefix_is_refused_not_read_as_text(text: str) -> None:
    """Review R64: ``|`` separates the values of a one-of, and a prefix has one value, so
    ``path^=/tmp/|/var/`` (two prefixes meant) is refused, naming the clause, where until review
    R64 it was the one prefix ``/tmp/|/var/``; docs/cli.md has a literal ``|`` percent-encoded
    (``%7C``), as ``format_capability`` writes it."""
    with pytest.raises(CapabilityError, match=r"'\|'.*%7C"):
        parse_capability(text)
    assert parse_capability("tool:x?a^=x%7Cy").to_dict()["constraints"] == {"a": {"prefix": "x|y"}}
