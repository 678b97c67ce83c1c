"""The policy's YAML reader (agentgate/_yaml.py): safe YAML with locations, what a policy file may
not contain (a tag outside the core schema among it), where errors point, and plain scalars read
as YAML 1.2 reads them."""

from __future__ import annotations

import pytest

import agentgate._yaml
from agentgate._yaml import MAX_ALIASES, MAX_NODES, load_yaml
from agentgate.errors import PolicyError
from agentgate.policy import parse_policy


@pytest.fixture(params=["libyaml", "pure-python"])
def parser(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Both parsers agentgate may run on."""
    if request.param == "pure-python":
        monkeypatch.setattr(agentgate._yaml, "_Loader", agentgate._yaml._PureLoader)
    return str(request.param)


def _error(text: str, max_nodes: int = MAX_NODES) -> PolicyError:
    with pytest.raises(PolicyError) as info:
        load_yaml(text, source="p.yaml", max_nodes=max_nodes)
    return info.value


def test_locations_give_line_and_column_of_keys_and_values() -> None:
    data, where = load_yaml("version: 1\nroles:\n  a:\n    ttl_s: 60\n", source="p.yaml")
    assert data == {"version": 1, "roles": {"a": {"ttl_s": 60}}}
    key = where.of(("roles", "a", "ttl_s"), key=True)
    assert key is not None and (key.line, key.column) == (4, 5)
    mark = where.of(("roles", "a", "ttl_s"))
    assert mark is not None and (mark.line, mark.column) == (4, 12)
    deeper = where.of(("roles", "a", "ttl_s", "not", "there"))
    assert deeper == mark


def test_empty_document_is_none() -> None:
    assert load_yaml("# only a comment\n", source="p.yaml")[0] is None


def test_duplicate_key_is_refused_with_both_lines() -> None:
    error = _error("a: 1\nb:\n  c: 1\n  c: 2\n")
    assert (error.file, error.line, error.column) == ("p.yaml", 4, 3)
    assert "first at line 3" in error.message and error.hint


@pytest.mark.parametrize(
    "text",
    [
        "a: !!python/object:os.system {}\n",
        "a: !!python/name:os.system ''\n",
        "a: !include other.yaml\n",
        "a: !!binary aGVsbG8=\n",
        "a: !!set {x, y}\n",
    ],
)
def test_tags_outside_the_core_schema_are_refused(text: str) -> None:
    error = _error(text)
    assert "not allowed" in error.message and error.line == 1


def test_alias_bomb_is_refused_before_it_expands() -> None:
    lines = ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for i, name in enumerate("bcdefghij"):
        prev = "abcdefghij"[i]
        lines.append(f"{name}: &{name} [" + ",".join([f"*{prev}"] * 9) + "]")
    error = _error("\n".join(lines) + "\n")
    assert "aliases" in error.message and error.line is not None


def test_a_few_aliases_are_fine() -> None:
    text = "x: &x {le: 5}\n" + "".join(f"k{i}: *x\n" for i in range(MAX_ALIASES))
    data, _ = load_yaml(text, source="p.yaml")
    assert data["k0"] == {"le": 5}


def test_merge_keys_and_non_string_keys_are_refused() -> None:
    assert "merge" in _error("a: &a {x: 1}\nb:\n  <<: *a\n").message
    assert "plain strings" in _error("1: one\n").message
    assert "plain strings" in _error("yes: 1\n").message


def test_malformed_yaml_names_the_position() -> None:
    error = _error("a: [1, 2\nb: 3\n")
    assert error.line is not None and error.column is not None and "malformed" in error.message


def test_several_documents_are_refused() -> None:
    assert "malformed" in _error("a: 1\n---\nb: 2\n").message


def test_inventory_files_get_the_same_protection_as_policies() -> None:
    """One loader for every YAML file: an inventory alias bomb is refused with its own error type."""
    from agentgate.dispatch import parse_inventory
    from agentgate.errors import InventoryError

    bomb = "a: &a [x, x]\n" + "".join(
        f"b{i}: &b{i} [*{'a' if i == 0 else f'b{i - 1}'}, *{'a' if i == 0 else f'b{i - 1}'}]\n"
        for i in range(20)
    )
    with pytest.raises(InventoryError, match="aliases"):
        parse_inventory(bomb, source="inv.yaml")
    with pytest.raises(InventoryError, match="merge keys"):
        parse_inventory("base: &b {x: 1}\nnodes:\n  <<: *b\n", source="inv.yaml")


def test_yaml_1_1_booleans_are_text_and_yaml_1_2_booleans_stay_booleans() -> None:
    """``in: [NO, SE, DK]`` holds Norway, not False (the YAML 1.1 "Norway problem")."""
    data, _ = load_yaml(
        "in: [NO, SE, DK]\nflags: [yes, No, on, OFF, y]\nb: [true, False, TRUE]\n", source="p.yaml"
    )
    assert data == {
        "in": ["NO", "SE", "DK"],
        "flags": ["yes", "No", "on", "OFF", "y"],
        "b": [True, False, True],
    }


def test_sexagesimal_numbers_are_text_and_plain_integers_are_integers() -> None:
    data, _ = load_yaml("t: 10:30\nf: 1:30.5\nn: [0, -7, +5, 1_000, 0x1F, 0b101]\n", source="p.yaml")
    assert data == {"t": "10:30", "f": "1:30.5", "n": [0, -7, 5, 1000, 31, 5]}


def test_an_integer_with_a_leading_zero_is_refused_as_ambiguous() -> None:
    error = _error("a:\n  b: 0755\n")
    assert (error.line, error.column) == (2, 6) and "ambiguous number '0755'" in error.message


def test_an_integer_too_long_to_convert_is_a_policy_error() -> None:
    error = _error("a: " + "9" * 5000 + "\n")
    assert error.line == 1 and "number of 5000 characters" in error.message


# --- keys, tags, aliases and numbers -------------------------------------------------------------


@pytest.mark.parametrize("text", ["1: a\n", "true: a\n", "null: a\n", "? [a]\n: b\n"])
def test_non_string_keys_are_refused(text: str) -> None:
    """Kills: the key check reduced to ``isinstance(key_node, ScalarNode)`` (any scalar tag).

    ``1:``, ``true:`` and ``null:`` are not the text keys a reviewer reads; refused with a location."""
    with pytest.raises(PolicyError, match="mapping keys must be plain strings") as info:
        load_yaml(text, source="f.yaml")
    assert info.value.line == 1


@pytest.mark.parametrize(
    "text",
    [
        'a: !!timestamp "2026-01-31"\n',
        "a: !!binary aGk=\n",
        "a: !!set {x}\n",
        "a: !include [other.yaml]\n",
        "a: !!omap [{b: 1}]\n",
        "a: !!pairs [{b: 1}]\n",
    ],
)
def test_tags_outside_the_core_schema_are_refused_on_lists_and_quoted_dates(text: str) -> None:
    """Kills: the plain-timestamp shortcut widened to a quoted ``!!timestamp``, and the sequence
    tag check dropped (``!include [file]``, ``!!omap [...]`` built as a plain list).

    A tagged list or a tagged quoted date is refused with its location, never quietly built."""
    with pytest.raises(PolicyError, match="is not allowed"):
        load_yaml(text, source="f.yaml")


def test_aliases_that_expand_past_the_value_limit_are_refused() -> None:
    """Kills: the build-time value cap (``MAX_NODES`` values built) raised far above the limit.

    Fifteen aliases (under ``MAX_ALIASES``) in a 4 KB file, nested so that they expand to 61,000
    values: the parser's event count never sees the expansion, so only the build-time count can
    refuse it, before it is built whole."""
    items = ", ".join("1" for _ in range(1000))
    text = f"a: &a [{items}]\nb: &b [{', '.join(['*a'] * 10)}]\nc: [{', '.join(['*b'] * 5)}]\n"
    assert len(text) < 16 * 1024
    with pytest.raises(PolicyError, match="expands to more than 50000 values"):
        load_yaml(text, source="f.yaml")


def test_a_tagged_octal_string_stays_text() -> None:
    """Kills: the tag check of ``_text`` dropped (``!!str 0o17`` read as 15).

    ``!!str`` says text: the value stays the string the author wrote."""
    data, _ = load_yaml("a: !!str 0o17\nb: 0o17\nc: !!str 1e3\n", source="f.yaml")
    assert data == {"a": "0o17", "b": 15, "c": "1e3"}


@pytest.mark.parametrize("value", ["09", "-08", "0_9"])
def test_a_decimal_with_a_leading_zero_is_ambiguous(value: str) -> None:
    """Kills: the leading-zero refusal of ``_text`` dropped (``09`` then read as the float 9.0).

    ``09`` is text to PyYAML and 9 to YAML 1.2 (``le: 09`` in a constraint would silently become
    a number other readers disagree on): refused as ambiguous, with its location."""
    with pytest.raises(PolicyError, match="ambiguous number") as info:
        load_yaml(f"a: {value}\n", source="f.yaml")
    assert (info.value.line, info.value.column) == (1, 4)


def test_the_alias_limit_is_exact() -> None:
    """Mutant: the alias count was compared with ``MAX_ALIASES + 1``, letting one more through.

    Rule: at most ``MAX_ALIASES`` (16) aliases of a collection load; the next is refused."""
    from agentgate._yaml import MAX_ALIASES

    def doc(n: int) -> str:
        return "a: &x [1, 2]\nb: [" + ", ".join(["*x"] * n) + "]\n"

    data, _ = load_yaml(doc(MAX_ALIASES), source="p.yaml")
    assert data["b"] == [[1, 2]] * MAX_ALIASES
    with pytest.raises(PolicyError, match=f"more than {MAX_ALIASES} YAML aliases"):
        load_yaml(doc(MAX_ALIASES + 1), source="p.yaml")


def test_the_depth_limit_is_exact() -> None:
    """Mutant: the depth test was ``len(path) > MAX_DEPTH``, letting one level more be built.

    Rule: at most ``MAX_DEPTH`` (100) nested collections load; one more is refused."""
    from agentgate._yaml import MAX_DEPTH

    data, _ = load_yaml("[" * MAX_DEPTH + "]" * MAX_DEPTH, source="p.yaml")
    depth = 0
    while isinstance(data, list):
        depth, data = depth + 1, data[0] if data else None
    assert depth == MAX_DEPTH
    with pytest.raises(PolicyError, match=f"nested more than {MAX_DEPTH} levels deep"):
        load_yaml("[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1), source="p.yaml")


def test_text_tagged_as_str_stays_text_even_when_it_looks_like_a_number() -> None:
    """Mutant: the YAML 1.2 number reading of plain scalars ignored a ``!!str`` tag, so
    ``!!str 1e3`` became 1000.0 and ``!!str 0o17`` became 15.

    Rule: an author who tags a value ``!!str`` gets text; only an untagged plain scalar is read
    as a YAML 1.2 number (and an anchor before the tag changes nothing)."""
    data, _ = load_yaml(
        "a: !!str 1e3\nb: !!str 0o17\nc: &x !!str -.5\nd: !!str 09\ne: 1e3\nf: 0o17\n", source="p.yaml"
    )
    assert data == {"a": "1e3", "b": "0o17", "c": "-.5", "d": "09", "e": 1000.0, "f": 15}


def test_a_tag_after_an_anchor_and_a_comment_is_still_a_tag() -> None:
    """Mutant: the tag was looked for right after the anchor and its spaces only, so a comment
    between them (``&x # why`` then ``!!str 1e3`` on the next line) hid it: the text the author
    tagged ``!!str`` was read as the number 1000.0, and a ``!!timestamp`` tag was let through
    as text instead of refused.

    Rule: whatever whitespace and comments stand between an anchor and its tag, the value is
    tagged: ``!!str`` keeps text, a tag outside the core schema is refused at its place."""
    data, _ = load_yaml(
        "a: &x # why\n  !!str 1e3\nb: &y # one\n  # two\n  !!str 0o17\nc: &z # why\n  1e3\n", source="p.yaml"
    )
    assert data == {"a": "1e3", "b": "0o17", "c": 1000.0}
    with pytest.raises(PolicyError, match=r"tag 'tag:yaml\.org,2002:timestamp' is not allowed"):
        load_yaml("a: &x # why\n  !!timestamp 2026-01-31\n", source="p.yaml")
    # A comment of many '#': a pattern that may end a comment at any of them tries 2**63 ways
    # here before it gives up (a load that never ends); a comment runs to its line's end.
    assert load_yaml("a: &x " + "# " * 64 + "\n  1e3\n", source="p.yaml")[0] == {"a": 1000.0}


def test_an_untagged_decimal_with_a_leading_zero_is_refused_as_ambiguous() -> None:
    """Mutant: the leading-zero test of plain text scalars was dropped, so ``09`` (text to
    PyYAML's YAML 1.1 rule, 9 in YAML 1.2) loaded as the text "09".

    Rule: a number YAML versions read differently is refused with its place, never guessed."""
    for value in ("09", "-08", "0_9"):
        with pytest.raises(PolicyError, match="ambiguous number"):
            load_yaml(f"limit: {value}\n", source="p.yaml")
    assert load_yaml("limit: '09'\n", source="p.yaml")[0] == {"limit": "09"}


def test_an_integer_too_long_to_print_is_refused_whatever_its_base() -> None:
    """Mutant: the magnitude check after conversion was dropped; ``0x`` and 3,600 hex digits
    converts (only decimal text is bounded) into a number no message can print.

    Rule: an integer of more than 4,300 decimal digits is refused, in hex as in decimal."""
    with pytest.raises(PolicyError, match="number of 3602 characters"):
        load_yaml("a: 0x" + "f" * 3600 + "\n", source="p.yaml")
    assert load_yaml("a: 0x" + "f" * 100 + "\n", source="p.yaml")[0] == {"a": int("f" * 100, 16)}


@pytest.mark.parametrize(
    "text",
    [
        "a: !!timestamp 2026-01-31\n",
        "a: &d !!timestamp 2026-01-31\n",
        "a: !custom [1, 2]\n",
        "a: !!omap [{b: 1}]\n",
        "a: !!pairs [{b: 1}]\n",
    ],
)
def test_a_tag_on_a_date_or_a_list_is_refused(text: str) -> None:
    """Mutant: a tagged timestamp was read as text like a plain date (the tag test dropped), or
    a list's tag was not checked, so ``!custom [1, 2]`` and ``!!omap`` loaded as plain lists.

    Rule: only the core schema loads; any other tag, on a scalar or a list, is refused with its place."""
    with pytest.raises(PolicyError, match="is not allowed"):
        load_yaml(text, source="p.yaml")
    assert load_yaml("a: 2026-01-31\n", source="p.yaml")[0] == {"a": "2026-01-31"}


def test_an_unquoted_exponent_without_a_dot_is_a_number_as_in_yaml_1_2() -> None:
    """R13: ``timeout_s: 1e3`` (a float in YAML 1.2, which docs/policy-reference.md says plain
    scalars follow) was read as text and refused with the hint "write the value unquoted"."""
    from agentgate._yaml import load_yaml

    data, _ = load_yaml("a: 1e3\nb: -2E-3\nc: '1e3'\nd: 1e3x\n", source="t.yaml")
    assert data == {"a": 1000.0, "b": -0.002, "c": "1e3", "d": "1e3x"}


@pytest.mark.parametrize("tagged", ["!!timestamp 2026-01-31", "&d !!timestamp 2026-01-31"])
def test_a_timestamp_tag_is_refused_as_every_tag_outside_the_core_schema(tagged: str) -> None:
    """R47 (policy helper): an explicit, unquoted ``!!timestamp`` was read as text, where
    docs/policy-reference.md refuses every tag outside the core schema; a plain date stays text."""
    from agentgate._yaml import load_yaml
    from agentgate.errors import PolicyError

    assert load_yaml("a: 2026-01-31\n", source="t.yaml")[0] == {"a": "2026-01-31"}
    column = 4 + tagged.index("!")  # at the tag's '!', past an anchor (review R67)
    with pytest.raises(
        PolicyError, match=rf"t.yaml:1:{column}: tag 'tag:yaml.org,2002:timestamp' is not allowed"
    ):
        load_yaml(f"a: {tagged}\n", source="t.yaml")


def test_a_message_quotes_at_most_a_hundred_characters_of_a_key_or_a_tag() -> None:
    """Mutant: a tag and a duplicate key were quoted whole: an explicit key (``? KEY``, no
    1,024-character limit as for a plain one) or a tag of a megabyte made a one-megabyte error
    line, which the command line prints as its one line on standard error.

    Rule: a message quotes at most 100 characters of the file's text and says how long it was."""
    long = "k" * 1_000_000
    for text, length in ((f"a: !{long} 1\n", 1_000_001), (f"? {long}\n: 1\n? {long}\n: 2\n", 1_000_000)):
        with pytest.raises(PolicyError) as info:
            load_yaml(text, source="p.yaml")
        assert len(str(info.value)) < 500 and f"... ({length} characters)" in str(info.value)


_ANCHORS = "version: 1\ndescription: &text long\ntools:\n  x.y: &tool {timeout_s: 5}\nroles:\n"


@pytest.mark.parametrize(
    ("role", "where", "says"),
    [
        (
            "  a:\n    capabilities: []\n    inherits:\n      - *text\n",
            (9, 9),
            "'long' is not declared in roles",
        ),
        (
            "  b:\n    capabilities: []\n    ttl_s: *text\n",
            (8, 12),
            "roles.b.ttl_s: Input should be a valid integer",
        ),
        ("  c:\n    capabilities: []\n    budget: *tool\n", (8, 13), "roles.c.budget.limit is required"),
    ],
    ids=["alias in a list", "alias of a scalar", "alias of a mapping"],
)
def test_an_error_in_an_aliased_value_is_located_at_the_alias_not_the_anchor(
    parser: str, role: str, where: tuple[int, int], says: str
) -> None:
    """Mutant (review r53): the composer hands an alias over as its anchor's node, marks and all,
    so ``ttl_s: *text`` on line 8 was refused at line 2, ``description: &text long``, a line
    that holds no ttl_s, under a message naming roles.b.ttl_s.

    Rule: a value written as an alias, and every value under it, is located where the alias is
    written: the line the message's path names."""
    with pytest.raises(PolicyError) as info:
        parse_policy(_ANCHORS + role, source="p.yaml")
    assert says in info.value.message
    assert (info.value.line, info.value.column) == where


def test_a_key_written_as_an_alias_is_located_at_the_alias(parser: str) -> None:
    """Mutant (review r53): a key written ``*k`` that repeats a key was refused at the anchor
    (line 1), not where the second key is written (line 3).

    Rule: a key written as an alias is located where the alias is written."""
    error = _error("a: &k name\nname: 1\n*k : 2\n")
    assert "duplicate key 'name' (first at line 2)" in error.message
    assert (error.line, error.column) == (3, 1)
    _, locations = load_yaml("a: &k name\n*k : 2\n", source="p.yaml")
    assert locations.of(("name",), key=True) == (2, 1)


def test_the_alias_past_the_limit_is_the_one_located(parser: str) -> None:
    """Mutant (review r53): the refusal of one alias too many was located at the mapping or list
    that holds it (line 1 here, for an alias on line 18).

    Rule: the error points at the first alias past ``MAX_ALIASES``."""
    text = "a: &x [1]\nb:\n" + "".join("  - *x\n" for _ in range(MAX_ALIASES + 1))
    error = _error(text)
    assert "YAML aliases" in error.message
    assert (error.line, error.column) == (MAX_ALIASES + 3, 5)


@pytest.mark.parametrize(
    "text", ['a: "\\ud800"\n', 'a: "x\\udc80"\n', '"\\ud800": 1\n', 'a: ["\\ud83d\\ude00"]\n']
)
def test_a_lone_surrogate_escape_is_refused_by_both_parsers(parser: str, text: str) -> None:
    """Mutant (review r53): libyaml refuses the escape ``"\\ud800"``, PyYAML's pure-Python reader
    built it: the same policy loaded, with text no UTF-8 file or JSON answer can hold, or not, as
    PyYAML was installed with libyaml or without.

    Rule: a lone surrogate, in a value or a key, is refused with its line, whichever parser reads."""
    error = _error(text)
    assert "invalid Unicode character escape" in error.message and error.line == 1


@pytest.mark.parametrize("quote", ['"', "'"])
def test_an_unclosed_quote_is_located_where_it_opens_not_at_the_end_of_the_file(
    parser: str, quote: str
) -> None:
    """Mutant (review r53): an unclosed quote on line 2 was refused at the end of the file (line
    24 here) as "found unexpected end of stream", a place where nothing can be fixed, without
    saying what was left open.

    Rule: the error is located at the quote that opens the unclosed scalar, and says so."""
    text = f"version: 1\nname: {quote}abc\ndescription: x\n" + "x: 1\n" * 20
    error = _error(text)
    assert (error.line, error.column) == (2, 7)
    assert "while scanning a quoted scalar at line 2, column 7" in error.message


@pytest.mark.parametrize(
    ("cut", "bracket"),
    [("[", "["), ("[a,", "["), ("{", "{"), ("{a: 1,", "{"), ("[1, {a: [2,", "[")],
)
def test_a_file_cut_inside_a_flow_collection_is_located_at_the_bracket_left_open(
    parser: str, cut: str, bracket: str
) -> None:
    """Review R81 (docs/policy-reference.md: "an unclosed quote or bracket ... is located where it
    opens"): a file cut right after a flow collection's opening bracket or a ',' inside it was
    refused one line past its end ("while parsing a flow node at line 12, column 1"), since the
    parser's context there is the node it expected, not the collection; on a long policy nothing
    pointed at the bracket. Rule: the innermost bracket still open, with its line and column."""
    text = f"version: 1\nname: {cut}\n\n# notes\n"
    error = _error(text)
    assert (error.line, error.column) == (2, 6 + cut.rindex(bracket) + 1), error.message
    assert f"the '{bracket}' at line 2, column {error.column} is never closed" in error.message


def test_a_malformed_file_says_what_the_parser_was_reading_and_where_it_began(parser: str) -> None:
    """Mutant (review r53): PyYAML's context was dropped: a repeated anchor was refused as
    "malformed YAML: second occurrence", naming neither the anchor nor the first occurrence.

    Rule: the message says what was being read and where it began, the error where it failed."""
    error = _error("a: &x 1\nb: &x 2\n")
    assert "duplicate anchor" in error.message and "first occurrence at line 1, column 4" in error.message
    assert (error.line, error.column) == (2, 4)
    error = _error("a: [1, 2\nb: 3\n")
    assert "while parsing a flow sequence at line 1, column 4" in error.message and error.line == 2


@pytest.mark.parametrize("value", ['!!float ""', '!!float "_"', "!!float _", '!!int ""', '!!int "+"'])
def test_a_tagged_number_without_digits_is_refused_as_not_a_number(value: str) -> None:
    """Mutant (review r53): ``!!float ""`` raised PyYAML's IndexError (it reads the text's first
    character), a traceback out of ``load_policy`` and ``agentgate policy lint`` (exit 1, read as
    "error findings"); ``!!int ""`` was called an ambiguous number with a leading zero.

    Rule: a number tag on text with no digits is refused as not a number, at its location."""
    error = _error(f"version: 1\nname: {value}\n")
    assert error.message.startswith("not a number: ") and (error.line, error.column) == (2, 7)


def test_a_float_other_than_the_number_written_is_recorded_where_it_is_written() -> None:
    """Review R55: a float no number written holds (9007199254740993.0 loads as 2**53) was not told
    from one that does, so a policy's constraint could not refuse it; it now is, by location path."""
    text = "a: 9007199254740993.0\nb: [0.1, 1.5e3, -.5, 1e-400, &x 100.00000000000000001, *x]\nc: 2\nd: 1_000.5\n"
    data, locations = load_yaml(text, source="x.yaml")
    assert data["a"] == 2.0**53 and data["b"][3] == 0.0 and data["b"][5] == 100.0  # loaded as before
    assert locations.inexact == {
        ("a",): ("9007199254740993.0", 2.0**53),
        ("b", 3): ("1e-400", 0.0),
        ("b", 4): ("100.00000000000000001", 100.0),
        ("b", 5): ("100.00000000000000001", 100.0),
    }


def test_a_float_in_pyyamls_sign_forms_is_judged_by_the_number_it_reads() -> None:
    """Review R55: ``!!float -+1.5`` (PyYAML reads -1.5) was recorded as a number no float holds as
    written, since neither float() nor Decimal reads that text; so was ``--1.5`` (1.5)."""
    text = "a: !!float -+1.5\nb: !!float --1.5\nc: !!float +-0.1\nd: !!float -+9007199254740993.0\n"
    data, locations = load_yaml(text, source="x.yaml")
    assert [data[k] for k in "abc"] == [-1.5, 1.5, -0.1]
    assert locations.inexact == {("d",): ("-+9007199254740993.0", -(2.0**53))}
