"""The one-line form refuses what its grammar does not define (docs/cli.md,
CAP), a ``Call`` refuses fields of the wrong type, no constraint value is text that cannot be
written down, and ``decide`` denies a hand-built invocation with a wrong-typed field."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentgate.authority import Authority, GrantRepository, Invocation, Outcome, issue
from agentgate.capabilities import Call, Capability, covers, format_capability, parse_capability
from agentgate.errors import CapabilityError
from agentgate.keys import SigningKey
from agentgate.store import SQLiteStore

# --- the one-line grammar -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("tool:x#", "no action"),  # was tool:x (the default action)
        ("tool:x#?a=1", "no action"),
        ("tool:x?", "cannot read clause"),  # was tool:x, no constraint at all
        ("tool:x?a==1", "'==' is not an operator"),  # was a = the string "=1"
        ("tool:x?a=<5", "'=<' is not an operator"),  # was a = the string "<5"
        ("tool:x?a=>5", "'=>' is not an operator"),
        ("tool:x?a=%zz", "%XX escape"),  # was the literal "%zz"
        ("tool:x?a=50%", "%XX escape"),
        ("tool:x?a=%ff", "UTF-8"),  # was U+FFFD
        ('tool:x?a="abc', "encloses a whole value"),  # was the literal '"abc'
        ('tool:x?a=ab"c', "encloses a whole value"),
        ('tool:x?a="x|y"', "encloses a whole value"),  # was the two strings '"x' and 'y"'
        ("tool:x?a=1|", "empty value"),  # was {in: [1, ""]}
        ("tool:x?a=1||2", "empty value"),
        ("tool:x?a=|", "empty value"),
        ("tool:x?a=", "empty value"),
        ("tool:x?a^=", "empty prefix"),  # was a prefix that matches every string
        ('tool:x?a^="x', "encloses a whole value"),  # was the prefix "x"
        ('tool:x?a^=""x""', "encloses a whole value"),
    ],
)
def test_a_capability_outside_the_grammar_is_refused_and_the_problem_named(text: str, problem: str) -> None:
    with pytest.raises(CapabilityError, match=problem):
        parse_capability(text)


@pytest.mark.parametrize(
    ("text", "clause", "problem"),
    [
        ("tool:x?a<=1e999", "a<=1e999", "inf is not a finite number"),
        ("tool:x?a=1|1e999", "a=1|1e999", "inf is not a finite number"),
        ("tool:x?a>=-1e999", "a>=-1e999", "-inf is not a finite number"),
        ("tool:x?a=9223372036854775808", "a=9223372036854775808", "out of range"),
    ],
)
def test_a_number_out_of_range_is_refused_naming_its_capability_and_clause(
    text: str, clause: str, problem: str
) -> None:
    """A user with several --allow flags must learn which one holds the bad number (the error
    once began "value: ..." and named neither)."""
    with pytest.raises(CapabilityError) as refused:
        parse_capability(text)
    assert str(refused.value).startswith(f"capability {text!r}: clause {clause!r}: ")
    assert problem in str(refused.value)


@pytest.mark.parametrize(
    ("text", "read_as"),
    [
        ("tool:x?n>=9007199254740993.0", "9007199254740992.0"),  # was n>=2**53: it covered n=2**53
        ("tool:x?n<=100.00000000000000001", "100.0"),
        ("tool:x?n>1e-400", "0.0"),
        ("tool:x?n=1|2.00000000000000001", "2.0"),
    ],
)
def test_a_number_no_float_holds_as_written_is_refused(text: str, read_as: str) -> None:
    """Review R55: a bound written with more digits than a float holds was read rounded, so
    ``n>=9007199254740993.0`` became ``n>=9007199254740992.0`` and covered ``n=2**53``, which the
    written bound excludes; it is refused, naming the value it would be read as (as ``--args``
    refuses such an argument)."""
    with pytest.raises(CapabilityError, match=f"no float holds as written.*{read_as}"):
        parse_capability(text)
    for exact in ("tool:x?n<=0.1", "tool:x?n<=1e2", "tool:x?n>=5e-324", "tool:x?n>=9007199254740993"):
        assert parse_capability(format_capability(parse_capability(exact))) == parse_capability(exact)


@pytest.mark.parametrize(
    ("text", "field", "op", "value"),
    [
        ('tool:x?a=""', "a", "eq", ""),
        ('tool:x?a^=""', "a", "prefix", ""),
        ('tool:x?a=""|b', "a", "in", ["", "b"]),
        ('tool:x?a="=1"', "a", "eq", "=1"),
        ("tool:x?a=%3D1", "a", "eq", "=1"),
        ("tool:x?a=x=1", "a", "eq", "x=1"),  # only a leading '=' reads as a misspelled operator
        ("tool:x?a=50%25", "a", "eq", "50%"),
        ("tool:x?a=caf%C3%A9", "a", "eq", "café"),
        ("tool:x?url^=https://x.org/?q=", "url", "prefix", "https://x.org/?q="),
        ("tool:x?a^=<h1", "a", "prefix", "<h1"),
        ("tool:x?a<=1e3", "a", "le", 1000),  # a NUMBER, as documented
        ("tool:x?a=01", "a", "eq", "01"),  # not a NUMBER: a string, as documented
    ],
)
def test_the_documented_spellings_are_read_as_written(text: str, field: str, op: str, value: object) -> None:
    cap = parse_capability(text)
    assert cap.constraint_map[field].to_dict() == {op: value}
    assert parse_capability(format_capability(cap)) == cap


_TEXT = st.text(max_size=8)


@settings(max_examples=300, deadline=None)
@given(_TEXT, _TEXT, _TEXT)
def test_every_string_constraint_is_written_in_a_form_that_reads_back(
    eq: str, other: str, prefix: str
) -> None:
    """The formatter spells the empty string, and any text, in the grammar the parser accepts."""
    one_of = [eq, other] if eq != other else [eq, other + "z"]
    cap = Capability.of("tool:x", None, {"a": {"eq": eq}, "b": {"in": one_of}, "c": {"prefix": prefix}})
    assert parse_capability(format_capability(cap)) == cap


def test_an_empty_action_is_not_read_as_the_default() -> None:
    with pytest.raises(CapabilityError):
        Capability.from_dict({"resource": "tool:x", "action": "", "constraints": {}})
    assert Capability.of("tool:x").action == "invoke"


# --- calls ----------------------------------------------------------------------------------------------


def test_a_call_built_with_its_arguments_in_the_action_slot_is_refused() -> None:
    """``Call("model:m", {...})`` put the arguments into ``action``; a ``*`` capability covered it
    (with no arguments at all), and ``Authority.decide_held`` allowed it."""
    with pytest.raises(CapabilityError, match="resource and action are strings"):
        Call("model:m", {"prompt": "hi"})  # type: ignore[arg-type]
    with pytest.raises(CapabilityError):
        Call(None, "invoke")  # type: ignore[arg-type]
    assert covers(Capability.of("model:m", "*"), Call("model:m", "generate", {"prompt": "hi"}))


@pytest.mark.parametrize("args", [[("amount", 1)], "amount", 5])
def test_call_arguments_that_are_not_a_mapping_are_refused(args: object) -> None:
    """A list of pairs was quietly turned into a mapping by ``Call.tool``, and built directly it
    made ``Gate.authorize`` raise ``AttributeError``."""
    with pytest.raises(CapabilityError, match="mapping"):
        Call("tool:x", "invoke", args)  # type: ignore[arg-type]
    with pytest.raises(CapabilityError, match="mapping"):
        Call.tool("x", args)  # type: ignore[arg-type]
    with pytest.raises(CapabilityError, match="mapping"):
        Call.model("m", args)  # type: ignore[arg-type]
    assert Call.tool("x").args == {} and Call.tool("x", {}).args == {}


# --- values ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("spec", [{"eq": "\ud800"}, {"in": ["a", "b\udcff"]}, {"prefix": "ab\ud83d"}])
def test_a_constraint_value_that_is_not_unicode_text_is_refused(spec: dict[str, object]) -> None:
    """Such a capability could not be printed (``str`` raised ``UnicodeEncodeError``, out of
    ``Gate.delegate`` when the policy refused it), signed, or match any call that can be allowed."""
    with pytest.raises(CapabilityError, match="not valid Unicode"):
        Capability.of("tool:x", None, {"a": spec})


# --- hand-built invocations -----------------------------------------------------------------------------

_NOW = 1_800_000_000
_ROOT, _HOLDER = SigningKey(bytes([51]) * 32), SigningKey(bytes([52]) * 32)
_CHAIN = issue(_ROOT, _HOLDER.did, ["tool:x#*"], ttl=600, now=_NOW)
_SIGNED = Invocation.sign(_HOLDER, _CHAIN, Call("tool:x", "invoke", {}), now=_NOW)


@pytest.mark.parametrize(
    ("field", "value", "code"),
    [
        ("chain_token", [], "malformed_token"),  # was TypeError (unhashable) from the chain cache
        ("chain_token", {}, "malformed_token"),
        ("issuer", None, "wrong_holder"),  # was TypeError from naming the signer
        ("issuer", 7, "wrong_holder"),
        ("signature", None, "bad_invocation_signature"),  # was TypeError from the length check
        ("signature", "x" * 64, "bad_invocation_signature"),
    ],
)
def test_a_hand_built_invocation_with_a_wrong_typed_field_is_denied_not_raised(
    sqlite_store: SQLiteStore, field: str, value: object, code: str
) -> None:
    """``decide`` never raises for bad input: one finding, a deny."""
    authority = Authority(GrantRepository(sqlite_store), _ROOT.did)
    assert authority.decide(_SIGNED, now=_NOW).allowed
    decision = authority.decide(replace(_SIGNED, **{field: value}), now=_NOW)  # type: ignore[arg-type]
    assert decision.outcome is Outcome.DENY
    assert [f.code for f in decision.findings] == [code]


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("tool:x?note=\x1b[31m", "control character '\\x1b' (U+001B) at character 13"),
        ("tool:x?note=a\x9bb", "control character '\\x9b' (U+009B) at character 14"),
        ("tool:x?note=a\u202eb", "bidirectional-text control character U+202E at character 14"),
        ("tool:x?a=1|\u2067b", "bidirectional-text control character U+2067 at character 12"),
        ("tool:x?a^=x\u200b", "invisible format character U+200B at character 12"),
        ("tool:x?a\x00=1", "control character '\\x00' (U+0000) at character 9"),
    ],
)
def test_a_control_or_bidi_character_typed_in_a_clause_is_refused_where_it_stands(
    text: str, said: str
) -> None:
    """Review R56: a clause value holding a raw ESC or bidi override was read into a signed grant."""
    with pytest.raises(CapabilityError) as refused:
        parse_capability(text)
    assert f"holds {said}; percent-encode it" in str(refused.value)


def test_a_percent_escaped_control_character_is_read_as_the_formatter_writes_it() -> None:
    cap = Capability.of("tool:x", None, {"note": {"eq": "\x1b[31m"}, "dir": {"eq": "a\u202eb"}})
    assert format_capability(cap) == 'tool:x?dir="a%E2%80%AEb"&note="%1B%5B31m"'
    assert parse_capability(format_capability(cap)) == cap
