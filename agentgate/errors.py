"""One exception tree for the whole package.

Callers catch one family, never a library's internals: lower-level errors (PyNaCl, PyYAML,
pydantic, sqlite3, psycopg, httpx) are mapped to these at the boundary where they happen.
A denial is data (a ``Decision`` with findings) on the normal path; the ``AuthorityError``
family is raised only where the caller asked to enforce.
"""

from __future__ import annotations

from typing import Literal

from agentgate._shown import bounded, escaped, quoted, shown_path

MAX_QUOTING = 300
"""Longest hint a ``SourceError`` keeps whole, and longest message a policy's errors keep whole
(``policy._load``): either may quote a key or a value of the file, which may be megabytes long,
and an error is one line."""


class AgentGateError(Exception):
    """Base of every error agentgate raises on purpose."""


# --- input -----------------------------------------------------------------------------------


class InputError(AgentGateError):
    """Input that cannot be used at all: unreadable, malformed or hostile (CLI exit code 2)."""


class KeyFileError(InputError):
    """A key file is missing, malformed, or readable by others than its owner."""


class TokenFormatError(InputError):
    """A token's bytes do not follow docs/token-format.md (encoding, version, fields, size)."""


class CapabilityError(InputError):
    """A capability or constraint cannot be parsed, or names a resource ambiguously."""


class SourceError(InputError):
    """A YAML file cannot be loaded; carries the file, line and column, what was expected, and a hint."""

    default_source: str | None = None
    """Named in the message when no file is known."""

    def __init__(
        self,
        message: str,
        *,
        file: str | None = None,
        line: int | None = None,
        column: int | None = None,
        expected: str | None = None,
        hint: str | None = None,
    ) -> None:
        self.message = message
        self.file = file
        self.line = line
        self.column = column
        self.expected = expected
        # A hint may quote the file's own text (a key, a duration as written): each character that
        # is not printable escaped and a long one cut, here for every hint, so that the error is
        # one line, in ``str()`` and in the JSON that ``policy lint --json`` writes of it alike
        # (until review R84 a key holding a line break or a bidi override was quoted raw, whole).
        self.hint = None if hint is None else bounded(escaped(hint), MAX_QUOTING)
        super().__init__(self.__str__())

    def __str__(self) -> str:
        # ``file`` is kept as given (a caller opens it again; JSON output carries it as it is) and
        # shown here as key-file errors show a path, so that ``str(exc)`` logged for a file named
        # with a line break or an escape is one line, each escape once (until review R55, raw).
        where = shown_path(self.file) if self.file else self.default_source
        if where is None:
            return self.message
        if self.line is not None:
            where += f":{self.line}"
            if self.column is not None:
                where += f":{self.column}"
        text = f"{where}: {self.message}"
        if self.expected:
            text += f" (expected {self.expected})"
        if self.hint:
            text += f"; hint: {self.hint}"
        return text


class PolicyError(SourceError):
    """A policy file cannot be loaded or is not a valid policy."""

    default_source = "<policy>"


class InventoryError(SourceError):
    """A GPU inventory file cannot be loaded, or names a GPU, node or backend it does not have."""


class BackendCredentialError(InventoryError):
    """A backend's API key (``api_key_env``, ``api_key_file``) cannot be read or used, or is
    written in the inventory itself; the message names the backend and where, never the key."""


# --- authority -------------------------------------------------------------------------------


class AuthorityError(AgentGateError):
    """An authority check failed; raised only where the caller asked to enforce.

    ``finding`` holds the typed ``agentgate.findings.Finding`` that explains it, when there is one.
    """

    finding: object | None = None
    audit_index: int | None = None
    """The audit entry that recorded this refusal, when one did (``Gate.delegate``)."""


class Denied(AuthorityError):
    """A call was denied; ``decision`` holds the reasons and findings when there is one."""

    def __init__(self, message: str, decision: object | None = None) -> None:
        super().__init__(message)
        self.decision = decision


class ScopeCreep(AuthorityError):
    """A delegation or call asks for more than its parent grant holds."""


class Revoked(AuthorityError):
    """A grant, or one of its ancestors, has been revoked."""


class Expired(AuthorityError):
    """A grant or invocation is outside its validity window."""


class InvalidSignature(AuthorityError):
    """A signature does not verify under the key it must verify under."""


class ApprovalRequired(Denied):
    """The policy requires a human approval before this call can run: ``Gate.run``/``arun`` given
    an authorization that still waits for one (ask for it, then decide the call again with it)."""


class BudgetExceeded(AuthorityError):
    """A reservation would take a budget below zero."""


class QuotaExceeded(AuthorityError):
    """A policy quota's current window cannot hold the call (``store.quotas``)."""


# --- scheduling ------------------------------------------------------------------------------


class SchedulingError(AgentGateError):
    """The task scheduler could not run a call."""


class Overloaded(SchedulingError):
    """A queue is full; the call was refused rather than queued.

    ``limit`` names the bound that refused it (the scheduler's: ``max_queued`` or
    ``tenant_max_queued``; None when not said)."""

    def __init__(self, message: str, *, limit: str | None = None) -> None:
        super().__init__(message)
        self.limit = limit


class DeadlineExceeded(SchedulingError):
    """A call could not start, or finish, before its deadline.

    ``tool``: the call's tool; ``waited_s``: how long it waited in the queue when it expired
    there (None: it expired while running, or not said)."""

    def __init__(self, message: str, *, tool: str | None = None, waited_s: float | None = None) -> None:
        super().__init__(message)
        self.tool = tool
        self.waited_s = waited_s


class TwinDeadlineExceeded(SchedulingError):
    """A call joined to a running twin (the same idempotency key) got no outcome from it: the
    twin was given up at its own deadline, before this call's. Not a ``DeadlineExceeded``: the
    deadline that passed is not this call's.

    ``tool``: the call's tool. The twin's ``DeadlineExceeded`` is its ``__cause__``."""

    def __init__(self, message: str, *, tool: str | None = None) -> None:
        super().__init__(message)
        self.tool = tool


class CircuitOpen(SchedulingError):
    """The circuit breaker for a tool or backend is open.

    ``key``: the breaker (``tool:<name>``, ``backend:<name>``); ``retry_after_s``: seconds until
    it lets a probe through (0: half open, its probes are all taken; None: not said)."""

    def __init__(self, message: str, *, key: str | None = None, retry_after_s: float | None = None) -> None:
        super().__init__(message)
        self.key = key
        self.retry_after_s = retry_after_s


# --- dispatch --------------------------------------------------------------------------------


class DispatchError(AgentGateError):
    """A model call could not be routed or served. ``sent``: whether any backend may have got the
    call; ``False`` for one known to have reached none (the gateway cut it, or the Dispatcher gave
    it up in line or refused it closed: ``NoBackend``), which ``Gate.run``/``Gate.arun`` settle as not started when it
    ends a ``model:`` call (released, an approval it used pending again). Made as any exception is
    (a message, or none, or several arguments), with ``sent`` by keyword only. ``sent`` is also a class attribute, so a subclass whose ``__init__`` does not
    call this one reads as one that may have been sent (until review R90c ``Gate.run`` then failed
    with ``AttributeError``, the reservation left held and no outcome written)."""

    sent: bool = True

    def __init__(self, *args: object, sent: bool = True) -> None:
        super().__init__(*args)
        self.sent = sent


class NoBackend(DispatchError):
    """No healthy backend that serves the model can take the request within its SLO.
    ``retry_after_s``: when every backend that could serve it is held down by its own
    ``Retry-After``, the seconds until the first of them is tried again; else ``None``.
    The Dispatcher sets ``sent`` ``False`` on one raised before any attempt was made (the call
    gave up in line, no backend having got it, or the dispatcher was closed: until a regression
    review of R90c that one kept ``sent`` true), over any transport; the gateway too, for one its
    pool saw sent nowhere."""

    def __init__(self, message: str, *, retry_after_s: float | None = None) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class UnknownModel(NoBackend):
    """No backend of the inventory serves the model at all (HTTP 404 ``model_not_found``): unlike
    its parent, no later try can succeed."""


class Shed(NoBackend):
    """Refused under load (priority class or tenant quota): HTTP 429 with ``retry_after_s``."""

    retry_after_s: float

    def __init__(self, message: str, retry_after_s: float) -> None:
        super().__init__(message, retry_after_s=retry_after_s)


class BackendFailed(DispatchError):
    """A backend answered with an error, garbage, or not at all. ``retry_after_s``: how long the
    backend asked not to be sent calls (its ``Retry-After`` on a 429 or 503, read by
    ``dispatch.backends.retry_after_s``); ``None`` when it named no usable time.
    ``after_output``: a stream that failed after some of its output was delivered (it cannot be
    sent again; it ran, so the Gate charges it its reservation)."""

    def __init__(
        self, message: str, *, retry_after_s: float | None = None, after_output: bool = False
    ) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s
        self.after_output = after_output


class RequestRejected(DispatchError):
    """A backend refused the request itself as invalid (HTTP 400, 413 or 422): the caller's to
    fix, not retried on another backend, the backend not marked down. Its message is the
    backend's name and words: "NAME rejected the request: HTTP 400: ...". The gateway answers it
    400 ``rejected_by_backend`` (until review R93 it matched that wording in any
    ``DispatchError``)."""


class BackendRejectedCredentials(BackendFailed):
    """A backend answered 401 or 403: it refused the credentials agentgate sent it (or wants some
    and none are configured). The dispatcher stops using it until it accepts them again."""


class UsageUnreadable(BackendFailed):
    """A backend answered a call (HTTP 200, its answer whole, or a stream before any output) with
    a usage that is not token counts (not an object; a count that is negative, fractional, text,
    or over ``MAX_USAGE_TOKENS``): the call ran, what it cost cannot be read. The dispatcher marks the
    backend down but sends the call to no other (it would run again), and the Gate and the
    gateway charge the call its reservation."""


class AnswerTooLarge(DispatchError):
    """A backend answered a call (HTTP 200) with more than agentgate reads of a non-streamed answer
    (``dispatch.backends.MAX_ANSWER_BYTES``): what the call asked for (many tokens with their
    log-probabilities, the prompt's log-probabilities) made it so, not a failure of the backend.
    The dispatcher neither retries it on another backend nor marks the backend down, and the
    gateway charges the call its reservation (the answer was generated; its usage cannot be read)."""


class CallerGone(DispatchError):
    """The gateway's caller went away (closed its connection) before its answer was delivered.
    ``sent`` ``False``: before it was sent. (Until review R90b a message was required and one
    more argument refused: a ``TypeError`` where ``Exception`` took them.)"""


class GatewayStopped(DispatchError):
    """The gateway stopped (its shutdown grace was over) while a call was running: the call was cut.
    ``sent`` ``False``: before it was sent."""


class BrokerError(DispatchError):
    """A GPU lease request or lease operation is refused: malformed, impossible, or unknown tenant."""


class LeaseLost(BrokerError):
    """A GPU lease is not held any more (released, expired, preempted) or was never granted."""


class NotRenewed(BrokerError):
    """A gated GPU lease renewal failed before the broker renewed anything: the store, or the
    audit log, could not record its decision, or the outcomes an earlier call left unrecorded
    (the message names which). The lease still ends when it did; renew it again (``__cause__``
    is the ``StoreError`` or ``AuditError``; a log that does not verify is ``TamperDetected``,
    not this). Not a ``StoreError``, which from ``renew`` means renewed."""


# --- evidence and storage --------------------------------------------------------------------


class StoreError(AgentGateError):
    """The store cannot be reached or refused a write; callers fail closed on it."""


class MalformedRow(StoreError):
    """A row of the store is not one agentgate writes (edited outside it): reading it again reads
    the same row, so nothing retries it; the message names the table and the row."""


class NotWriter(StoreError):
    """A GPU broker's journal is not (or no longer) its broker name's writer: another broker
    process took the name over, or wrote the state this broker restored since (review R96).
    Nothing was written, and this broker is not the authority: what it holds in memory does not
    stand (``Broker.renew`` raises ``LeaseLost`` for it, not this); stop it."""


class CommitUnknown(StoreError):
    """The connection to the store was lost while its transaction committed (PostgreSQL): the
    server may have committed it or not, and the client cannot tell which; nothing was retried.
    ``session``: the server process of the lost connection (its backend pid), when known: once
    it has ended, what its transaction wrote is final and visible to every other session."""

    def __init__(self, message: str, *, session: int | None = None) -> None:
        super().__init__(message)
        self.session = session


class NoStore(StoreError):
    """The store named does not exist, and the caller asked that none be created
    (``open_store(create=False)``): no file there, an empty file, another application's SQLite
    database, a PostgreSQL database without agentgate's tables. ``reason``: ``missing``,
    ``empty``, ``foreign`` (``tables``: the file's, sorted) or ``no_tables``."""

    def __init__(
        self,
        message: str,
        *,
        reason: Literal["missing", "empty", "foreign", "no_tables"],
        tables: tuple[str, ...] = (),
    ) -> None:
        super().__init__(message)
        self.reason = reason
        self.tables = tables


class NewerStore(StoreError):
    """The store records (``agentgate_schema``) that only an agentgate newer than this one may
    open it: a newer agentgate wrote it with a change this one would read or write wrongly.
    Refused as the store opens, read only or not, before anything is written; upgrade agentgate.
    ``recorded``: the schema version of the newest agentgate that wrote the store; ``known``:
    this code's; ``oldest_writer``: the oldest schema version that may open it."""

    def __init__(self, message: str, *, recorded: int, known: int, oldest_writer: int) -> None:
        super().__init__(message)
        self.recorded = recorded
        self.known = known
        self.oldest_writer = oldest_writer


class LogDropped(StoreError):
    """The store records that its audit log was made (``agentgate_store_parts``), and the log's
    tables are gone: a log dropped, not one never started; or it records its record of repairs
    (``audit_repairs``) as made, and that table is gone. Nothing is created in its place: a new
    log at index 0 would verify as intact, a new record of repairs would hold none."""


class AuditError(AgentGateError):
    """The audit log cannot be written or read."""


class TamperDetected(AuditError):
    """The audit log, a checkpoint or a proof does not verify."""


class BeyondLogEnd(InputError):
    """A tree size or index asked for is past the end of the audit log (input, not tampering);
    one past 128 bits is named by its size (``quoted``: until review R86c one of 10**5000 made
    the refusal a bare ``ValueError``)."""

    def __init__(self, requested: int, size: int, what: str = "size") -> None:
        entries = "entry" if size == 1 else "entries"
        super().__init__(f"audit log has only {size} {entries}; {what} {quoted(requested)} is past its end")
        self.requested = requested
        """The size or index asked for."""
        self.size = size
        """Entries the log holds."""


class SettlementRefused(InputError):
    """A settlement by hand is refused: the budget reservation (``agentgate budget settle``) or
    the call that must run once (``agentgate tasks settle``) does not exist, is settled already
    (also by its own process meanwhile), or is too recent (its call may still be running); a
    reservation that belongs to a call that must run once or to a GPU lease is settled with it.
    CLI exit code 1."""


class NotHeld(InputError):
    """A budget reservation to settle is not held: no such reservation, or one settled already
    (by hand, by another process); the ledger never settles one twice."""


class RepairRefused(InputError):
    """An acceptance of an audit log repair is refused (``agentgate audit accept-repair``): the id
    names no repair recorded in ``audit_repairs`` (or the store records none), or the repair was
    accepted already. Nothing is written. CLI exit code 1."""
