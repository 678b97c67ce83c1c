"""Loading a policy file: safe YAML, schema validation, references, keys; every error located.

The result is a ``Policy``: the validated document plus what evaluation and lint need compiled
once (capabilities per role, resolved keys, where each rule is in the file).
"""

from __future__ import annotations

import difflib
import functools
import hashlib
import itertools
import json
import math
import operator
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from types import UnionType
from typing import Any, Union, get_args, get_origin

from pydantic import BaseModel, ValidationError
from pydantic.fields import FieldInfo
from pydantic_core import ErrorDetails

from agentgate import _confusables
from agentgate._durations import LONG_DURATION, duration_seconds
from agentgate._names import did_you_mean
from agentgate._shown import bounded, not_printable
from agentgate._yaml import (
    MAX_QUOTED,
    Locations,
    Mark,
    dotted_path,
    load_yaml,
    mark_at,
    null_written,
    read_source,
    shortened,
)
from agentgate.capabilities import (
    DEFAULT_ACTIONS,
    MAX_NAME_LENGTH,
    Capability,
    Constraint,
    canonical_resource,
    parse_capability,
)
from agentgate.errors import MAX_QUOTING, CapabilityError, InputError, KeyFileError, PolicyError
from agentgate.keys import as_path, is_key_text, load_public_key, looks_like_key
from agentgate.policy import _schema as schema

MAX_POLICY_BYTES = 8 * 1024 * 1024
MAX_CONSTRAINT_TEXT = 1024
"""Characters of one text value of a constraint (``eq``, a member of ``in``, ``prefix``)."""
MAX_CONSTRAINT_CHARS = 32_768
"""Characters of one constraint's values together, written as decisions quote them (JSON): a
rule's constraints are repeated in its label, in every reason and audit entry that names it."""
MAX_ROLES_HELD = 256
"""A role and the roles it inherits, directly or not: at most this many (lint reads every role's
rules with those of the roles it inherits, so the work is at most this many times the roles)."""
MAX_RULES_ON_ONE_RESOURCE = 64
"""Rules a role holds, inherited ones included, on any one resource pattern: at most this many
(``shadowed_rule`` compares a rule with those on its pattern and on each wildcard pattern over it;
a decision on a resource reads, of each role held, those on each pattern naming it). Rules on
different patterns are not added up; a principal listing several roles reads those of each."""


_SYMBOLS = {"eq": "=", "lt": "<", "le": "<=", "gt": ">", "ge": ">="}


def describe_constraint(name: str, constraint: Constraint) -> str:
    """``amount > 0 and amount <= 2000``, ``currency in ["EUR", "USD"]``, ``url starts with "https://"``.

    Values are written as JSON: text quoted and escaped, so that ``"1"`` does not read as the
    number 1 and a prefix holding a quote cannot close its own quotes and read as more operators."""
    parts = []
    for op, value in constraint.to_dict().items():
        if op == "in":
            parts.append(f"{name} in [{', '.join(json_text(v) for v in value)}]")
        elif op == "prefix":
            parts.append(f"{name} starts with {json_text(value)}")
        else:
            parts.append(f"{name} {_SYMBOLS[op]} {json_text(value)}")
    return " and ".join(parts)


def json_text(value: object) -> str:
    """``value`` as JSON, each character that is not printable (a bidi control, a line
    separator, NEL, a zero-width space) written as its escape, as JSON already writes a C0
    control: the same JSON value, where until review R61 they were written raw into the rule's
    label, which decisions, audit entries and lint messages quote."""
    text = json.dumps(value, ensure_ascii=False)
    if text.isprintable():
        return text
    return "".join(json.dumps(c)[1:-1] if not_printable(c) else c for c in text)


def describe(capability: Capability) -> str:
    """A capability in words: ``tool:payments.refund where amount <= 2000 and currency in ["EUR"]``."""
    default = DEFAULT_ACTIONS.get(capability.resource.partition(":")[0])
    action = "" if capability.action == default else f" ({capability.action})"
    if not capability.constraints:
        return f"{capability.resource}{action}"
    where = " and ".join(describe_constraint(n, c) for n, c in capability.constraints)
    return f"{capability.resource}{action} where {where}"


_EXACT_OPERATORS = ("eq", "lt", "le", "gt", "ge")


def _exact_hint(text: str, value: float) -> str:
    """How to write the number ``text``, read as ``value`` (no float holds it), exactly: as the
    integer it is, when whole and of a size a constraint holds, else with fewer digits."""
    try:
        number = Decimal(text.replace("_", ""))
        whole = number == number.to_integral_value() and number.adjusted() < 19
    except ArithmeticError:  # text only PyYAML reads (``!!float -+1.5``): decimal.InvalidOperation
        whole = False
    if whole:
        return f"write it exactly, as the integer {int(number)} (integers compare exactly at any size)"
    return (
        f"write the number you mean with fewer digits ({value!r} if you mean the number it would "
        "be read as): a float holds 15 to 17 significant digits"
    )


def _rule_name(loc: Sequence[str | int]) -> str:
    """``role r rule 2, argument path`` (or ``role r delegation rule 1``, ``approval gate g``)
    for the location of a constraint, as the policy's words name it. An argument name that is
    empty or holds a character that is not printable (a gate's ``when`` names are any text, and
    a rule's constraints are compiled before its names are checked) is quoted as the location
    path quotes it (``dotted_path``, which ``_constraint``'s errors write too): until review R86
    ``a\nb`` was written raw, the message two lines."""
    arg = dotted_path(loc[-1:])
    if loc[0] == "approvals":
        return f"approval gate {loc[1]}, argument {arg}"
    delegation = "delegation " if loc[2] == "delegation" else ""
    index = loc[-3]
    assert isinstance(index, int)
    return f"role {loc[1]} {delegation}rule {index + 1}, argument {arg}"


def _closure(roles: Mapping[str, schema.Role], role: str) -> Iterator[str]:
    """``role``, then every role it inherits, depth first (pre-order, parents in the order
    written), each once; a name that is no role is skipped. Lazy, so a caller may stop early
    (``_Compiler._held`` follows at most ``MAX_ROLES_HELD``); linear in what it reaches."""
    seen: set[str] = set()
    stack = [role]
    while stack:
        name = stack.pop()
        if name in seen or name not in roles:
            continue
        seen.add(name)
        yield name
        stack.extend(reversed(roles[name].inherits))


def _most_inherited(base: Sequence[Counter[str]], rest: Sequence[Counter[str]]) -> tuple[str, int]:
    """Of the patterns ``rest`` names, one ``base`` and ``rest`` together (the rules of some roles,
    counted by pattern) hold the most rules on, and that count; ``("", 0)`` for none.

    ``base`` is the rule-holding closure of one role already checked, so it holds at most
    ``MAX_RULES_ON_ONE_RESOURCE`` rules on any pattern only it names: only the patterns of
    ``rest`` are counted, each looked up in each of ``base`` by a set intersection, which walks
    the smaller side. So a common role (or a hub of many) inherited with each of many small
    ones is not counted again at each (until review R92's second regression review a hub's
    closure was, all but its largest role: patterns times tenants)."""
    total: Counter[str] = Counter()
    for count in rest:
        total.update(count)
    for count in base:
        for pattern in total.keys() & count.keys():
            total[pattern] += count[pattern]
    return max(total.items(), key=operator.itemgetter(1), default=("", 0))


@dataclass(frozen=True)
class RuleRef:
    """One capability rule of a role, and where it is written."""

    role: str
    """The role whose ``capabilities`` list holds the rule."""
    index: int
    """Its position in that list."""
    capability: Capability
    line: int | None = None
    delegation: bool = False
    """Whether the rule is in the role's ``delegation.capabilities``, not its ``capabilities``."""
    label: str = field(init=False, repr=False, compare=False)
    """``role R rule N: CAPABILITY (line L)`` (``role R delegation rule N: ...`` for a delegation
    rule), formatted once (decisions and lint quote it)."""
    allowed_by: str = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        where = f" (line {self.line})" if self.line is not None else ""
        which = "delegation rule" if self.delegation else "rule"
        label = f"role {self.role} {which} {self.index + 1}: {describe(self.capability)}{where}"
        object.__setattr__(self, "label", label)
        object.__setattr__(self, "allowed_by", "allowed by " + label)

    def __str__(self) -> str:
        return self.label


@dataclass(frozen=True, eq=False)
class Policy:
    """A loaded, validated policy. Build with ``load_policy``, ``parse_policy`` or ``deny_all``.

    Compared and hashed by identity; ``digest`` identifies the content.
    """

    document: schema.PolicyDocument
    source: str | None = None
    """The file it came from, as given."""
    digest: str = ""
    """The policy hash recorded in audit entries (hex; ``policy_digest``): SHA-256 of the file's
    bytes, or, when the policy names key files, of those bytes' hash and the keys they resolved to."""
    locations: Locations = field(default_factory=Locations, repr=False, compare=False)
    principal_dids: Mapping[str, str | None] = field(default_factory=dict)
    """Principal name -> its did:key (from ``did`` or its key file), ``None`` without a key."""
    anchor_dids: Mapping[str, str | None] = field(default_factory=dict)
    """Trust anchor name -> its did:key, ``None`` without a key."""
    rules: Mapping[str, tuple[RuleRef, ...]] = field(default_factory=dict)
    """Role -> its own capability rules, compiled."""
    delegable: Mapping[str, tuple[RuleRef, ...]] = field(default_factory=dict)
    """Role -> the capabilities its delegation rule lets it hand on, compiled."""
    gate_conditions: Mapping[str, tuple[tuple[str, Constraint], ...]] = field(default_factory=dict)
    """Approval gate -> its ``when`` constraints, compiled."""
    agent_roles: frozenset[str] = frozenset()
    """Roles declared ``kind: agent`` or held (directly) by an agent principal."""

    @classmethod
    def deny_all(cls) -> Policy:
        """The policy used when none is given: no principals, no roles; every call is denied."""
        document = schema.PolicyDocument(version=1)
        return cls(document, None, hashlib.sha256(b"").hexdigest())

    def line_of(self, *loc: str | int, key: bool = False) -> int | None:
        """The source line of a location path (its key's line if ``key``), where known."""
        mark = self.locations.of(loc, key=key)
        return mark.line if mark is not None else None

    def role_closure(self, role: str) -> tuple[str, ...]:
        """``role`` followed by every role it inherits, depth first (pre-order, parents in the order
        written), each once. Iterative and linear in the roles and ``inherits`` entries reached, so
        an inheritance chain thousands deep, or a lattice of diamonds, costs no more than its size."""
        return tuple(_closure(self.document.roles, role))

    @functools.cached_property
    def ruling_roles(self) -> frozenset[str]:
        """The roles that hold a rule, themselves or through ``inherits``: only these decide a
        call, so only these bound a grant to their holder (its lifetime, budget and delegation
        depth) and what it hands on (review R96: until then a role holding none, which allows
        nothing, lifted every one of those bounds for its holder)."""
        return frozenset(
            name
            for name in self.document.roles
            if any(self.rules.get(held) for held in self.role_closure(name))
        )

    def effective_rules(self, role: str) -> tuple[RuleRef, ...]:
        """The rules a holder of ``role`` has: its own, then those of the roles it inherits."""
        return tuple(rule for name in self.role_closure(role) for rule in self.rules.get(name, ()))

    def principal_roles(self, principal: str) -> tuple[str, ...]:
        """Every role a principal holds, inherited ones included, each once, in declaration order."""
        out: dict[str, None] = {}
        entry = self.document.principals.get(principal)
        for role in entry.roles if entry is not None else ():
            out.update(dict.fromkeys(self.role_closure(role)))
        return tuple(out)

    def is_agent_role(self, role: str) -> bool:
        """A role declared ``kind: agent`` or held (directly) by any agent principal."""
        return role in self.agent_roles


def policy_digest(
    file_digest: str, anchors: Mapping[str, str | None], principals: Mapping[str, str | None]
) -> str:
    """The policy hash of a policy that names key files (``key:``): SHA-256 (hex) of the canonical
    JSON (sorted keys, no whitespace, UTF-8) of ``{"file": F, "principals": P, "trust_anchors": A}``,
    where F is the SHA-256 (hex) of the file's bytes and P and A map every principal and trust
    anchor name to the did:key it resolved to (``null`` without a key). The text alone does not
    say which keys its key files hold: two policies of equal text trusting different keys get
    different hashes. A policy that names no key file is identified by F alone (docs/audit-format.md).
    """
    document = {"file": file_digest, "principals": dict(principals), "trust_anchors": dict(anchors)}
    text = json.dumps(document, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def load_policy(path: str | Path, *, key_dir: str | Path | None = None) -> Policy:
    """Load and validate a policy file.

    Key files named in the policy are read relative to ``key_dir`` when given, else to the
    policy file's directory. Raises ``PolicyError`` with file, line, column, what was expected
    and a hint for anything wrong: unreadable or empty file (a FIFO, device or directory, or
    more than ``MAX_POLICY_BYTES``, is refused without waiting or reading it all), malformed YAML, duplicate keys,
    tags, alias bombs, unknown fields, wrong types, unknown references, bad capabilities, and
    key files that are missing or unreadable.
    """
    path = as_path(path, "policy", PolicyError)  # None or a number: no TypeError from pathlib
    base = as_path(key_dir, "key files", PolicyError) if key_dir is not None else None
    data = read_source(path, PolicyError, limit=MAX_POLICY_BYTES, what="policy")
    return parse_policy(data, source=str(path), base_dir=base if base is not None else path.resolve().parent)


def _version_as_written(version: object) -> str:
    """A policy's ``version`` value as its error names it: null and the booleans as YAML and JSON
    write them (until review R70's second reading Python's ``None`` and ``True``, which the file
    never held), anything else quoted shortened."""
    if version is None:
        return "null (the key has no value)"
    if isinstance(version, bool):
        return "true" if version else "false"
    return shortened(repr(version))


def parse_policy(
    data: bytes | str, *, source: str = "<policy>", base_dir: str | Path | None = None
) -> Policy:
    """Validate a policy given as text; see ``load_policy``. Key files resolve against ``base_dir``.

    ``data`` is the file's text or bytes; anything else (``None``, a number, a mapping already
    parsed) raises ``PolicyError``, as does a ``source`` that is not text or a ``base_dir`` that
    is not a path."""
    if not isinstance(source, str):
        raise PolicyError(f"the policy's source name must be a string, got {type(source).__name__}")
    if not isinstance(data, str | bytes | bytearray):
        raise PolicyError(
            f"a policy is YAML text (str or bytes), got {type(data).__name__}",
            file=source,
            hint="load a file with load_policy; pass the text of a policy, not the parsed mapping",
        )
    base = as_path(base_dir, "key files", PolicyError) if base_dir is not None else None
    try:
        raw = data.encode("utf-8") if isinstance(data, str) else bytes(data)
    except UnicodeEncodeError as exc:  # a lone surrogate: text no file can hold
        raise PolicyError(
            f"not UTF-8 text (character {exc.start})",
            file=source,
            expected="text that UTF-8 can encode",
            hint="remove the lone surrogate (\\ud800-\\udfff)",
        ) from None
    if len(raw) > MAX_POLICY_BYTES:
        raise PolicyError(
            f"policy is larger than {MAX_POLICY_BYTES} bytes", file=source, hint="split it or trim it"
        )
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        before = raw[: exc.start].decode("utf-8")  # what precedes the first bad byte decodes
        at = mark_at(before, len(before))
        raise PolicyError(
            f"not UTF-8 text (byte {exc.start})",
            file=source,
            line=at.line,
            column=at.column,
            expected="a UTF-8 YAML file",
            hint="re-save as UTF-8",
        ) from None
    content, locations = load_yaml(text, source=source)
    if content is None:
        written = null_written(text)
        if written is None:  # no value at all: nothing, comments, a bare ``---``
            message, said, at = "the policy file is empty", "an empty policy", Mark(1, 1)
        else:  # ``~``, ``null``: located where it is written
            message, said = f"the policy is null ({written!r}), not a mapping", "a policy of null"
            at = locations.of(()) or Mark(1, 1)
        raise PolicyError(
            message,
            file=source,
            line=at.line,
            column=at.column,
            expected="a mapping starting with 'version: 1'",
            hint=f"{said} would deny everything; write 'version: 1' and the roles you mean",
        )
    if not isinstance(content, dict):
        raise PolicyError(
            f"the policy is {_yaml_kind(content)}, not a mapping",
            file=source,
            line=1,
            column=1,
            expected="a mapping starting with 'version: 1'",
            hint="top-level keys are version, settings, trust_anchors, principals, tools, roles, ...",
        )
    if "version" not in content:  # said in words: until review R70, "policy version None"
        raise PolicyError(
            "missing policy version: the file has no 'version' key",
            file=source,
            line=1,
            column=1,
            expected=f"version: {schema.SCHEMA_VERSION}",
            hint=f"add 'version: {schema.SCHEMA_VERSION}' at the top of the file",
        )
    version = content["version"]
    if type(version) is not int or version != schema.SCHEMA_VERSION:  # not True, not 1.0
        mark = locations.of(("version",))
        raise PolicyError(
            # The value as written may be megabytes long (a list, a text): quoted shortened, as
            # keys are, so that the error stays one readable line (until review R56 it was whole).
            f"unsupported or missing policy version {_version_as_written(version)}",
            file=source,
            line=mark.line if mark else None,
            column=mark.column if mark else None,
            expected=f"version: {schema.SCHEMA_VERSION}",
            hint=f"write 'version: {schema.SCHEMA_VERSION}': this agentgate reads version "
            f"{schema.SCHEMA_VERSION} policies only",
        )
    try:
        document = schema.PolicyDocument.model_validate(content)
    except ValidationError as exc:
        raise _schema_error(exc, source, locations) from None
    return _Compiler(document, source, locations, base if base is not None else Path.cwd()).compile(
        hashlib.sha256(raw).hexdigest()
    )


# --- schema errors ---------------------------------------------------------------------------------

_EXPECTED = {
    "int_type": "an integer",
    "float_type": "a number",
    "string_type": "a string",
    "bool_type": "true or false",
    "dict_type": "a mapping",
    "list_type": "a list",
    "model_type": "a mapping",
    "missing": "this field",
    "extra_forbidden": "one of the fields this section defines",
    "literal_error": "one of the allowed values",
    "string_pattern_mismatch": "a name of letters, digits, '_', '.', '-'",
}


def _all_field_names() -> list[str]:
    names: set[str] = set()
    for model in vars(schema).values():
        if isinstance(model, type) and issubclass(model, BaseModel):
            names.update(_written_fields(model))
    return sorted(names)


def _written_fields(model: type[BaseModel]) -> list[str]:
    """The fields of ``model`` as a policy writes them (a field's alias where it has one)."""
    return [info.alias or name for name, info in model.model_fields.items()]


def _schema_error(exc: ValidationError, source: str, locations: Locations) -> PolicyError:
    errors = exc.errors(include_url=False)
    first: ErrorDetails = errors[0]
    # A value refused by every member of a union (``eq: .nan`` is no string, no integer, no finite
    # float, no boolean) gives one error per member, the first a mere type mismatch: report the
    # member's error that says what is wrong with the value, and count the union as one error.
    alternatives = [e for e in errors if _union_member(e, first)]
    union_expected = None
    if len(alternatives) > 1:
        first = next((e for e in alternatives if not e["type"].endswith("_type")), first)
        errors = [first, *(e for e in errors if e not in alternatives)]
        if first["type"].endswith("_type"):  # no member came close: name them all
            union_expected = " or ".join(_EXPECTED.get(e["type"], e["type"]) for e in alternatives)
    # A required field written misspelt (``approver:`` for ``approvers:``) is both missing and an
    # unknown field of the same mapping: report the field as written, suggesting the missing one,
    # not "add it" at the mapping's first key, and count the pair as one error wherever it comes
    # (review R72).
    meant = _misspelt_required(errors)
    paired = {id(m) for m, _ in meant.values()}
    written = next((e for m, e in meant.values() if m is first), first)
    errors = [written, *(e for e in errors if e is not written and id(e) not in paired)]
    first = written
    missing = next((m["loc"][-1] for m, e in meant.values() if e is first), None)
    loc = [part for part in first["loc"] if isinstance(part, str | int)]
    data_loc = _data_path(loc, locations)
    kind = first["type"]
    # A refused mapping key (pydantic's location ends in "[key]", e.g. a role named "a b") and an
    # unknown field are located at the key, not at the value on the line below it.
    mark = locations.of(data_loc, key=kind == "extra_forbidden" or loc[-1:] == ["[key]"])
    dotted = dotted_path(data_loc) if data_loc else "<top>"
    hint = "see docs/policy-reference.md for this section"
    if kind == "extra_forbidden":
        bad = str(loc[-1])
        # The section's own fields are the ones to suggest: drawn from every section's, the hint
        # for a model's ``max_tokens:`` was a settings field, refused here too, and a principal's
        # ``role:`` was "a field of another section" beside its own ``roles`` (review R88).
        own = _section_fields(loc[:-1])
        known = _all_field_names()
        close = did_you_mean(bad, known if own is None else own)
        elsewhere = bad in known and (own is None or bad not in own)
        if missing is not None:
            hint = f"did you mean {missing!r}?"
            if elsewhere:  # no mere typo: the writer needs to know both (review R72)
                hint += f" {bad!r} is a field of another section: see docs/policy-reference.md"
        elif close and not (own is None and elsewhere):
            hint = close
        elif elsewhere:  # never "did you mean" the name itself (review R63)
            hint = f"{bad!r} is a field of another section, not of this one: see docs/policy-reference.md"
        else:
            hint = "remove it; unknown fields are refused, never ignored"
        message = f"unknown field {dotted}"
    elif kind == "missing":
        message = f"{dotted_path(loc)} is required"
        hint = "add it"
    elif kind == "value_error":  # a validator's own words: said once, without pydantic's prefix
        message = f"{dotted}: {first['msg'].removeprefix('Value error, ')}"
    elif kind in ("model_type", "dict_type"):  # not pydantic's "instance of <its class name>"
        message = f"{dotted}: got {_yaml_kind(first.get('input'))}"
        hint = _mapping_hint(data_loc, first.get("input")) or hint
    elif kind == "string_pattern_mismatch":  # the expected text says it, not pydantic's regex
        message = f"{dotted}: {str(first.get('input'))[:100]!r} is not a valid name"
    else:
        message = f"{dotted}: {first['msg']}"
        text = first.get("input")
        if kind in ("int_type", "float_type", "bool_type") and isinstance(text, str):
            hint = _seconds_hint(loc, text, kind) or _text_hint(kind, text)
    more = len(errors) - 1
    if more:
        message += f" (and {more} more error{'s' if more > 1 else ''})"
    return PolicyError(
        bounded(message, MAX_QUOTING),
        file=source,
        line=mark.line if mark else None,
        column=mark.column if mark else None,
        expected=union_expected
        or _EXPECTED.get(kind)
        or (None if kind == "value_error" else first["msg"].removeprefix("Input should be ").strip() or None),
        hint=hint,
    )


def _misspelt_required(errors: list[ErrorDetails]) -> dict[int, tuple[ErrorDetails, ErrorDetails]]:
    """Each required field left out that an unknown field of the same mapping spells closely
    (``approver:`` for ``approvers:``), as ``id(unknown error) -> (missing error, unknown
    error)``: one mistake each, the missing field paired with the unknown field closest to it,
    an unknown field paired once. The unknown fields are looked up by their mapping, so that a
    policy of thousands of mappings each with an error takes time in proportion to its errors
    (review R84), not to their square."""
    unknown_in: dict[tuple[str | int, ...], list[ErrorDetails]] = {}
    for error in errors:
        if error["type"] == "extra_forbidden" and error["loc"]:
            unknown_in.setdefault(tuple(error["loc"][:-1]), []).append(error)
    pairs: dict[int, tuple[ErrorDetails, ErrorDetails]] = {}
    for missing in errors:
        name = missing["loc"][-1] if missing["type"] == "missing" and missing["loc"] else None
        if not isinstance(name, str):
            continue
        unknown = [
            e
            for e in unknown_in.get(tuple(missing["loc"][:-1]), ())
            if id(e) not in pairs and difflib.get_close_matches(str(e["loc"][-1]), [name], n=1)
        ]
        if unknown:
            best = max(unknown, key=lambda e: difflib.SequenceMatcher(None, str(e["loc"][-1]), name).ratio())
            pairs[id(best)] = (missing, best)
    return pairs


def _yaml_kind(value: object) -> str:
    """What a YAML value is, in YAML's words (for a value where a mapping belongs)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "text"
    if isinstance(value, list | tuple):
        return "a list"
    return type(value).__name__


_TYPE_NAMES = frozenset({"string", "integer", "number", "boolean"})


def _mapping_hint(loc: Sequence[str | int], value: object) -> str | None:
    """What to write for text where a mapping belongs, where the text says what was meant: a
    capability in the one-line form ``--allow`` takes (docs/concepts.md writes them so), an
    argument declared by its type's name alone (review R73)."""
    if not isinstance(value, str):
        return None
    if len(loc) >= 2 and loc[-2] == "capabilities" and isinstance(loc[-1], int) and loc[0] == "roles":
        try:
            capability = parse_capability(value)
        except CapabilityError:
            return "write it as a mapping: {resource: tool:NAME, constraints: {ARGUMENT: {OPERATOR: VALUE}}}"
        return f"write it as a mapping: {_flow_mapping(capability)} (the one-line form is the command line's)"
    if len(loc) == 4 and loc[0] == "tools" and loc[2] == "args" and value in _TYPE_NAMES:
        return f"write {_yaml_key(str(loc[3]))}: {{type: {value}}}"
    return None


def _yaml_key(name: str) -> str:
    """``name`` as YAML reads it back, for a hint: as it is if printable (``shortened``), else
    double-quoted, its escapes written out (``_yaml_escape``); past ``MAX_QUOTED`` characters so
    written, cut inside the quotes and its length said after them. Until review R84 the quoted
    name was cut, closing quote and all, and was no YAML."""
    if name.isprintable():
        return shortened(name)
    kept = 0
    size = 0
    for char in name[:MAX_QUOTED]:
        size += len(_yaml_escape(char))
        if size > MAX_QUOTED:
            break
        kept += 1
    quoted = _yaml_quoted(name[:kept])
    return quoted if kept == len(name) else f"{quoted}... ({len(name)} characters)"


def _yaml_quoted(text: str) -> str:
    """``text`` as a double-quoted YAML scalar that both libyaml and PyYAML read back as it, each
    character written by ``_yaml_escape``."""
    return '"' + "".join(_yaml_escape(char) for char in text) + '"'


def _yaml_escape(char: str) -> str:
    """``char`` as a double-quoted YAML scalar writes it: JSON's escape for a character of the
    Basic Multilingual Plane (YAML's double-quoted escapes include JSON's); beyond it, the
    character itself where printable, else YAML's ``\\UXXXXXXXX``. Until review R84 a character
    beyond U+FFFF was written as JSON's surrogate pair (``\\ud83d\\ude00``), which libyaml
    refuses (``ScannerError``) and PyYAML reads as two lone surrogates, not the name."""
    if ord(char) <= 0xFFFF:
        return json.dumps(char)[1:-1]
    return char if char.isprintable() else f"\\U{ord(char):08X}"


def _flow_mapping(capability: Capability) -> str:
    """A capability as a YAML flow mapping that loads as it: strings double-quoted
    (``_yaml_quoted``), other values written as JSON, which YAML reads as written; the action
    left out where it is the resource kind's default. Until review R84 strings were written as
    JSON too, a character beyond U+FFFF as a surrogate pair that libyaml refuses."""
    parts = [f"resource: {_yaml_quoted(capability.resource)}"]
    if capability.action != DEFAULT_ACTIONS.get(capability.resource.partition(":")[0]):
        parts.append(f"action: {_yaml_quoted(capability.action)}")
    if capability.constraints:
        constraints = ", ".join(
            f"{name}: {{{', '.join(f'{op}: {_yaml_value(v)}' for op, v in c.to_dict().items())}}}"
            for name, c in capability.constraints
        )
        parts.append(f"constraints: {{{constraints}}}")
    return "{" + ", ".join(parts) + "}"


def _yaml_value(value: object) -> str:
    """A constraint's value for ``_flow_mapping``: a string by ``_yaml_quoted``, a list item by
    item, anything else as JSON."""
    if isinstance(value, str):
        return _yaml_quoted(value)
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_yaml_value(item) for item in value) + "]"
    return json.dumps(value)


def _seconds_hint(loc: Sequence[str | int], text: str, kind: str) -> str | None:
    """For a field in seconds (``ttl_s``, ``expiry_s``, ``timeout_s``) given a duration with a
    unit, as the command line's ``--ttl 8h`` takes it: the seconds to write, read as the command
    line reads it (``1h30m`` too), where the field takes them; else the field's own bounds and what
    the duration is in seconds (``ttl_s: 0h``: more than 0). A field of ``kind`` ``int_type`` is
    whole seconds, a float field seconds. Until review R86 every field was told a lifetime's range:
    ``backoff_max_s: 2d`` to write 172800, above its 86400, and ``timeout_s: 11000d``, which it
    takes, that it was more than 10 years. Blanks in the text (``1h 30m``, ``1 h``), which the
    command line refuses, are left out, and the duration is quoted without them, in the form the
    command line reads (``5400 for 1h30m``): until review R91 it was quoted as written, a duration
    ``--ttl`` refuses (review R84 had made that one line, a space for each run of blanks)."""
    name = loc[-1] if loc else None
    written = "".join(text.split())
    if not (isinstance(name, str) and name.endswith("_s") and LONG_DURATION.fullmatch(written)):
        return None
    info = _schema_field(loc)
    if info is None:
        return None
    unit = "whole seconds" if kind == "int_type" else "seconds"
    bounds = [
        (getattr(m, op), words, holds)
        for m in info.metadata
        for op, words, holds in _BOUNDS
        if hasattr(m, op)
    ]
    limits = "".join(
        f"{' and' if i else ','} {words} {int(bound) if bound == int(bound) else bound}"
        for i, (bound, words, _) in enumerate(bounds)
    )
    head = f"write a plain number, without a unit: {name} is {unit}"
    try:
        seconds = duration_seconds(written)
    except InputError as refused:  # 1h1h, or longer than any number of seconds a field takes
        return f"{head}{limits}; {refused}"
    if all(holds(seconds, bound) for bound, _, holds in bounds):
        return f"{head}, {seconds} for {written}"
    return f"{head}{limits} ({written} is {seconds})"


_BOUNDS: tuple[tuple[str, str, Callable[[Any, Any], bool]], ...] = (
    ("gt", "more than", operator.gt),
    ("ge", "at least", operator.ge),
    ("lt", "less than", operator.lt),
    ("le", "at most", operator.le),
)
"""A schema field's bounds (``Field(gt=0, le=86400)``: pydantic keeps each as an object of that
one attribute in the field's ``metadata``), how a hint words each, and what each asks."""


def _schema_field(loc: Sequence[str | int]) -> FieldInfo | None:
    """The schema's field a pydantic location path ends at (``tools.t.retry.backoff_max_s``:
    ``RetryPolicy.backoff_max_s``), reading a mapping's key or a list's index as its value type and
    an optional model as the model; ``None`` where the path ends at no field."""
    reached = _schema_at(loc)
    return reached[1] if reached is not None else None


def _section_fields(loc: Sequence[str | int]) -> list[str] | None:
    """The fields of the schema's section a pydantic location path ends at (``models.m``: those of
    ``ModelSpec``), as a policy writes them; ``None`` where the path ends at no section."""
    reached = _schema_at(loc)
    section = _unwrapped_optional(reached[0]) if reached is not None else None
    if isinstance(section, type) and issubclass(section, BaseModel):
        return _written_fields(section)
    return None


def _schema_at(loc: Sequence[str | int]) -> tuple[Any, FieldInfo | None] | None:
    """The schema's type a pydantic location path ends at, and its field where the last part names
    one (not a mapping's key or a list's index); ``None`` where the path leaves the schema."""
    annotation: Any = schema.PolicyDocument
    info: FieldInfo | None = None
    for part in loc:
        annotation = _unwrapped_optional(annotation)
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            fields = annotation.model_fields
            info = next((f for n, f in fields.items() if (f.alias or n) == part), None)
            if info is None:
                return None
            annotation = info.annotation
        elif get_origin(annotation) in (dict, list):
            annotation, info = get_args(annotation)[-1], None
        else:
            return None
    return annotation, info


def _unwrapped_optional(annotation: Any) -> Any:
    """``X`` for ``X | None``; any other type as it is."""
    members = [a for a in get_args(annotation) if a is not type(None)]
    if get_origin(annotation) in (Union, UnionType) and len(members) == 1:
        return members[0]
    return annotation


def _text_hint(kind: str, text: str) -> str:
    """The hint for text where a number or a boolean belongs: unquote it if that is what it spells."""
    if kind == "bool_type":
        if text in ("true", "True", "TRUE", "false", "False", "FALSE"):
            return "write the value unquoted"
        return "write true or false (yes, no, on and off are text, as in YAML 1.2)"
    if _reads_as_number(text, integer=kind == "int_type"):
        return "write the value unquoted"
    if any(c.isdecimal() and not c.isascii() for c in text):  # YAML's numbers are ASCII
        return "write the number with the digits 0 to 9, unquoted"
    return "write a plain number, without a unit (10:30 is text, not 630)"


_MAX_NUMBER_TEXT = 100
"""Longest quoted text read again unquoted for the hint: a number a policy holds is shorter."""


def _reads_as_number(text: str, *, integer: bool) -> bool:
    """Whether ``text``, written unquoted, reads as a finite number (an integer, if ``integer``) as
    this loader reads a value: ``"1e3"`` and ``"0x10"`` do; ``"١٠"`` (Arabic-Indic digits, which
    Python's ``float`` takes) does not, being text unquoted too (until review R84 it was told to
    unquote it, then refused with the same hint)."""
    if len(text) > _MAX_NUMBER_TEXT:
        return False
    try:
        value, _ = load_yaml(text, source="<value>")
    except PolicyError:
        return False
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    return isinstance(value, int) if integer else math.isfinite(value)


def _union_member(error: ErrorDetails, first: ErrorDetails) -> bool:
    """Whether ``error`` is another union member's error for the value ``first`` is about."""
    loc, at = error["loc"], first["loc"]
    return (
        len(loc) == len(at) and loc[:-1] == at[:-1] and loc[-1] in _UNION_MEMBERS and at[-1] in _UNION_MEMBERS
    )


_UNION_MEMBERS = frozenset({"str", "int", "float", "bool"})


def _known(names: list[str]) -> str:
    """What a reference may name: ``one of: a, b, c``, the first 20 of them and how many more."""
    if not names:
        return "one of: (none declared)"
    more = f", and {len(names) - 20} more" if len(names) > 20 else ""
    return f"one of: {', '.join(names[:20])}{more}"


def _data_path(loc: Sequence[str | int], locations: Locations) -> list[str | int]:
    """The longest prefix of a pydantic location that names a place in the data."""
    for n in range(len(loc), -1, -1):
        if tuple(loc[:n]) in locations.values or tuple(loc[:n]) in locations.keys:
            return list(loc[:n])
    return []


# --- references, capabilities, keys -----------------------------------------------------------------


class _Compiler:
    def __init__(
        self, document: schema.PolicyDocument, source: str, locations: Locations, base: Path
    ) -> None:
        self.doc = document
        self.source = source
        self.locations = locations
        self.base = base

    def error(
        self, loc: Sequence[str | int], message: str, expected: str, hint: str, *, key: bool = False
    ) -> PolicyError:
        mark = self.locations.of(loc, key=key)
        return PolicyError(
            bounded(message, MAX_QUOTING),
            file=self.source,
            line=mark.line if mark else None,
            column=mark.column if mark else None,
            expected=expected,
            hint=hint,
        )

    def compile(self, file_digest: str) -> Policy:
        doc = self.doc
        self._names()
        self._tool_arguments()
        parents_first = self._references()
        anchors = {
            name: self._did(("trust_anchors", name), a.did, a.key) for name, a in doc.trust_anchors.items()
        }
        principals = {
            name: self._did(("principals", name), p.did, p.key) for name, p in doc.principals.items()
        }
        names_key_files = any(a.key is not None for a in doc.trust_anchors.values()) or any(
            p.key is not None for p in doc.principals.values()
        )
        digest = policy_digest(file_digest, anchors, principals) if names_key_files else file_digest
        rules = {
            role: tuple(
                RuleRef(
                    role,
                    i,
                    self._capability(("roles", role, "capabilities", i), rule),
                    self._line(("roles", role, "capabilities", i)),
                )
                for i, rule in enumerate(spec.capabilities)
            )
            for role, spec in doc.roles.items()
        }
        delegable = {
            role: tuple(
                RuleRef(
                    role,
                    i,
                    self._capability(("roles", role, "delegation", "capabilities", i), rule),
                    self._line(("roles", role, "delegation", "capabilities", i)),
                    delegation=True,
                )
                for i, rule in enumerate(spec.delegation.capabilities)
            )
            for role, spec in doc.roles.items()
            if spec.delegation is not None
        }
        self._held(rules, parents_first)
        gates = {}
        for name, gate in doc.approvals.items():
            self._pattern(("approvals", name, "resource"), gate.resource)
            for arg in gate.when:
                self._argument_name(
                    ("approvals", name, "when", arg), arg, f"approval gate {name}: argument name", key=True
                )
            gates[name] = tuple(
                (arg, self._constraint(("approvals", name, "when", arg), spec))
                for arg, spec in sorted(gate.when.items())
            )
        for name, quota in doc.quotas.items():
            for i, pattern in enumerate(quota.resources):
                self._pattern(("quotas", name, "resources", i), pattern)
        agent_roles = frozenset(name for name, role in doc.roles.items() if role.kind == "agent") | frozenset(
            role for p in doc.principals.values() if p.kind == "agent" for role in p.roles
        )
        return Policy(
            doc,
            self.source,
            digest,
            self.locations,
            principals,
            anchors,
            rules,
            delegable,
            gates,
            agent_roles,
        )

    def _line(self, loc: tuple[str | int, ...]) -> int | None:
        mark = self.locations.of(loc)
        return mark.line if mark else None

    def _names(self) -> None:
        self._principal_names()
        for section, kind in (("tools", "tool"), ("models", "model"), ("gpus", "gpu")):
            for name in getattr(self.doc, section):
                try:
                    canonical_resource(f"{kind}:{name}")
                except CapabilityError as exc:
                    raise self.error(
                        (section, name),
                        str(exc),
                        f"a canonical {kind} name",
                        "use lower-case names joined by '.'",
                        key=True,
                    ) from None

    def _principal_names(self) -> None:
        """Refuse two principals whose names read as one (``_confusables.readings``: Unicode
        TR39's confusable skeletons, case folded), at the later one, naming both. The Gate takes
        an agent's name for a principal's by how it reads (``gate._checks.principal_named``), so
        it would take the two for one. Names differing only in case were refused since review
        R67; names a reader confuses otherwise (``mallory`` and ``rnallory``, ``bob1`` and
        ``bobl``) loaded until review R68. Reading alike is not transitive, so two principals
        that read apart may both be read in a third name (``bobi`` and ``bobl`` in ``bobI``):
        whether some name does is not known from their readings, so such a policy loads, and
        the Gate refuses such a name on any key (``gate._checks.principals_named``). Other
        sections' names are compared exactly; lint reports theirs (``names_differ_only_in_case``,
        ``names_read_alike``). Where the later name reads as two earlier ones, the first of them in
        code point order is named, as ``principals_named`` lists them: until review R91's second
        reading the order of a set of readings chose, which each process's hash seed set
        (``bobi``, ``bobl``, ``bobI``: "bobI and bobl read alike" in some processes, "bobI and
        bobi differ only in case" in others)."""
        first: dict[str, str] = {}
        for name in self.doc.principals:
            keys = _confusables.readings(name)
            held = [first[key] for key in keys if key in first]
            for key in keys:
                first.setdefault(key, name)
            if not held:
                continue
            earlier = min(held)
            how = "differ only in case" if name.casefold() == earlier.casefold() else "read alike"
            raise self.error(
                ("principals", name),
                f"principals {name} and {earlier} {how}: the Gate compares an agent's name with "
                "principals' names by how they read, and would take them for one",
                "principal names that read apart",
                "rename one of them (or merge the two, if one was meant)",
                key=True,
            )

    def _ref(self, loc: tuple[str | int, ...], name: str, section: str) -> None:
        known = getattr(self.doc, section)
        if name not in known:
            raise self.error(
                loc,
                f"{name!r} is not declared in {section}",
                _known(sorted(known)),
                did_you_mean(name, known) or f"declare it under {section}",
            )

    def _roles_once(
        self, loc: tuple[str | int, ...], roles: Sequence[str], owner: str, field: str = ""
    ) -> None:
        """Refuse a role listed twice in the list at ``loc``, at the repeat, naming both entries:
        ``role clerk lists role base twice in inherits (entries 1 and 2)`` (``owner`` lists it,
        in ``field``). A repeat means nothing the first entry does not, so it is a typo for
        another name (``[reader, reader]`` for ``[reader, writer]``); until review R61 it loaded
        silently. (An approver named twice is allowed: it counts once toward the quorum.)"""
        first: dict[str, int] = {}
        for i, role in enumerate(roles):
            earlier = first.setdefault(role, i)
            if earlier != i:
                raise self.error(
                    (*loc, i),
                    f"{owner} lists role {role} twice{field} (entries {earlier + 1} and {i + 1})",
                    "each role once",
                    "remove the repeat, or write the role that was meant",
                )

    def _references(self) -> list[str]:
        """Refuse a name that names nothing, a role listed twice, an inheritance cycle or a quorum
        over the approvers; return the roles, each after every role it inherits (``_cycles``)."""
        doc = self.doc
        for name, p in doc.principals.items():
            if p.tenant is not None:
                self._ref(("principals", name, "tenant"), p.tenant, "tenants")
            self._roles_once(("principals", name, "roles"), p.roles, f"principal {name}")
            for i, held in enumerate(p.roles):
                self._ref(("principals", name, "roles", i), held, "roles")
        for name, role in doc.roles.items():
            self._roles_once(("roles", name, "inherits"), role.inherits, f"role {name}", " in inherits")
            for i, parent in enumerate(role.inherits):
                self._ref(("roles", name, "inherits", i), parent, "roles")
        parents_first = self._cycles()
        for name, model in doc.models.items():
            for i, cls in enumerate(model.priority_classes):
                self._ref(("models", name, "priority_classes", i), cls, "priority_classes")
        for name, quota in doc.quotas.items():
            for section, subject in (
                ("tenants", quota.tenant),
                ("principals", quota.principal),
                ("roles", quota.role),
            ):
                if subject is not None:
                    self._ref(("quotas", name, section[:-1]), subject, section)
        for name, gate in doc.approvals.items():
            for i, approver in enumerate(gate.approvers):
                self._ref(("approvals", name, "approvers", i), approver, "principals")
            if gate.quorum > len(set(gate.approvers)):
                raise self.error(
                    ("approvals", name, "quorum"),
                    f"quorum {gate.quorum} is more than the {len(set(gate.approvers))} approvers named",
                    f"a quorum of at most {len(set(gate.approvers))}",
                    "name more approvers or lower the quorum; otherwise no call could ever be approved",
                )
        return parents_first

    def _cycles(self) -> list[str]:
        """Refuse an inheritance cycle, naming it (``a -> b -> a``) at the ``inherits`` of the
        role its search started from; return the roles, each after every role it inherits. One
        iterative depth-first search over all roles, each role finished once: linear, where
        following every path from every role took exponential time on a lattice of diamonds (30
        levels in a 2 KB file hung loading) and recursed past Python's limit on a chain a thousand
        roles deep."""
        roles = self.doc.roles
        done: dict[str, None] = {}  # the roles finished, in order: each after its parents
        for start in roles:
            if start in done:
                continue
            path, on_path = [start], {start}
            pending = [iter(roles[start].inherits)]
            while pending:
                parent = next(pending[-1], None)
                if parent is None:
                    finished = path.pop()
                    on_path.discard(finished)
                    done[finished] = None
                    pending.pop()
                    continue
                if parent in on_path:
                    cycle = [*path[path.index(parent) :], parent]
                    raise self.error(
                        ("roles", start, "inherits"),
                        "roles inherit in a cycle: " + " -> ".join(cycle),
                        "an inheritance tree",
                        "remove one of the inherits entries",
                    )
                if parent not in done:
                    path.append(parent)
                    on_path.add(parent)
                    pending.append(iter(roles[parent].inherits))
        return list(done)

    def _held(self, rules: Mapping[str, tuple[RuleRef, ...]], parents_first: Sequence[str]) -> None:
        """Refuse a role that holds more than ``MAX_ROLES_HELD`` roles, or more than
        ``MAX_RULES_ON_ONE_RESOURCE`` rules (its own and inherited ones together) on one pattern:
        at its first rule on a pattern its own rules name, else at its ``inherits``. The roles are
        checked in ``parents_first`` order, so the refusal names the role that first exceeds, not a
        role inheriting it.

        Every pattern a role holds rules on is counted, not only those its own rules name: until
        review R92 a role without rules inheriting many roles' ``tool:*`` rules held thousands
        there, each read by a decision of its holder and compared by ``shadowed_rule`` with
        every rule of every role inheriting it. Rules on different patterns are not added up (a
        role may hold 64 on ``tool:*`` and 64 on ``tool:x``).

        Linear in the rules held where they change: each role's closure is followed at most
        ``MAX_ROLES_HELD`` roles deep, and its own patterns are counted in it. The inherited
        patterns are counted only at a role that inherits from several roles, once per set of
        rule-holding roles it inherits (a role with one parent holds what its parent holds on every
        pattern its own rules do not name), and there only the patterns of the set's roles outside
        the closure of the parent whose closure holds the most patterns: that parent was checked
        first, so it holds at most ``MAX_RULES_ON_ONE_RESOURCE`` on each (``_most_inherited``)."""
        roles = self.doc.roles
        counts = {role: Counter(r.capability.resource for r in own) for role, own in rules.items() if own}
        merged: set[frozenset[str]] = set()
        patterns: dict[str, int] = {}  # per role, the patterns of the rule-holding roles it holds
        for name in parents_first:
            held = list(itertools.islice(_closure(roles, name), MAX_ROLES_HELD + 1))
            if len(held) > MAX_ROLES_HELD:
                raise self.error(
                    ("roles", name, "inherits"),
                    f"role {name} holds more than {MAX_ROLES_HELD} roles with those it inherits",
                    f"at most {MAX_ROLES_HELD} roles, itself and those it inherits directly or not",
                    "merge roles, or give principals several roles instead of one chain",
                )
            holding = [counts[r] for r in held if r in counts]
            patterns[name] = sum(map(len, holding))
            for pattern in counts.get(name, ()):
                count = sum(c.get(pattern, 0) for c in holding)
                if count > MAX_RULES_ON_ONE_RESOURCE:
                    first = next(r for r in rules[name] if r.capability.resource == pattern)
                    raise self._too_many(
                        ("roles", name, "capabilities", first.index), name, count, pattern, own=True
                    )
            inherited = frozenset(r for r in held[1:] if r in counts)
            if len(roles[name].inherits) < 2 or inherited in merged:
                continue
            merged.add(inherited)
            base = max(roles[name].inherits, key=lambda parent: patterns.get(parent, 0))
            in_base = {r for r in _closure(roles, base) if r in counts}
            pattern, count = _most_inherited(
                [counts[r] for r in in_base],
                [counts[r] for r in held[1:] if r in counts and r not in in_base],
            )
            if count > MAX_RULES_ON_ONE_RESOURCE:
                raise self._too_many(("roles", name, "inherits"), name, count, pattern, own=False)

    def _too_many(
        self, loc: Sequence[str | int], role: str, count: int, pattern: str, *, own: bool
    ) -> PolicyError:
        whose = "its own and inherited ones" if own else "inherited ones"
        return self.error(
            loc,
            f"role {role} holds {count} rules on {pattern}, {whose}",
            f"at most {MAX_RULES_ON_ONE_RESOURCE} rules of a role on one resource pattern",
            "merge rules: an 'in' list or a wider bound allows what several rules do",
        )

    def _did(self, loc: tuple[str, str], did: str | None, key: str | None) -> str | None:
        resolved: str | None = None
        if did is not None:
            try:
                resolved = load_public_key(did).did if did.startswith("did:") else None
            except KeyFileError as exc:
                raise self.error(
                    (*loc, "did"),
                    str(exc),
                    "an Ed25519 did:key (did:key:z6Mk...)",
                    "copy the did from the .pub file",
                ) from None
            if resolved is None:
                # By the text alone: a did names no file, and which files exist in the working
                # directory must not decide what the refusal shows (until review R86d it did).
                shown = (
                    "the value (not shown: it looks like a key itself)"
                    if looks_like_key(did)
                    else repr(did[:80])
                )
                raise self.error(
                    (*loc, "did"), f"{shown} is not a did:key", "did:key:z6Mk...", "use 'key:' for a key file"
                )
        if key is not None:
            if is_key_text(key, self.base):
                raise self.error(
                    (*loc, "key"),
                    "the value (not shown: it looks like a key itself) is not a key file's path",
                    "the path of a .pub file",
                    "give the public key's file, or its did:key under 'did:'; replace a private key that was pasted here",
                )
            path = Path(key) if Path(key).is_absolute() else self.base / key
            try:
                exists = path.exists()
            except OSError as exc:  # a name too long for the file system, a directory not searchable
                raise self.error(
                    (*loc, "key"),
                    f"key file {key[:200]!r} cannot be looked up: {exc.strerror or exc}",
                    "an existing public key file",
                    "give the path of the .pub file, or 'did:' instead",
                ) from None
            if not exists and key.startswith("did:"):
                raise self.error(  # a did where a file belongs: say so, not "no such file"
                    (*loc, "key"),
                    f"{key[:200]!r} is a did, not a key file",
                    "the path of a .pub file",
                    "write a did:key under 'did:', not 'key:'",
                )
            if not exists:
                looked = str(path) if str(path).isprintable() else repr(str(path))  # one line
                raise self.error(
                    (*loc, "key"),
                    f"key file {key!r} does not exist (looked at {looked})",
                    "an existing public key file",
                    "create it with 'agentgate keys new', or give 'did:' instead",
                )
            try:
                from_file = load_public_key(path).did
            except KeyFileError as exc:
                raise self.error(
                    (*loc, "key"),
                    str(exc),
                    "a did:key or PEM public key file",
                    "point at the .pub file, not the .key",
                ) from None
            if resolved is not None and resolved != from_file:
                raise self.error(
                    (*loc, "key"),
                    "key file and did name different keys",
                    "one key",
                    "keep only one of 'did' and 'key'",
                )
            resolved = from_file
        return resolved

    def _pattern(self, loc: tuple[str | int, ...], pattern: str) -> None:
        try:
            Capability.of(pattern)
        except CapabilityError as exc:
            raise self.error(
                loc,
                str(exc),
                "tool:NAME, tool:prefix.*, tool:*, model:NAME",
                "resource names are lower-case, '.'-separated",
            ) from None

    def _tool_arguments(self) -> None:
        """Refuse, at its key or line, an argument name of a tool longer than ``MAX_NAME_LENGTH``
        characters: one it declares (``args``) or marks ``loggable``, as an approval gate's
        ``when`` and a capability's constraints refuse it. Until review R57 neither had a limit,
        and every decision that quotes the call's arguments, every audit entry that keeps a
        loggable one in clear, could carry it."""
        for name, tool in self.doc.tools.items():
            for arg in tool.args:
                self._argument_name(
                    ("tools", name, "args", arg), arg, f"tool {name}: argument name", key=True
                )
            for i, arg in enumerate(tool.loggable):
                self._argument_name(
                    ("tools", name, "loggable", i), arg, f"tool {name}: loggable argument name"
                )

    def _argument_name(self, loc: tuple[str | int, ...], arg: str, what: str, *, key: bool = False) -> None:
        """Refuse ``arg``, the argument name at ``loc`` (its key when ``key``; ``what`` names it),
        if it is longer than ``MAX_NAME_LENGTH`` characters, as a capability's
        constraints refuse it (``_check_argument_name``). A tool's declared and loggable names and
        a gate's ``when`` names are matched against a call's arguments as written, so any other
        text is a name: only the length is bounded."""
        if len(arg) > MAX_NAME_LENGTH:
            raise self.error(
                loc,
                f"{what} {arg[:40]!r}... is {len(arg)} characters long, more than {MAX_NAME_LENGTH}",
                f"argument names of at most {MAX_NAME_LENGTH} characters",
                "name the arguments as the tool's calls name them",
                key=key,
            )

    def _constraint(self, loc: tuple[str | int, ...], spec: schema.ConstraintSpec) -> Constraint:
        self._exact_numbers(loc, spec)
        try:
            # The location path as every error of the loader writes it (``dotted_path``): an
            # argument name holding a line break or a bidi override quoted, where until review
            # R86b it was joined raw into the message (``approvals.g.when.a\nb: ...``).
            constraint = Constraint.of(spec.as_mapping(), dotted_path(loc))
        except CapabilityError as exc:
            raise self.error(
                loc,
                str(exc),
                "operators eq, in, lt, le, gt, ge, prefix",
                "lt, le, gt, ge take finite numbers, prefix a string, eq a value, in a non-empty list",
            ) from None
        self._constraint_size(loc, constraint)
        return constraint

    def _exact_numbers(self, loc: tuple[str | int, ...], spec: schema.ConstraintSpec) -> None:
        """Refuse, at the number, a value of ``spec`` (a bound, ``eq``, a member of ``in``) written
        as a number no float holds (``Locations.inexact``): ``ge: 9007199254740993.0`` would be
        read as ``ge: 9007199254740992.0`` and allow n = 2**53, which the bound as written
        excludes. The one-line form and ``--args`` refuse such a number too."""
        inexact = self.locations.inexact
        if not inexact:
            return
        values = [((*loc, op), f"its {op!r} value") for op in _EXACT_OPERATORS]
        values += [((*loc, "in", i), f"member {i + 1} of its 'in' list") for i in range(len(spec.in_ or ()))]
        for path, what in values:
            found = inexact.get(path)
            if found is None:
                continue
            text, value = found
            raise self.error(
                path,
                f"{_rule_name(loc)}: {what}, {shortened(text)}, is a number no float holds as written "
                f"(it would be read as {value!r})",
                "a number a float holds as written",
                _exact_hint(text, value),
            )

    def _constraint_size(self, loc: tuple[str | int, ...], constraint: Constraint) -> None:
        """Refuse a text value past ``MAX_CONSTRAINT_TEXT`` characters, or values past
        ``MAX_CONSTRAINT_CHARS`` together, naming the rule (or gate) and the argument."""
        total = 0
        for op, value in constraint.to_dict().items():
            for v in value if op == "in" else (value,):
                if type(v) is str and len(v) > MAX_CONSTRAINT_TEXT:
                    raise self.error(
                        loc,
                        f"{_rule_name(loc)}: its {op!r} value is {len(v)} characters long",
                        f"text values of at most {MAX_CONSTRAINT_TEXT} characters",
                        "a decision quotes the rule's constraints; constrain a shorter prefix or value",
                    )
                total += len(json_text(v))
        if total > MAX_CONSTRAINT_CHARS:
            raise self.error(
                loc,
                f"{_rule_name(loc)}: its values are {total} characters long together",
                f"at most {MAX_CONSTRAINT_CHARS} characters of values in one constraint",
                "a decision quotes the rule's constraints; split the rule or shorten the list",
            )

    def _capability(self, loc: tuple[str | int, ...], rule: schema.CapabilityRule) -> Capability:
        constraints = tuple(
            (arg, self._constraint((*loc, "constraints", arg), spec))
            for arg, spec in rule.constraints.items()
        )
        # Only an absent (or null) action takes the default: an empty one is refused, not widened.
        action = rule.action
        if action is None:
            action = DEFAULT_ACTIONS.get(rule.resource.partition(":")[0], "invoke")
        try:
            return Capability(rule.resource, action, constraints)
        except CapabilityError as exc:
            refused = exc
        # Point at the part at fault, checking the parts apart only now, off the loading path.
        self._pattern((*loc, "resource"), rule.resource)
        try:
            Capability(rule.resource, action)
        except CapabilityError as exc:
            raise self.error(
                (*loc, "action"),
                str(exc),
                f"a lower-case identifier of at most {MAX_NAME_LENGTH} characters, or '*'",
                "e.g. invoke, read or '*'",
            ) from None
        for arg, constraint in constraints:  # an argument name that is not an identifier, or too long
            try:
                Capability(rule.resource, action, ((arg, constraint),))
            except CapabilityError as exc:
                refused = exc
                at: tuple[str | int, ...] = (*loc, "constraints", arg)
                break
        else:
            at = (*loc, "constraints")
        raise self.error(
            at,
            str(refused),
            f"argument names that are identifiers of at most {MAX_NAME_LENGTH} characters",
            "constrain the arguments by the names the tool declares",
            key=at[-1] != "constraints",
        )
