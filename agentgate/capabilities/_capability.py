"""``Capability`` and its one-line form (``parse_capability``, ``format_capability``).

One module because they use each other: ``Capability.parse`` and ``str(capability)`` are the
one-line form, and ``parse_capability`` builds its result with ``Capability.of``.
"""

from __future__ import annotations

import re
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from agentgate._json import Inexact, exact_float
from agentgate._shown import character_named, not_printable, quoted
from agentgate.capabilities._constraints import Constraint
from agentgate.capabilities._resources import DEFAULT_ACTIONS, MAX_NAME_LENGTH, _check_pattern
from agentgate.capabilities._values import Scalar, _check_value, _text
from agentgate.errors import CapabilityError

MAX_CAPABILITY_TEXT = 7 * 8 * 1024
"""The most characters the one-line form of a capability may have: 57,344, seven times a grant
payload's 8 KiB (``authority._grant.MAX_PAYLOAD_BYTES``), so that the one-line form of every capability a
token carries, as ``grant inspect`` and refusals write it, parses back. Its JSON in the payload is
under 8 KiB, and the one-line form writes no part of it more than seven times as long: an
argument name, once in the JSON, once for each of up to seven operators; a byte of text as at
most three characters (``%XX``); a one-value set twice (``a=x|x``). Until review R83 it was 4,096:
a set of 1,000 short values, which a token carries, was written in 5,916 characters that
``parse_capability`` refused. Only a policy's rule can be longer (one no token carries)."""

_QUOTED_TEXT = 200
"""Most characters of a capability's one-line form (or of one clause) a refusal quotes: the form
may be ``MAX_CAPABILITY_TEXT`` long, and an error is a line of a log."""

_ACTION = re.compile(r"[a-z][a-z0-9_]*|\*")
_FIELD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*")
_USUAL_ACTIONS = frozenset(DEFAULT_ACTIONS.values())
"""The actions of nearly every call (``invoke``, ``generate``, ``lease``): taken without the regex."""


def _check_action(action: str, whose: str, *, every: bool = False) -> str:
    """``action`` if a capability could name it as one action: a lower-case identifier (the
    grammar of a capability's action) of at most ``MAX_NAME_LENGTH`` characters; ``*`` (every
    action) only where ``every`` (a capability's action, never a call's). Else ``CapabilityError``
    naming ``whose`` action it is. Until review R56 a call's action was any string: under a grant
    of every action, ``"invoke\\n"``, ``""``, one with a zero-width character or one of 5,000
    characters was allowed, and its audit entry and spans carried it. Until review R57 a
    capability's action, in a grant token or a policy, had no length limit."""
    if action in _USUAL_ACTIONS or (
        len(action) <= MAX_NAME_LENGTH and (action != "*" or every) and _ACTION.fullmatch(action)
    ):
        return action
    if len(action) > MAX_NAME_LENGTH:
        why = f"is {len(action)} characters long, more than {MAX_NAME_LENGTH}"
    elif (hidden := next((c for c in action if not_printable(c)), None)) is not None:
        why = f"holds {character_named(hidden)}"
    elif action == "*":
        why = "names every action, which a capability may grant and a call cannot take"
    else:
        why = "is not a lower-case identifier (a-z, then a-z, 0-9 or '_')" + (" or '*'" if every else "")
    raise CapabilityError(f"{whose} action {action[:40]!r}{'...' if len(action) > 40 else ''} {why}")


def _check_argument_name(name: object, resource: str) -> str:
    """``name`` as an exact ``str`` if a constraint may name it: ``[A-Za-z_][A-Za-z0-9_]*``
    segments joined by ``.``, at most ``MAX_NAME_LENGTH`` characters; else ``CapabilityError``
    naming ``resource`` and the argument name (cut at 40 characters). Until review R57 an
    argument name had no length limit: a grant token carried one of 8,000 characters, and every
    decision and audit entry that quotes the capability carried it again."""
    if not issubclass(type(name), str):
        raise CapabilityError(f"{resource}: argument name {quoted(name)} is not an identifier")
    text = str.__str__(name)
    shown = f"{text[:40]!r}{'...' if len(text) > 40 else ''}"
    if len(text) > MAX_NAME_LENGTH:
        raise CapabilityError(
            f"{resource}: argument name {shown} is {len(text)} characters long, more than {MAX_NAME_LENGTH}"
        )
    if not _FIELD.fullmatch(text):
        raise CapabilityError(f"{resource}: argument name {shown} is not an identifier")
    return text


@dataclass(frozen=True)
class Capability:
    """A resource pattern, an action (or ``*``), and per-argument constraints (a conjunction)."""

    resource: str
    action: str
    constraints: tuple[tuple[str, Constraint], ...] = ()

    def __post_init__(self) -> None:
        # Exact ``str`` (``_text``): a subclass's ``startswith`` or ``__eq__`` never decides a match.
        object.__setattr__(self, "resource", _check_pattern(_text(self.resource, "a capability's resource")))
        object.__setattr__(
            self,
            "action",
            _check_action(_text(self.action, "a capability's action"), "a capability's", every=True),
        )
        constraints = self.constraints
        if not isinstance(constraints, tuple | list):
            raise CapabilityError(
                f"{self.resource}: constraints are (name, Constraint) pairs, got {type(constraints).__name__}; "
                "Capability.of takes the mapping form"
            )
        for pair in constraints:
            if not (isinstance(pair, tuple | list) and len(pair) == 2 and isinstance(pair[1], Constraint)):
                raise CapabilityError(
                    f"{self.resource}: constraints are (name, Constraint) pairs, got {quoted(pair)}"
                )
        exact = [(_check_argument_name(name, self.resource), constraint) for name, constraint in constraints]
        if len({name for name, _ in exact}) != len(exact):
            raise CapabilityError(f"{self.resource}: an argument is constrained twice; merge the operators")
        object.__setattr__(self, "constraints", tuple(sorted(exact, key=lambda c: c[0])))

    @classmethod
    def of(
        cls,
        resource: str,
        action: str | None = None,
        constraints: Mapping[str, Mapping[str, Any]] | None = None,
    ) -> Capability:
        """Build from plain values; the action defaults to the resource kind's (``invoke`` for tools)."""
        kind = _text(resource, "a capability's resource").partition(":")[0]
        if constraints is None:
            constraints = {}
        elif not isinstance(constraints, Mapping):
            raise CapabilityError(
                f"{resource}: constraints are a mapping of argument names to operators, "
                f"got {type(constraints).__name__}"
            )
        return cls(
            resource,
            DEFAULT_ACTIONS.get(kind, "invoke") if action is None else action,
            # The name checked first: the refusal of its operators names it (``10**5000`` has no digits).
            tuple(
                (name, Constraint.of(spec, f"{resource} {_check_argument_name(name, resource)}"))
                for name, spec in constraints.items()
            ),
        )

    @classmethod
    def parse(cls, text: str) -> Capability:
        """Parse the one-line form ``RESOURCE[#ACTION][?FIELD OP VALUE(&...)]`` (docs/cli.md)."""
        return parse_capability(text)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Capability:
        if not isinstance(data, Mapping) or set(data) - {"resource", "action", "constraints"}:
            raise CapabilityError("a capability has exactly the fields resource, action, constraints")
        resource, action = data.get("resource"), data.get("action")
        constraints = data.get("constraints", {})
        if (
            not isinstance(resource, str)
            or not isinstance(action, str)
            or not isinstance(constraints, Mapping)
        ):
            raise CapabilityError("capability resource and action must be strings, constraints a mapping")
        return cls.of(resource, action, constraints)

    def to_dict(self) -> dict[str, Any]:
        return {
            "resource": self.resource,
            "action": self.action,
            "constraints": {name: c.to_dict() for name, c in self.constraints},
        }

    @property
    def constraint_map(self) -> dict[str, Constraint]:
        return dict(self.constraints)

    def __str__(self) -> str:
        return format_capability(self)


# --- the one-line form ------------------------------------------------------------------------------


_CLAUSE = re.compile(r"(?P<field>[A-Za-z_][A-Za-z0-9_.]*)(?P<op><=|>=|\^=|=|<|>)(?P<value>.*)", re.S)
_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][-+]?[0-9]+)?")
_BAD_ESCAPE = re.compile(r"%(?![0-9A-Fa-f]{2})")


def _parse_text(text: str, where: str) -> str:
    """A string as written in a clause: ``"..."`` or bare, percent-decoded.

    Refuses what a user did not mean literally: an empty bare value (an unfinished clause or
    alternative; the empty string is ``""``), a ``"`` that does not enclose the whole value, a
    ``%`` that starts no escape, and escapes that are not UTF-8 (never replaced by U+FFFD).
    """
    if len(text) >= 2 and text[0] == text[-1] == '"':
        text = text[1:-1]
    elif not text:
        raise CapabilityError(f'{where}: empty value (the empty string is written "")')
    if '"' in text:
        raise CapabilityError(f"{where}: '\"' encloses a whole value; percent-encode it inside one (%22)")
    if _BAD_ESCAPE.search(text):
        raise CapabilityError(f"{where}: '%' starts a %XX escape (hex); write '%' as %25")
    try:
        return urllib.parse.unquote(text, errors="strict")
    except UnicodeDecodeError:
        raise CapabilityError(f"{where}: percent-escapes must spell UTF-8 text") from None


def _parse_scalar(text: str, where: str) -> Scalar:
    """A value as written in a clause: a boolean, a number, or text (``_parse_text``).

    A number with a fraction or an exponent that no float holds as written is refused
    (``_json.exact_float``): read rounded, ``n>=9007199254740993.0`` was ``n>=2**53`` and allowed
    ``n=2**53`` (before review R55), as ``--args`` refuses such an argument."""
    if text in ("true", "false"):
        return text == "true"
    if _NUMBER.fullmatch(text):
        if not any(c in text for c in ".eE"):
            try:
                return _check_value(int(text), where)
            except ValueError:  # past the 4,300 digits Python reads (review R83: a bare ValueError)
                raise CapabilityError(
                    f"{where}: an integer of {len(text.lstrip('-'))} digits is more than can be read"
                ) from None
        number = exact_float(text)
        if isinstance(number, Inexact):
            raise CapabilityError(
                f"{where}: {text[:40]} is a number no float holds as written (it would be read as "
                f"{float(text)!r}); write it with fewer digits, as an integer, or quoted as text"
            )
        return _check_value(number, where)
    return _parse_text(text, where)


def _clauses(query: str) -> dict[str, dict[str, Any]]:
    """The operators of each field that the clauses of ``query`` (after ``?``) give, the mapping
    ``Capability.of`` takes; ``CapabilityError`` naming the clause, which ``parse_capability``
    prefixes with the whole line once. Until review R83 the line was quoted into a message for
    each clause read, refused or not: quadratic, 1.4 s for a line of 57,344 characters."""
    ops: dict[str, dict[str, Any]] = {}
    for clause in query.split("&"):
        match = _CLAUSE.fullmatch(clause)
        if not match:
            raise CapabilityError(f"cannot read clause {quoted(clause, _QUOTED_TEXT)} (FIELD OP VALUE)")
        name, op, raw = match["field"], match["op"], match["value"]
        where = f"clause {quoted(clause, _QUOTED_TEXT)}"
        spec = ops.setdefault(name, {})
        if op == "=":
            if raw[:1] in ("=", "<", ">"):
                raise CapabilityError(
                    f"{where}: '={raw[0]}' is not an operator (use "
                    "=, <, <=, >, >=, ^=); quote a value that starts with it"
                )
            values = [_parse_scalar(v, where) for v in raw.split("|")]
            key, value = ("eq", values[0]) if len(values) == 1 else ("in", values)
        elif op == "^=":
            if not raw:
                raise CapabilityError(
                    f'{where}: an empty prefix matches every string; write ^="" if that is meant'
                )
            if "|" in raw:
                raise CapabilityError(
                    f"{where}: '|' separates the values of a one-of, and a prefix is one string; "
                    "give one prefix, or percent-encode a '|' in it as %7C"
                )
            key, value = "prefix", _parse_text(raw, where)
        else:
            key = {"<": "lt", "<=": "le", ">": "gt", ">=": "ge"}[op]
            value = _parse_scalar(raw, where)
        if key in spec:
            raise CapabilityError(f"{name} {op} given twice")
        spec[key] = value
    return ops


def parse_capability(text: str) -> Capability:
    """Parse ``tool:payments.refund?amount<=500&currency=EUR|USD``.

    Grammar: ``RESOURCE [ "#" ACTION ] [ "?" CLAUSE ( "&" CLAUSE )* ]`` where a clause is
    ``FIELD=V`` (equals), ``FIELD=V1|V2`` (one of), ``FIELD<N``, ``<=``, ``>``, ``>=``, or
    ``FIELD^=PREFIX``. Values that look like numbers are numbers, ``true``/``false`` are
    booleans; quote with ``"..."`` to force a string; percent-encode ``&``, ``|``, ``"``, ``%``.
    Several clauses on one field are a conjunction.

    Raises ``CapabilityError`` for anything outside the grammar rather than guess: an empty
    action or clause list (``tool:x#``, ``tool:x?``), an empty value or alternative (``a=``,
    ``a=1|``: the empty string is ``""``), an empty prefix (``a^=``, which would match every
    string: ``a^=""`` says so), a bare ``|`` in a prefix (``a^=x|y``: a prefix is one string;
    ``%7C`` is a literal one), an equals value starting with ``=``, ``<`` or ``>`` (``a==1``,
    ``a=<5``: a misspelled operator; quote or escape such a value), a stray ``"`` and a ``%``
    that is not a UTF-8 percent-escape. A character in a clause that is not printable (a control
    character, a bidi override or isolate, another invisible format character, a line separator)
    is refused where it stands, written as itself: the one-line form is typed text, where such
    a character hides or reorders what a reader sees (until review R56 ``note=\\x1b[31m`` was
    signed into a grant). Percent-escaped (``%1B``) it is read, as ``format_capability`` writes it; the
    structured form (``Capability.of``) takes any text.
    """
    if not isinstance(text, str) or not text or len(text) > MAX_CAPABILITY_TEXT:
        raise CapabilityError(
            f"a capability is a non-empty string of at most {MAX_CAPABILITY_TEXT} characters"
        )
    shown = quoted(text, _QUOTED_TEXT)
    # Looked for in the clauses: the resource and the action are refused as not canonical anyway.
    clauses = text.find("?") + 1
    hidden = next((i for i, c in enumerate(text[clauses:], clauses) if not_printable(c)), None)
    if clauses and hidden is not None:
        raise CapabilityError(
            f"capability {shown}: holds {character_named(text[hidden])} at character {hidden + 1}; "
            "percent-encode it in a value (%XX, UTF-8), or use the structured form"
        )
    head, has_query, query = text.partition("?")
    resource, has_action, action = head.partition("#")
    if has_action and not action:
        raise CapabilityError(f"capability {shown}: '#' with no action after it")
    try:
        ops = _clauses(query) if has_query else {}
    except CapabilityError as exc:
        raise CapabilityError(f"capability {shown}: {exc}") from None
    kind = resource.partition(":")[0]
    return Capability.of(resource, action or DEFAULT_ACTIONS.get(kind), ops)


def _format_scalar(value: Scalar) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    quoted = urllib.parse.quote(value, safe="")
    plain = (
        value != "" and not _NUMBER.fullmatch(value) and value not in ("true", "false") and quoted == value
    )
    return value if plain else f'"{quoted}"'


def format_capability(cap: Capability) -> str:
    """The one-line form; ``parse_capability(format_capability(c)) == c`` for every capability
    whose form is at most ``MAX_CAPABILITY_TEXT`` characters, which every capability a grant token
    carries is (a longer one, only a policy's rule, is written, and refused by the parser)."""
    kind = cap.resource.partition(":")[0]
    text = cap.resource + ("" if cap.action == DEFAULT_ACTIONS.get(kind) else f"#{cap.action}")
    clauses: list[str] = []
    symbols: dict[str, str] = {"lt": "<", "le": "<=", "gt": ">", "ge": ">="}
    for name, c in cap.constraints:
        for op, value in c.to_dict().items():
            if op == "eq":
                clauses.append(f"{name}={_format_scalar(value)}")
            elif op == "in":
                values = value if len(value) > 1 else value * 2  # `a=x|x` keeps a one-value set a set
                clauses.append(f"{name}=" + "|".join(_format_scalar(v) for v in values))
            elif op == "prefix":
                clauses.append(f"{name}^=" + (urllib.parse.quote(value, safe="") or '""'))
            else:
                clauses.append(f"{name}{symbols[op]}{_format_scalar(value)}")
    return text + ("?" + "&".join(clauses) if clauses else "")
