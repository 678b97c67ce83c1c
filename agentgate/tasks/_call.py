"""What is scheduled: a ``ToolCall``, the ``Attempt`` a tool receives, and idempotency keys.

An idempotency key names one logical call, the same across retries and re-submissions:
``sha256("agentgate-idempotency-v2" 0 tenant 0 principal 0 grant 0 run_id 0 tool 0 call_id 0
argument_digest)``, or, when a part holds a NUL, ``sha256`` of the JSON array
``["agentgate-idempotency-v3", tenant, principal, grant, run_id, tool, call_id, argument_digest]``
(``idempotency_key``). It exists only when the caller names the run and the tool call id; without
them two calls with equal arguments are different calls (two refunds of 10 EUR are two refunds).
Run and call ids are chosen by the framework and the model (a LangGraph thread "1", a tool call
"call_0_0") and repeat across agents, so the key is scoped by who calls under what authority:
the tenant, the principal and the grant (the last id of ``authority_chain``). Another tenant's,
another agent's or a sub-agent's call with the same ids is another call: it never receives this
call's result and its tool never sees this call's key.
"""

from __future__ import annotations

import hashlib
import inspect
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from types import AsyncGeneratorType, CoroutineType, GeneratorType, MappingProxyType
from typing import Any, NamedTuple

from agentgate._json import canonical_json
from agentgate._shown import quoted, shown
from agentgate.errors import InputError

#: ``ToolCall``'s default ``arguments``, a marker: each call made without arguments gets a new dict.
_NO_ARGUMENTS: Mapping[str, Any] = MappingProxyType({})
#: Where a ``ToolCall`` with an ``arguments_digest`` keeps its idempotency key once computed: not a
#: field (not compared or shown).
_KEY = "_idempotency_key"

OTHER = "_other"
"""The name metrics count the tools, tenants and breaker keys past their label bound under, and
the tool of the breaker the scheduler shares past its own bound: reserved, no tool may have it."""
PER_NAME_STATE = 4096
"""How many tools (and tenants) the per-name state keeps before it forgets what a new entry would
hold again (caches derived from the config, full token buckets) or shares one entry (breakers:
``OVERFLOW_BREAKER``). Tool and tenant names reach a scheduler used alone from its callers (a
Gate passes only those its policy declares), so without a bound a caller inventing names would
grow them without end."""
OVERFLOW_BREAKER = "tool:" + OTHER
"""The breaker of every key first seen past ``PER_NAME_STATE`` breakers that the config's
``tools`` does not name (``SharedLimits.breaker``)."""


def argument_digest(arguments: Mapping[str, Any]) -> str:
    """SHA-256 (hex) of the arguments as canonical JSON (sorted keys, no spaces, UTF-8): the audit
    log's encoding (``audit.entry.canonical_json``), the bytes of ``json.dumps(sort_keys=True,
    separators=(",", ":"), ensure_ascii=False, allow_nan=False)``.

    Raises ``InputError`` when the arguments are not JSON values (the digest must be stable
    across processes, so ``repr`` of arbitrary objects is not accepted), hold a key that is not a
    string at any depth, text that is not valid Unicode (a lone surrogate), or values nested more
    than ``MAX_DEPTH`` (254) levels. Until review R68 a key that is not a string was written as its
    spelling (``{1: "a"}`` had the digest, and so the idempotency key, of ``{"1": "a"}``: the
    second of two such calls was handed the first's result), and a lone surrogate or deep nesting
    raised a bare ``UnicodeEncodeError`` or ``RecursionError``.
    """
    if type(arguments) is not dict and isinstance(arguments, Mapping):
        arguments = dict(arguments)  # a MappingProxyType, say: the JSON encoder takes dicts only
    try:
        text = canonical_json(arguments)
    except InputError as exc:
        raise InputError(f"tool call arguments are not JSON values: {exc}") from None
    return hashlib.sha256(text).hexdigest()


def idempotency_key(
    run_id: str,
    tool: str,
    call_id: str,
    digest: str,
    *,
    tenant: str = "default",
    principal: str = "anonymous",
    grant: str = "",
) -> str:
    """The idempotency key of one logical tool call (see the module docstring); the defaults are
    ``ToolCall``'s (a call with no authority chain has the grant "").

    The parts are joined with NUL, which splits them back only when none holds a NUL: a call
    with one in a part is keyed by the JSON array of its parts under ``agentgate-idempotency-v3``
    instead, text with no NUL (JSON escapes it) where a NUL-joined one holds seven, so the two
    never meet. Until review R88 every call was NUL-joined, and tenant "acme" with principal
    "ops\\0bot" had the key of tenant "acme\\0ops" with principal "bot": the second tenant's
    call was handed the first one's result. Keys without a NUL are unchanged, so the once-only
    rows a store holds (``store/once.py``) still match them."""
    material = "\0".join(
        ("agentgate-idempotency-v2", tenant, principal, grant, run_id, tool, call_id, digest)
    )
    # Seven NULs are the separators: one more is in a part. Counted in the joined text, since
    # every keyed call comes here (a scan of each part by a generator took up to twice as long).
    if material.count("\0") != 7:
        material = json.dumps(
            ("agentgate-idempotency-v3", tenant, principal, grant, run_id, tool, call_id, digest),
            ensure_ascii=False,
        )
    return hashlib.sha256(material.encode("utf-8")).hexdigest()


def _check_time(value: object, what: str) -> None:
    """Raise ``InputError`` unless ``value`` is None, an aware datetime that has a Unix time
    (``_unix_time``) or a number of Unix seconds (not NaN: a NaN deadline compares false with every
    time, so it would bound nothing). Until review R89 any datetime was taken here, and a naive
    one, or one whose zone gives an offset out of range or raises, failed only at ``submit`` (the
    last two with the zone's bare ``ValueError`` or its own error)."""
    if value is None:
        return
    if isinstance(value, datetime):
        _unix_time(value, what)
        return
    if isinstance(value, int) and not isinstance(value, bool):
        try:
            float(value)
        except OverflowError:
            # No float holds it: the deadline's arithmetic raised OverflowError when the call was
            # submitted (and repr of one past 4,300 digits raises ValueError).
            raise InputError(
                f"tool call {what} must be an aware datetime or Unix seconds, got an integer of "
                f"{value.bit_length()} bits"
            ) from None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value:
        raise InputError(f"tool call {what} must be an aware datetime or Unix seconds, got {quoted(value)}")


def require_flag(value: object, where: str) -> None:
    """``InputError`` naming ``where`` unless ``value`` is True or False: a flag read as a truth
    value would take the string "false" as true. The value is quoted as ``shown`` quotes it (a
    number as itself, anything else by its type): until review R86b it was its whole ``repr``, a
    bare ``ValueError`` for an integer past 4,300 digits and 10 MB of message for a 10 MB string.
    The one rule for every flag of the scheduler: ``Scheduler.submit``, ``aclose`` and
    ``SyncScheduler.close`` refuse with it, and so do ``ToolCall`` and ``ToolLimits`` (until
    review R86c their own checks still wrote the whole ``repr``); ``Gate.arun`` says the same
    through the gate's own ``expect``."""
    if value is not True and value is not False:
        raise InputError(f"{where} must be True or False, got {shown(value)}")


def _unix_time(value: datetime | float | None, what: str) -> float | None:
    """``value`` in Unix seconds; raises ``InputError`` naming ``what`` for a naive datetime, and
    for one whose zone's ``utcoffset`` raises or gives what ``datetime`` refuses (an offset of a
    day or more, not a ``timedelta``). Naive as Python defines it: no ``tzinfo``, or one whose
    ``utcoffset`` is None (until review R84 only the first, and the second raised ``TypeError``
    from ``submit``)."""
    if value is None or isinstance(value, (float, int)):
        return value
    try:
        if value.utcoffset() is not None:
            return value.timestamp()
        shown_time = value.replace(tzinfo=None).isoformat()
    except Exception as exc:  # the zone is the caller's code: its failure is the field's
        raise InputError(
            f"tool call {what} must be an aware datetime or Unix seconds, got a datetime whose time "
            f"zone {type(value.tzinfo).__name__} gives no valid offset "
            f"({type(exc).__name__}: {_first_line(exc)})"
        ) from None
    raise InputError(f"tool call {what} must be timezone-aware, got {shown_time}")


def _first_line(error: BaseException) -> str:
    """The first line of ``str(error)``, at most 200 characters (a description when it raises)."""
    try:
        lines = str(error).splitlines()
    except Exception:
        return "str() raised"
    return lines[0][:200] if lines else ""


def _encodable(text: str) -> None:
    """Raise ``InputError`` unless ``text`` is valid Unicode (no lone surrogate, which a JSON
    ``"\\udcff"`` escape from a model's tool call id yields): the idempotency key hashes its
    UTF-8 bytes and the store writes them."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise InputError(f"tool call text {quoted(text)} is not valid Unicode (a lone surrogate)") from None


def unawaited(value: object) -> bool:
    """Whether ``value``, what a function called as a plain one returned (a ``SyncScheduler``'s
    tool, ``Gate.run``'s ``fn``, a ``paused``, ``failed`` or ``spent``), is async work nothing
    will await: a coroutine, a generator-based coroutine (``@types.coroutine``), an async
    generator, or any other awaitable (an object with ``__await__``: a task, a future)."""
    return inspect.isawaitable(value) or inspect.isasyncgen(value)


def not_begun(value: object) -> bool:
    """Whether ``value`` is ``unawaited`` and a body that has not begun, as calling an ``async
    def``, ``@types.coroutine`` or async generator function returns one: a coroutine or a
    generator-based coroutine, closed here (a coroutine collected unclosed warns that it was never
    awaited), or an async generator. Any other awaitable (a task, a future, an object with
    ``__await__``) may stand for work under way, a handle its caller keeps, and a plain generator
    is a value: ``False``."""
    if not unawaited(value):
        return False
    if isinstance(value, CoroutineType | GeneratorType):
        value.close()
        return True
    return isinstance(value, AsyncGeneratorType)


def says_pause(pauses: Callable[[BaseException], bool] | None, error: BaseException) -> bool:
    """Whether ``pauses`` (a ``ToolCall.pauses``, or the Gate's ``paused``) says ``error`` is a
    pause. ``None`` says no, and so does a predicate that raises, as a broken classifier says
    ``error``: raised, its exception replaced the tool's, the failure was neither counted, retried
    nor a dead letter (the Gate recorded no outcome), and a half-open probe the attempt held was
    kept for good (the breaker refused every later call). So does one that returns async work
    (``unawaited``: an async function behind a ``lambda`` or a ``functools.partial``, which
    ``Gate.run`` cannot tell from its signature), closed unawaited: nothing awaits its answer,
    and until review R87b the coroutine was read for its truth, so that every failure was a
    pause (a model call's reservation released uncharged)."""
    if pauses is None:
        return False
    try:
        said = pauses(error)
        if unawaited(said):
            not_begun(said)  # closes a coroutine: it is never awaited
            return False
        return bool(said)
    except Exception:
        return False


@dataclass(frozen=True, init=False)
class ToolCall:
    """One tool call to schedule.

    ``tenant`` and ``principal`` (the agent) decide fair sharing and per-tenant / per-principal
    limits. ``priority`` names a ``PriorityClass`` (None: the default class). ``run_id`` and
    ``call_id`` together with the arguments give the idempotency key. ``deadline`` (the
    invocation's) and ``grant_expires_at`` are absolute times (aware datetimes or Unix seconds;
    anything else, NaN and a naive datetime included, raises ``InputError``): the call's deadline is the earlier of the two. ``authority_chain`` is opaque to the scheduler
    (grant hashes, say) and is recorded with a dead letter. ``breaker_key`` overrides the circuit
    breaker the call counts against (default ``tool:<tool>``; a key such as ``backend:<name>`` shares
    one breaker among the tools that call one backend).
    ``arguments_digest`` may be given instead of computed from ``arguments``.
    ``key_reaches_tool``: the tool function reads ``Attempt.idempotency_key`` (False when it is
    called without the ``Attempt``, as ``Gate.run``/``arun`` call theirs): a tool that
    ``takes_idempotency_key`` but never receives the key cannot deduplicate, so it is not
    repeated after an ambiguous failure.
    ``keep_error_text``: a failed attempt's dead letter keeps the exception's text (False: none
    keeps its text, an agentgate error the tool raised included, until review R84 kept; a tool's
    exception text may quote its arguments or secrets, so ``Gate.run``/``arun`` keep only its
    type, as their spans and audit entries do).
    ``reuse_result``: a completed result of the same idempotency key may be served from the
    result cache, and this one's is kept there (False: never; ``Gate.run`` for a call that must
    run once, which its store record already keeps from running twice: an operator who settled
    it as not run wants it run, not given a result kept in memory).
    ``pauses``: an exception for which it is true is no failure of the call but a pause
    (LangGraph's ``interrupt()`` inside a tool): it leaves at once, not retried, not told to the
    breaker, no dead letter. A function or None (``InputError`` otherwise); one that raises says
    the exception is not a pause.
    ``holder``: what the per-agent limit and fair share count instead of ``principal``, when
    given (``agent_key``): ``Gate.run`` gives the agent's key, its ``did:key``, since review R67.
    The holder of a grant that binds no name chooses the name it goes by, and took one share per
    name; ``principal`` stays the name the idempotency key and a dead letter record.
    """

    tool: str
    arguments: Mapping[str, Any] = field(default_factory=dict)
    tenant: str = "default"
    principal: str = "anonymous"
    priority: str | None = None
    run_id: str | None = None
    call_id: str | None = None
    deadline: datetime | float | None = None
    grant_expires_at: datetime | float | None = None
    authority_chain: tuple[str, ...] = ()
    breaker_key: str | None = None
    arguments_digest: str | None = None
    key_reaches_tool: bool = True
    keep_error_text: bool = True
    reuse_result: bool = True
    pauses: Callable[[BaseException], bool] | None = field(default=None, compare=False)
    holder: str | None = None

    def __init__(
        self,
        tool: str,
        arguments: Mapping[str, Any] = _NO_ARGUMENTS,
        tenant: str = "default",
        principal: str = "anonymous",
        priority: str | None = None,
        run_id: str | None = None,
        call_id: str | None = None,
        deadline: datetime | float | None = None,
        grant_expires_at: datetime | float | None = None,
        authority_chain: tuple[str, ...] = (),
        breaker_key: str | None = None,
        arguments_digest: str | None = None,
        key_reaches_tool: bool = True,
        keep_error_text: bool = True,
        reuse_result: bool = True,
        pauses: Callable[[BaseException], bool] | None = None,
        holder: str | None = None,
    ) -> None:
        # Written out, not generated: the frozen dataclass's own __init__ sets each field through
        # ``object.__setattr__``, 17 calls that were 40% of a call's making (33.2k -> 19.9k CPU
        # instructions, 2.4 -> 1.4 us; one per ``Gate.run`` and per call of benchmarks/tasks.py,
        # review R70); a store per field into the instance's dict holds the same state. The
        # fields, their order and defaults are the dataclass's (tests/test_tasks_r70_tool_call_init.py).
        if arguments is _NO_ARGUMENTS:
            arguments = {}
        values = self.__dict__
        values["tool"] = tool
        values["arguments"] = arguments
        values["tenant"] = tenant
        values["principal"] = principal
        values["priority"] = priority
        values["run_id"] = run_id
        values["call_id"] = call_id
        values["deadline"] = deadline
        values["grant_expires_at"] = grant_expires_at
        values["authority_chain"] = authority_chain
        values["breaker_key"] = breaker_key
        values["arguments_digest"] = arguments_digest
        values["key_reaches_tool"] = key_reaches_tool
        values["keep_error_text"] = keep_error_text
        values["reuse_result"] = reuse_result
        values["pauses"] = pauses
        values["holder"] = holder
        # The checks read the arguments, not the fields just stored from them (no
        # ``__post_init__`` call, no attribute read per field: review R72). One join type-checks every text field
        # (TypeError for one that is not a string) and gives one string to test for ASCII: on the
        # hot path (a call per Gate.run) this is cheaper than the field-by-field checks, which
        # run only when it finds something to look at and raise ``InputError`` naming the first
        # field of a type it cannot have (a list ``authority_chain`` is taken as a tuple).
        none = ""
        try:
            text = none.join(
                (
                    tool,
                    tenant,
                    principal,
                    none if run_id is None else run_id,
                    none if call_id is None else call_id,
                    none if breaker_key is None else breaker_key,
                    none if priority is None else priority,
                    none if arguments_digest is None else arguments_digest,
                    none if holder is None else holder,
                    *authority_chain,
                )
            )
        except TypeError:  # a field that is not a string: the checks below name it
            text = "\x80"
        if (
            not text.isascii()
            or not tool
            or type(arguments) is not dict
            or type(authority_chain) is not tuple
            or (key_reaches_tool is not True and key_reaches_tool is not False)
            or (keep_error_text is not True and keep_error_text is not False)
            or (reuse_result is not True and reuse_result is not False)
            or tool == OTHER
            or breaker_key == OVERFLOW_BREAKER
            or (pauses is not None and not callable(pauses))
        ):
            self._check_fields()
        if deadline is not None or grant_expires_at is not None:
            _check_time(deadline, "deadline")
            _check_time(grant_expires_at, "grant_expires_at")

    def __post_init__(self) -> None:
        """The checks of ``__init__``, for a dataclass subclass of ``ToolCall``: its generated
        ``__init__`` sets the fields and calls this, never ``ToolCall.__init__`` (review R72: with
        the checks moved into ``__init__`` and no ``__post_init__``, such a subclass made calls
        with an empty tool name or a NaN deadline unchecked)."""
        self._check_fields()
        _check_time(self.deadline, "deadline")
        _check_time(self.grant_expires_at, "grant_expires_at")

    def _check_fields(self) -> None:
        """Raise ``InputError`` naming the first field of a type it cannot have; take a list
        ``authority_chain`` as a tuple."""
        if not self.tool or not isinstance(self.tool, str):
            raise InputError(f"a tool call needs a tool name (a non-empty string), got {quoted(self.tool)}")
        if not isinstance(self.arguments, Mapping):
            # A list would be digested and run as if it were the arguments.
            raise InputError(
                f"tool call arguments are a mapping of names to values, got {type(self.arguments).__name__}"
            )
        if not (isinstance(self.tenant, str) and isinstance(self.principal, str)):
            raise InputError(
                f"tool call tenant and principal must be strings, got {quoted(self.tenant)} and {quoted(self.principal)}"
            )
        for value in (
            self.priority,
            self.run_id,
            self.call_id,
            self.breaker_key,
            self.arguments_digest,
            self.holder,
        ):
            if value is not None and not isinstance(value, str):
                raise InputError(
                    "tool call priority, run_id, call_id, breaker_key, arguments_digest and holder "
                    f"must be strings or None, got {quoted(value)}"
                )
        for value in (
            self.tool,
            self.tenant,
            self.principal,
            self.run_id,
            self.call_id,
            self.breaker_key,
            self.arguments_digest,
            self.holder,
        ):
            # The digest too: it is hashed into the idempotency key and written with a dead
            # letter (until review R86 a lone surrogate there was taken, and ``submit`` raised a
            # bare ``UnicodeEncodeError`` or the store lost the dead letter).
            if value is not None and not value.isascii():
                _encodable(value)
        if self.tool == OTHER or self.breaker_key == OVERFLOW_BREAKER:
            # A tool of that name would share the overflow breaker (and its metrics label).
            raise InputError(
                f"the tool name {OTHER} (breaker key {OVERFLOW_BREAKER}) is reserved; name the tool otherwise"
            )
        chain = self.authority_chain
        if type(chain) is not tuple:
            # A string here would scope the idempotency key by its last character only.
            if not isinstance(chain, list | tuple):
                raise InputError(f"tool call authority_chain must be a tuple of ids, got {quoted(chain)}")
            object.__setattr__(self, "authority_chain", chain := tuple(chain))
        for item in chain:
            if not isinstance(item, str):
                raise InputError(f"tool call authority_chain holds ids (strings), got {quoted(item)}")
            if not item.isascii():
                _encodable(item)
        for name in ("key_reaches_tool", "keep_error_text", "reuse_result"):
            require_flag(getattr(self, name), f"tool call {name}")
        if self.pauses is not None and not callable(self.pauses):
            # Called on a failure only: a flag given here (pauses=True) would never be a pause.
            raise InputError(
                f"tool call pauses must be a function of an exception or None, got {quoted(self.pauses)}"
            )

    @property
    def agent_key(self) -> str:
        """Whom the per-agent limit (``principal_concurrency``) and the agent's fair share within
        its tenant count this call against: ``holder``, else ``principal``."""
        return self.principal if self.holder is None else self.holder

    def digest(self) -> str:
        """The argument digest: the given one, else ``argument_digest(arguments)``."""
        return self.arguments_digest or argument_digest(self.arguments)

    def idempotency_key(self) -> str | None:
        """The call's idempotency key, or None when ``run_id`` or ``call_id`` is missing.
        With an ``arguments_digest`` given (the Gate's calls) it is computed once and kept with
        the call, whose fields are frozen: ``Gate.run`` keys the calls that may join a twin by it,
        and the scheduler's ``submit`` reads it again. Without one it is computed at each read,
        from the ``arguments`` as they are then: a dict, which its owner may change between two
        submits (a regression review of R92: kept, the second submit got the first's result)."""
        if not self.run_id or not self.call_id:
            return None
        values = self.__dict__
        key: str | None = values.get(_KEY)
        if key is None:
            key = idempotency_key(
                self.run_id,
                self.tool,
                self.call_id,
                self.digest(),
                tenant=self.tenant,
                principal=self.principal,
                grant=self.authority_chain[-1] if self.authority_chain else "",
            )
            if self.arguments_digest:
                values[_KEY] = key
        return key

    def absolute_deadline(self) -> float | None:
        """The earlier of ``deadline`` and ``grant_expires_at``, in Unix seconds (None: none)."""
        if self.deadline is None and self.grant_expires_at is None:
            return None
        times = [
            t
            for t in (
                _unix_time(self.deadline, "deadline"),
                _unix_time(self.grant_expires_at, "grant_expires_at"),
            )
            if t is not None
        ]
        return min(times) if times else None


def require_tool_call(call: object) -> None:
    """Raise ``InputError`` unless ``call`` is a ``ToolCall``: what the schedulers' ``submit`` take
    (a tool name, a dict or ``None`` would otherwise fail deep inside with an ``AttributeError``)."""
    if not isinstance(call, ToolCall):
        raise InputError(
            f"a scheduler runs a ToolCall (ToolCall(tool, arguments, ...)), got {type(call).__name__}"
        )


def require_tool_function(fn: object) -> None:
    """Raise ``InputError`` unless ``fn`` can be called: the tool function the schedulers'
    ``submit`` take. (Until review R54 a ``None`` or a string was run as an attempt: it took a
    slot, its ``TypeError`` was the tool's failure, retried as such where ``retry_on`` lists
    ``error``, and recorded as a dead letter.)"""
    if not callable(fn):
        raise InputError(f"a scheduler runs a tool function (attempt -> result), got {type(fn).__name__}")


class Attempt(NamedTuple):
    """What a tool function receives: which attempt this is and what bounds it (immutable).

    A named tuple rather than a frozen dataclass: one is built per attempt on the scheduler's
    hot path, and a tuple is built several times faster.

    ``number`` starts at 1. ``idempotency_key`` is the same for every attempt of a logical call
    (None when the call has no run and call id). ``deadline`` is this attempt's deadline in Unix
    seconds (the earliest of the call's deadline and the tool's timeout), None when unbounded.
    """

    call: ToolCall
    number: int
    idempotency_key: str | None
    deadline: float | None
