"""Audit entries and their canonical bytes (docs/audit-format.md, "Entry bytes").

An entry's bytes are UTF-8 JSON with every field present (``null`` where unset; ``charges``
only where set), keys sorted,
no whitespace, and no floats outside the caller's clear arguments; ``"v": 1`` names the format.
The bytes are what the Merkle leaf hashes, so every field that matters (decision, principal,
chain hash, policy hash, rule, resource, argument digest, approver, budget delta, time, reasons,
outcome) is covered by the log's signed checkpoints. ``AuditEntry.from_bytes`` refuses bytes that
are not in canonical form, so one entry has exactly one byte string.

Argument values reach the log only as ``argument_digest`` (SHA-256 of their canonical JSON) plus
the fields the policy marks loggable (``redact``); a secret in an unmarked field never does.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any, Literal

import orjson
from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator

from agentgate._json import MAX_DEPTH as MAX_DEPTH
from agentgate._json import canonical_json as canonical_json
from agentgate._json import check_json, encode_reference, is_plain
from agentgate._names import ENTRY_KINDS as ENTRY_KINDS
from agentgate._names import EntryKind as EntryKind
from agentgate._shown import not_printable
from agentgate.errors import InputError, TamperDetected

# ``\Z``, not ``$`` (which also matches before a final newline); ASCII digits only, not any
# script's: exactly the format docs/audit-format.md gives, which a reader in another language checks.
_TIME = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}Z\Z", re.ASCII)


def utc_now() -> str:
    """The current time in the one format entries use: ``YYYY-MM-DDTHH:MM:SS.ffffffZ``."""
    # Formatted by hand, the date and time of day once per second: ``strftime`` costs several
    # times more, and every decision stamps its entries and its reservation.
    global _second
    seconds, micros = divmod(time.time_ns() // 1000, 1_000_000)
    cached = _second  # one read: another thread may replace it meanwhile, never half of it
    if cached[0] != seconds:
        t = time.gmtime(seconds)
        cached = _second = (
            seconds,
            f"{t.tm_year:04d}-{t.tm_mon:02d}-{t.tm_mday:02d}T{t.tm_hour:02d}:{t.tm_min:02d}:{t.tm_sec:02d}",
        )
    return f"{cached[1]}.{micros:06d}Z"


_second: tuple[int, str] = (-1, "")


def _is_moment(when: str) -> bool:
    """Whether ``when``, in the entry time format, names a moment: month 1 to 12, a day its month
    has, hour 0 to 23, minute and second 0 to 59, year 0001 or later (``datetime``'s calendar)."""
    if when[:19] == _second[1]:
        return True  # this second's time as ``utc_now`` wrote it: the common case, no parsing
    try:
        datetime.fromisoformat(when[:19])
    except ValueError:
        return False
    return True


def format_time(moment: datetime) -> str:
    """``moment`` (timezone-aware) in entry time format; raises ``InputError`` if it is naive.
    The year has four digits, also before 1000: such times are compared as text (a ledger's
    prune, ``budget held --older-than``), and ``strftime`` wrote the year 379 as ``379``, which
    sorts after ``2026`` (until review R83 an age of 52,000,000,000 s held every reservation).
    Naive as Python defines it: no ``tzinfo``, or one whose ``utcoffset`` is None (until review
    R84 such a time was written as if in the machine's zone)."""
    if moment.utcoffset() is None:
        raise InputError("audit times must be timezone-aware")
    return moment.astimezone(UTC).replace(tzinfo=None).isoformat(timespec="microseconds") + "Z"


def argument_digest(args: Mapping[str, Any]) -> str:
    """``sha256:<hex>`` of the canonical JSON of ``args``; raises ``InputError`` on non-JSON values."""
    return "sha256:" + hashlib.sha256(canonical_json(dict(args))).hexdigest()


def redact(args: Mapping[str, Any], loggable_fields: Iterable[str]) -> dict[str, Any]:
    """Only the top-level ``args`` fields named in ``loggable_fields``; every other value is dropped.

    Nothing is masked in place: a field that is not named does not appear at all, so a secret in an
    unmarked field cannot reach the log or a span in clear.
    """
    allowed = set(loggable_fields)
    return {key: args[key] for key in sorted(args) if key in allowed}


def encode_entry(fields: Mapping[str, Any]) -> bytes:
    """The canonical bytes of the entry with ``fields``: exactly ``AuditEntry.build(**fields).to_bytes()``.

    The hot path of every decision: fields of the types the model requires (exact ``str`` and
    ``int``, a ``dict`` of JSON values for ``args``, a list or tuple of ``str`` for ``reasons``)
    are checked and encoded without building the model; anything else goes through
    ``AuditEntry.build``, which accepts or refuses it (``InputError``) as it always did.
    """
    values = _fast_fields(fields)
    if values is not None:
        if is_plain(values["args"]):  # the other fields are exact strings, integers, None, a list of strings
            try:
                return orjson.dumps(values, option=orjson.OPT_SORT_KEYS)
            except orjson.JSONEncodeError:
                pass  # nested deep, an integer beyond 64 bits, a lone surrogate: the model judges
        else:
            try:
                check_json(values["args"], "args")
            except InputError:
                pass  # the model names the problem
            else:
                return encode_reference(values)
    return AuditEntry.build(**fields).to_bytes()


DEFAULT_MAX_ENTRY_BYTES = 64 << 10
"""The default bound on one entry's bytes (``AuditLog(max_entry_bytes=...)``,
``AGENTGATE_AUDIT_MAX_ENTRY_BYTES``): larger values are recorded by digest (``encode_bounded``)."""
MIN_MAX_ENTRY_BYTES = 4096
"""The smallest bound an audit log accepts: room for every fixed field and a few digests."""
MAX_MAX_ENTRY_BYTES = 256 << 20
"""The largest bound an audit log accepts (256 MiB): beyond, the bound would no longer bound what
every verify and explain reads (PostgreSQL's ``bytea`` and SQLite's default blob stop at 1 GB)."""
_ELIDABLE_KEY = 128
"""The longest ``args`` key that is named in its own elision reason; longer keys elide the whole object."""
_KEPT_REASON = 256
"""Reasons of at most this many characters are never recorded by digest (an approval's
``signature:HEX`` among them: a verifier needs it in clear)."""


def elision(what: str, data: bytes) -> str:
    """The reason that records ``data`` (what ``what`` held) by digest instead of inline:
    ``elided WHAT: N bytes, sha256:HEX`` (docs/audit-format.md, "Entry size")."""
    return f"elided {what}: {len(data)} bytes, sha256:{hashlib.sha256(data).hexdigest()}"


def encode_bounded(fields: Mapping[str, Any], limit: int) -> bytes:
    """The canonical bytes of the entry with ``fields``, at most ``limit`` bytes long.

    An entry within the bound is exactly ``encode_entry(fields)``. A larger one keeps every field
    but records large values by digest, in this order until it fits: the largest ``args`` values
    (each dropped from ``args``, with a reason ``elided args.KEY: N bytes, sha256:HEX`` of its
    canonical JSON), then the largest reasons of more than 256 characters (each replaced in place
    by ``elided reason: ...`` of its UTF-8 bytes), then the whole remaining ``args`` (``elided
    args: ...``), and last, when the reasons of the first step are what is still too large, those
    reasons and that one give way to a single ``elided args: ...`` of the caller's whole ``args``.
    ``args_digest`` is the caller's and still covers the full arguments. Raises ``InputError``
    for bad fields, or when the entry is still over ``limit`` after all that (a huge resource,
    rule or status): the entry is then not written at all, never cut silently.
    """
    data = encode_entry(fields)
    if len(data) <= limit:
        return data
    values = dict(fields)
    args = dict(values.get("args") or {})
    reasons = list(values.get("reasons") or ())
    given = len(reasons)  # the caller's reasons; the elision reasons added below stay as they are
    excess = len(data) - limit
    # 1. The largest args values, one by one, while each saves more than its reason costs.
    sized = sorted(((len(canonical_json(args[key])), key) for key in args), reverse=True)
    for size, key in sized:
        if excess <= 0 or len(key) > _ELIDABLE_KEY:
            continue
        note = elision(f"args.{key}", canonical_json(args[key]))
        saving = size + len(canonical_json(key)) + 2 - len(canonical_json(note)) - 1
        if saving <= 0:
            break
        del args[key]
        reasons.append(note)
        excess -= saving
    per_value = len(reasons) > given  # step 1 elided a value
    data = encode_entry({**values, "args": args, "reasons": reasons})
    # 2. The caller's largest reasons, replaced in place.
    if len(data) > limit:
        excess = len(data) - limit
        for size, k in sorted(((len(canonical_json(reasons[k])), k) for k in range(given)), reverse=True):
            if excess <= 0:
                break
            if len(reasons[k]) <= _KEPT_REASON:
                continue  # kept in clear; a longer one may still come (sorted by encoded size)
            note = elision("reason", reasons[k].encode("utf-8"))
            excess -= size - len(canonical_json(note))
            reasons[k] = note
        data = encode_entry({**values, "args": args, "reasons": reasons})
    # 3. The whole remaining args object.
    if len(data) > limit and args:
        reasons.append(elision("args", canonical_json(args)))
        args = {}
        data = encode_entry({**values, "args": args, "reasons": reasons})
    # 4. Step 1's reasons, when they are what is too large (many values, each elided by a reason of
    # about a hundred bytes): one reason for the caller's whole args object instead. Until review
    # R84 such an entry was refused, and an allow with it rolled back.
    if len(data) > limit and per_value:
        reasons = [*reasons[:given], elision("args", canonical_json(values.get("args") or {}))]
        data = encode_entry({**values, "args": args, "reasons": reasons})  # args is {} after step 3
    if len(data) > limit:
        final = {**values, "args": args, "reasons": reasons}
        sizes = {name: len(canonical_json(value)) for name, value in final.items()}
        largest = max(sizes, key=lambda name: sizes[name])
        raise InputError(
            f"audit entry of {len(data)} bytes is over the log's limit of {limit} bytes after recording "
            f"args and reasons by digest (its largest field, {largest}, takes {sizes[largest]} bytes)"
        )
    return data


_DEFAULTS: dict[str, Any] = {
    "v": 1,
    "chain_hash": None,
    "policy_hash": None,
    "rule": None,
    "resource": None,
    "args_digest": None,
    "args": {},
    "approver": None,
    "budget_delta": 0,
    "reasons": (),
    "status": None,
    "ref": None,
}
_OPTIONAL_TEXT = ("chain_hash", "policy_hash", "rule", "resource", "args_digest", "approver", "status")
_KINDS = frozenset(ENTRY_KINDS)
_FIELD_COUNT = len(_DEFAULTS) + 4  # and the four without a default: index, time, kind, principal
_REQUIRED = frozenset({"index", "time", "kind", "principal"})


def _fast_fields(fields: Mapping[str, Any]) -> dict[str, Any] | None:
    """``fields`` with defaults filled in, as ``to_bytes`` dumps them, when every field but the
    values inside ``args`` certainly makes a valid entry (``encode_entry`` checks those); ``None``
    when the model must judge them (then ``AuditEntry.build`` decides)."""
    values = {**_DEFAULTS, **fields}
    charges = values.pop("charges", None)
    if len(values) != _FIELD_COUNT or not fields.keys() >= _REQUIRED:
        return None  # an unknown field, or index, time, kind or principal missing (or misspelt)
    if charges is not None:
        if not _plain_charges(charges):
            return None
        values["charges"] = charges
    index, when, kind, principal = values["index"], values["time"], values["kind"], values["principal"]
    ref, reasons, args = values["ref"], values["reasons"], values["args"]
    if not (
        type(values["v"]) is int
        and values["v"] == 1
        and type(index) is int
        and index >= 0
        and type(when) is str
        and _TIME.match(when)
        and _is_moment(when)
        and type(kind) is str
        and kind in _KINDS
        and type(principal) is str
        and 1 <= len(principal) <= 512
        and type(values["budget_delta"]) is int
        and (ref is None or (type(ref) is int and ref >= 0))
        and type(reasons) in (list, tuple)
        and all(type(r) is str for r in reasons)
        and type(args) is dict
        and all(type(key) is str for key in args)
    ):
        return None
    for name in _OPTIONAL_TEXT:
        value = values[name]
        if value is not None and type(value) is not str:
            return None
    values["reasons"] = list(reasons)
    return values


def _plain_charges(charges: object) -> bool:
    """Whether ``charges`` is a ``dict`` of grant id to a ``dict`` of unit to an ``int`` >= 0."""
    return type(charges) is dict and all(
        type(grant) is str
        and type(by_unit) is dict
        and all(type(unit) is str and type(n) is int and n >= 0 for unit, n in by_unit.items())
        for grant, by_unit in charges.items()
    )


_MAX_MESSAGE = 500


def one_line(text: str) -> str:
    """``text`` as one line of at most ``_MAX_MESSAGE`` characters that a terminal shows as it is:
    control, format (bidi overrides), surrogate and line or paragraph separator characters written
    as escapes. For messages that quote what an entry holds: a stored entry is anyone's text (a
    tamperer's), and ``agentgate audit verify`` prints each problem as one line."""
    if text.isprintable() and len(text) <= _MAX_MESSAGE:
        return text
    shown = "".join(
        c.encode("unicode_escape").decode("ascii") if not_printable(c) else c for c in text[:_MAX_MESSAGE]
    )
    return shown if len(text) <= _MAX_MESSAGE else shown + "..."


def _first_error(exc: ValidationError) -> str:
    """``FIELD: what is wrong`` of the first error of ``exc`` (and how many more), one line:
    pydantic's own text spans lines and quotes the names of unknown fields as they are."""
    try:
        errors = exc.errors(include_url=False)
        first = errors[0]
        where = ".".join(str(p) for p in first["loc"]) or "entry"
        more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
        return one_line(f"{where}: {first['msg']}{more}")
    except (UnicodeError, IndexError):  # pydantic could not word it (a lone surrogate in a key)
        return "a field holds text that is not valid Unicode"


class AuditEntry(BaseModel):
    """One decision or outcome in the audit log. Immutable; ``to_bytes`` is what the log hashes."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    v: Literal[1] = 1
    """Format version of the entry bytes."""
    index: int = Field(ge=0)
    """Position in the log, from 0, gap-free."""
    time: str
    """When the entry was written, UTC, ``YYYY-MM-DDTHH:MM:SS.ffffffZ``."""
    kind: EntryKind
    """allow, deny, approval_required, approval_given, revoke, spend or outcome."""
    principal: str = Field(min_length=1, max_length=512)
    """The ``did:key`` of the caller (for revoke: the revoker)."""
    chain_hash: str | None = None
    """Hash of the caller's grant (the chain tip), or the revoked grant's hash."""
    policy_hash: str | None = None
    """Hash of the policy the decision was made under."""
    rule: str | None = None
    """The policy rule that decided, when one did."""
    resource: str | None = None
    """The tool or model, e.g. ``tool:payments.refund`` or ``model:llama-3.1-8b``."""
    args_digest: str | None = None
    """``argument_digest`` of the full call arguments."""
    args: dict[str, Any] = Field(default_factory=dict)
    """The arguments the policy marks loggable, in clear (see ``redact``)."""
    approver: str | None = None
    """The ``did:key`` of the approver, for approval_given and approved calls."""
    budget_delta: int = 0
    """Budget change in integer minor units: reserved or spent (positive), released (negative)."""
    reasons: tuple[str, ...] = ()
    """Reasons and finding codes behind the decision."""
    status: str | None = None
    """Outcome status (``ok``, ``error``, ``timeout``...) for outcome entries."""
    ref: int | None = Field(default=None, ge=0)
    """Index of the decision entry an outcome or spend belongs to."""
    charges: dict[str, dict[str, int]] | None = Field(default=None, exclude_if=lambda value: value is None)
    """On an outcome that committed budget reservations: what each grant of the chain was charged
    (its spend grew by), by grant id and unit. Written only when set (added in review R61): an
    entry without it has the bytes it had before."""

    @field_validator("charges")
    @classmethod
    def _charges_are_amounts(
        cls, value: dict[str, dict[str, int]] | None
    ) -> dict[str, dict[str, int]] | None:
        if value is not None and any(n < 0 for by_unit in value.values() for n in by_unit.values()):
            raise ValueError("a charge is an amount in minor units, 0 or more")
        return value

    @field_validator("time")
    @classmethod
    def _time_format(cls, value: str, info: ValidationInfo) -> str:
        if not _TIME.match(value):
            raise ValueError("time must be UTC in the form YYYY-MM-DDTHH:MM:SS.ffffffZ")
        # A stored entry (``from_bytes``) is read as written: versions before 2026-12-02 checked
        # the pattern only, and a log holding month 13 from an API caller must still verify.
        stored = isinstance(info.context, dict) and info.context.get("stored") is True
        if not stored and not _is_moment(value):
            raise ValueError(f"time {value} names no moment (no such month, day, hour, minute or second)")
        return value

    @field_validator("args")
    @classmethod
    def _args_are_json(cls, value: dict[str, Any], info: ValidationInfo) -> dict[str, Any]:
        # ``MAX_DEPTH`` bounds what is written; a stored entry (``from_bytes``) may be deeper:
        # versions before 2026-11-30 (commit 55ba73a) wrote args nested up to ~990 levels.
        stored = isinstance(info.context, dict) and info.context.get("stored") is True
        try:
            check_json(value, "args", None if stored else MAX_DEPTH)
        except InputError as exc:
            raise ValueError(str(exc)) from exc
        return value

    @classmethod
    def build(cls, **fields: Any) -> AuditEntry:
        """An entry from plain values (a list or tuple for ``reasons``); raises ``InputError`` on bad
        ones. Any other ``reasons`` is refused, not iterated: a string would be recorded as one
        reason per character, a set in an order that changes from run to run."""
        reasons = fields.get("reasons")
        if isinstance(reasons, list):
            fields["reasons"] = tuple(reasons)
        elif "reasons" in fields and not isinstance(reasons, tuple):
            raise InputError(
                f"audit entry field reasons: must be a list or tuple of strings, got {type(reasons).__name__}"
            )
        try:
            return cls(**fields)
        except ValidationError as exc:
            raise InputError(f"audit entry field {_first_error(exc)}") from exc
        except UnicodeError:  # pydantic could not even word its error: a lone surrogate in a key
            raise InputError("audit entry: a field holds text that is not valid Unicode") from None

    def to_bytes(self) -> bytes:
        """The canonical bytes of this entry (docs/audit-format.md)."""
        data = self.model_dump(mode="python")
        data["reasons"] = list(self.reasons)  # ``charges`` is dumped only when set (``exclude_if``)
        return encode_reference(data)  # every field was checked at construction; ``args`` by its validator

    @classmethod
    def from_bytes(cls, data: bytes) -> AuditEntry:
        """Parse canonical entry bytes; raises ``TamperDetected`` if they are not exactly canonical
        (text that is not valid Unicode, a lone-surrogate escape, included: until review R88 that
        was an ``InputError`` that stopped every reader of the log)."""
        try:
            raw = json.loads(data.decode("utf-8"))
        except ValueError as exc:  # not UTF-8, not JSON, or an integer longer than Python converts
            raise TamperDetected(f"entry bytes are not UTF-8 JSON: {one_line(str(exc))}") from exc
        except RecursionError:  # nested deeper than any version of the log wrote
            raise TamperDetected("entry bytes are nested too deep to be an entry") from None
        if not isinstance(raw, dict):
            raise TamperDetected("entry bytes are not a JSON object")
        if isinstance(raw.get("reasons"), list):
            raw["reasons"] = tuple(raw["reasons"])
        try:
            entry = cls.model_validate(raw, context={"stored": True})
        except ValidationError as exc:
            raise TamperDetected(f"entry fields are invalid: {_first_error(exc)}") from exc
        except TypeError as exc:
            raise TamperDetected(f"entry fields are invalid: {one_line(str(exc))}") from exc
        try:
            canonical = entry.to_bytes()
        except InputError as exc:  # a lone-surrogate escape, which the field validators take
            raise TamperDetected(
                f"entry {entry.index} is not in canonical form: {one_line(str(exc))}"
            ) from None
        if canonical != data:
            raise TamperDetected(f"entry {entry.index} is not in canonical form")
        return entry
