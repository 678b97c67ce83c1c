"""How the ``Gate`` writes outcomes (``_Settlement``): each settled call's ``outcome`` entry with
its budget settlement, carried by the next decision's transaction or committed by the background
thread (``_outcomes.PendingOutcomes``)."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Generator, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from typing import TYPE_CHECKING

from opentelemetry.trace import Span

from agentgate.audit.entry import utc_now
from agentgate.audit.spans import outcome_not_written, outcome_written
from agentgate.errors import AgentGateError, CommitUnknown, InputError, MalformedRow, NotHeld, StoreError
from agentgate.gate._authorization import Authorization
from agentgate.gate._lock import _serialized
from agentgate.gate._outcomes import RESULT_REUSED, USAGE_UNREAD, PendingOutcome, PendingOutcomes
from agentgate.gate._records import recordable
from agentgate.store import Store, Transaction
from agentgate.store.audit import AuditLog
from agentgate.store.ledger import BudgetLedger, Reservation
from agentgate.store.once import OnceCalls, OnceState

_log = logging.getLogger("agentgate.gate")


OUTCOME_RETRY_S = 1.0
"""How long the background thread waits before it tries again outcomes whose commit failed."""


OUTCOME_RETRY_FOR_S = 300.0
"""How long an outcome the store refuses on its own (a trigger, a lock or statement timeout on
its budget row) is tried again, from its first refusal, before it is dropped (logged); its
reservation then stays held until its grant expires. Never one that met a malformed row
(``MalformedRow``: reading it again reads the same row) or a reservation settled already
(``NotHeld``): such an outcome is written at once without it (``_Settlement._carry``)."""


class _Deciding:
    """What the current decision transaction keeps until its end is known: the spans waiting
    for its commit (``_after_commit``), and the allows it wrote that leave something to settle
    (``_allowed``: settled as not run should its COMMIT's answer be lost), each with the time
    of its ``allow`` entry (``None`` for one read back by its reservations)."""

    __slots__ = ("allowed", "spans")

    def __init__(self) -> None:
        self.spans: list[Callable[[], None]] = []
        self.allowed: list[tuple[Authorization, str | None]] = []


_DECIDING: ContextVar[_Deciding | None] = ContextVar("agentgate_deciding", default=None)
"""The current decision transaction's ``_Deciding``; ``None`` outside one."""
LOST_UNRESERVED = (
    "the commit of this call's decision was not acknowledged (the connection to the store was lost "
    "once it was sent; CommitUnknown): the call was not run"
)
"""The reason of the outcome that settles an allow whose commit was not known (``_settle_unknown``)
and that reserved nothing (review R70: until then it said its reservation was released)."""
LOST_DECISION = f"{LOST_UNRESERVED}, and its reservation is released"
"""The reason of the outcome that settles an allow whose commit was not known (``_settle_unknown``)."""


class _CarryFailed(Exception):
    """An outcome carried by a transaction could not be written: roll the transaction back."""


class _Settlement:
    """The ``Gate``'s outcomes: ``_settle`` queues a call's outcome; a decision's transaction
    (``_decision_transaction``) and the background commit write what is pending first
    (``_carrying``: all at once, else one by one under savepoints, those the store refused tried
    again); ``_write_outcome`` writes one (its entry, its reservations committed or released,
    a once-only call's state, an approval re-armed); ``flush`` commits them now."""

    # The gate's state this part reads (``Gate.__init__`` sets it).
    store: Store
    audit: AuditLog
    ledger: BudgetLedger
    once: OnceCalls
    _store_lock: threading.RLock
    _outcomes: PendingOutcomes
    _outcome_refused_at: dict[int, float]
    _outcome_spans: dict[int, Span]
    _outcome_at: dict[int, tuple[int, str]]
    _decided_unknown: dict[int, tuple[Authorization, int, str | None]]

    if TYPE_CHECKING:  # what this part calls of the gate's other parts

        def _reported_cost(
            self, auth: Authorization, usage: tuple[int, int], reasons: list[str]
        ) -> dict[str, int] | None: ...

        def _rearm_approval(
            self, tx: Transaction, auth: Authorization, status: str, reasons: list[str]
        ) -> None: ...

    @contextmanager
    def _decision_transaction(self) -> Iterator[Transaction]:
        """A store transaction for a decision that also commits the outcomes pending until now;
        once it has committed, the spans of the entries it wrote that no caller makes itself
        (``_after_commit``) are made."""
        carried = self._outcomes.take()
        deciding = _Deciding()
        token = _DECIDING.set(deciding)
        try:
            # The carrying generator itself, not its context manager: one is entered per
            # decision, and the context manager's machinery around it cost 9k instructions
            # (review R62, sixteenth performance pass, docs/langgraph.md).
            yield from self._carried(carried)
        except BaseException as exc:
            self._outcomes.restore(carried)
            if isinstance(exc, CommitUnknown):
                self._settle_unknown(deciding.allowed, exc.session)
            raise
        finally:
            _DECIDING.reset(token)
        for span in deciding.spans:
            span()

    @staticmethod
    def _after_commit(span: Callable[[], None]) -> None:
        """Make ``span`` (the span of an entry written in the current decision transaction) once
        that transaction has committed: a span never links an entry rolled back. Outside a
        decision transaction it is made now."""
        deciding = _DECIDING.get()
        if deciding is None:
            span()
        else:
            deciding.spans.append(span)

    @staticmethod
    def _allowed(auth: Authorization, written: str | None = None) -> None:
        """Note ``auth``, an allow just written in the current decision transaction, if it leaves
        something to settle: settled as not run should that transaction's end not be known. One
        holding reservations is read back by them; one without, a once-only call's or one that
        used an approval, by its ``allow`` entry's time, ``written`` (without it, not noted)."""
        deciding = _DECIDING.get()
        if deciding is None:
            return
        if auth.reservations:
            deciding.allowed.append((auth, None))
        elif written is not None and (auth.once_key is not None or auth.approver is not None):
            deciding.allowed.append((auth, written))

    def _settle_unknown(self, allowed: list[tuple[Authorization, str | None]], session: int | None) -> None:
        """Queue a not-run outcome for each of ``allowed``, the allows of a decision transaction
        whose COMMIT was sent but not answered (``CommitUnknown``; the caller got no allow, so
        the call never runs), to be written only if that transaction turns out committed
        (``_decision_committed``). Until review R69 their reservations stayed held until
        settled by hand (``agentgate budget settle ID --not-run``), and until review R70 so
        did an allow without one: a once-only call's row stayed ``started`` (``agentgate tasks
        settle KEY --not-run``), an approval it used stayed used. ``session``: the server
        process of the lost connection; without it nothing is queued (left held, as before)."""
        if session is None:
            return
        for auth, written in allowed:
            self._decided_unknown[id(auth)] = (auth, session, written)
            lost = LOST_DECISION if auth.reservations else LOST_UNRESERVED
            self._settle(auth, "error", lost, None, started=False)

    def _decision_committed(self, tx: Transaction, auth: Authorization) -> bool:
        """Whether the decision of ``auth`` (``_settle_unknown``) committed and is not settled
        yet, read in ``tx``; from then on its outcome is written as any other. With
        reservations: they are still held (a reservation's id is never made twice, so one held
        is this decision's, committed). Without (``_allowed``): the entry at its audit index is
        its ``allow``, written at the time noted (another allow may take that index once the
        decision rolled back: the same call decided again, whose row must not be settled), and
        a once-only call's row is still ``started`` by it (not settled by hand meanwhile).

        Read only once the server process of the lost connection is no longer in the
        transaction (``Store.may_be_committing``: it has ended, or lingers idle; that
        transaction is then final and visible, committed or not, to a statement later, in a
        snapshot of its own): until then ``StoreError``, and the outcome is tried again
        (``_carry``), left held if that process stays in it for ``OUTCOME_RETRY_FOR_S``. Read
        again until a transaction that read it commits (``_forget_written``): until review R69
        (helper review) it was forgotten as it was read, and when that transaction was rolled
        back the outcome was then written without it, an ``outcome`` entry for a decision the
        server never committed."""
        _, session, written = self._decided_unknown[id(auth)]
        if self.store.may_be_committing(session, tx):
            raise StoreError(
                f"the decision at audit entry {auth.audit_index} may still be committing (server "
                f"process {session}, whose connection was lost, is still in its transaction): its "
                "outcome waits"
            )
        if auth.reservations:
            return bool(self.ledger.still_held([r for r, _, _ in auth.reservations], tx))
        assert auth.audit_index is not None  # an allow is in the log
        try:
            entry = self.audit.entry(auth.audit_index, tx)
        except InputError:  # none there (rolled back, the log's end): not committed
            return False
        if entry.kind != "allow" or entry.time != written:
            return False
        if auth.once_key is None:
            return True
        return self.once.last(tx, auth.once_key) == ("started", auth.audit_index)

    @contextmanager
    def _carrying(self, batch: list[PendingOutcome]) -> Iterator[Transaction]:
        """A store transaction that writes the outcomes of ``batch`` first (the audit lock taken
        before any row: one lock order for every writer, PostgreSQL), then holds what the caller
        writes. When an outcome cannot be written, that transaction (nothing else in it yet) is
        rolled back whole and a second one writes each outcome that can be, under savepoints."""
        yield from self._carried(batch)

    def _carried(self, batch: list[PendingOutcome]) -> Generator[Transaction, None, None]:
        """``_carrying``'s generator: yields the transaction once. A batch with the outcome of a
        lost decision (``_decided_unknown``), which waits while that decision may still be
        committing (``_decision_committed``), is written with ``_carry`` at once: until review
        R69 (helper review) each decision that carried it made a first transaction, rolled back
        whole, then a second."""
        try:
            if self._decided_unknown and any(id(outcome[0]) in self._decided_unknown for outcome in batch):
                raise _CarryFailed
            with self.store.transaction() as tx:
                self.audit.lock(tx)
                self._carry_all(tx, batch)
                yield tx
            self._forget_written(batch)  # committed: written
            return
        except _CarryFailed:
            pass
        dropped: list[tuple[PendingOutcome, Exception]] = []
        with self.store.transaction() as tx:
            self.audit.lock(tx)
            refused = self._carry(tx, batch, dropped)
            yield tx
        self._outcomes.restore(refused, retry_after_s=OUTCOME_RETRY_S)  # committed: try them again
        if self._outcome_spans or self._decided_unknown or self._outcome_at:
            for outcome, exc in dropped:
                self._span_refused(outcome[0], exc)
            kept = {id(outcome) for outcome in refused}
            self._forget_written([outcome for outcome in batch if id(outcome) not in kept])

    def _forget_written(self, written: list[PendingOutcome]) -> None:
        """Forget what ``written`` outcomes, committed, waited for: whether a lost decision
        committed (``_decided_unknown``, read in the transaction that wrote them), where an
        earlier transaction whose end is not known appended them (``_outcome_at``); their call
        spans say so and end (``_outcome_spans``)."""
        if self._outcome_at:
            for outcome in written:
                self._outcome_at.pop(id(outcome[0]), None)
        if self._decided_unknown:
            for outcome in written:
                self._decided_unknown.pop(id(outcome[0]), None)
        if self._outcome_spans:
            for outcome in written:
                span = self._outcome_spans.pop(id(outcome[0]), None)
                if span is not None:
                    outcome_written(span)

    def _spans_lost(self, lost: list[PendingOutcome], failure: str | None = None) -> None:
        """The call spans of ``lost`` outcomes, which nothing will write (the gate closed;
        ``failure``: the class name of what the last commit raised, if it raised), say so and
        end (``_outcome_spans``)."""
        for outcome in lost:
            span = self._outcome_spans.pop(id(outcome[0]), None)
            if span is not None:
                outcome_not_written(span, failure)

    def _span_refused(self, auth: Authorization, exc: Exception) -> None:
        """The call span of ``auth``'s outcome, which the store refused for good (``exc``), says
        so and ends (``outcome_not_written``), if the call had one. It alone says so: until
        review R70 an ``outcome_lost`` child span (review R68) said it again, with nothing the
        call's span lacks since review R69, and a refusal counted by span was counted twice."""
        span = self._outcome_spans.pop(id(auth), None)
        if span is not None:
            outcome_not_written(span, type(exc).__name__)

    def _settle(
        self,
        auth: Authorization,
        status: str,
        error: str | None,
        usage: tuple[int, int] | None,
        *,
        started: bool = True,
        reused: bool = False,
        span: Span | None = None,
    ) -> None:
        """Queue ``auth``'s outcome. ``reused``: the scheduler served the call another call's
        result (``_write_outcome`` gives ``RESULT_REUSED`` last). ``span``: the call's span, held by the caller until the
        outcome is written (``spans.await_outcome``): it ends once the outcome is committed
        (``_forget_written``), or refused for good (``_span_refused``), or left when the gate
        closed (``_spans_lost``)."""
        if span is not None and span.is_recording():
            self._outcome_spans[id(auth)] = span
        # The decision was durable before the call ran; the outcome and its budget settlement
        # (one transaction for both) ride with the next decision or the background commit.
        self._outcomes.put((auth, status, error, usage, started, reused))

    def _write_outcomes(self, batch: list[PendingOutcome]) -> None:
        try:
            with self._carrying(batch):
                pass
        except AgentGateError as exc:
            # Kept, not dropped: a store that was restarted or unreachable takes them at a later
            # commit (a decision's, or this thread's, retried once a second).
            self._outcomes.restore(batch, retry_after_s=OUTCOME_RETRY_S)
            _log.error("agentgate: %d outcomes not recorded yet (kept, retried): %s", len(batch), exc)
        except BaseException:  # Ctrl-C or SIGTERM in the commit: kept for the flush at exit
            self._outcomes.restore(batch)
            raise

    def _carry_all(self, tx: Transaction, batch: list[PendingOutcome]) -> None:
        """Write every outcome of ``batch`` first thing in ``tx``, without a savepoint; raise
        ``_CarryFailed`` when one cannot be written, for the caller to roll ``tx`` back whole
        (nothing else is in it) and write them with ``_carry``. Outcomes nearly always can be
        written: the savepoint that guarded them cost two statements per decision (about 10 us
        on SQLite, two round trips on PostgreSQL)."""
        try:
            for outcome in batch:
                self._write_outcome(tx, *outcome)
        except Exception as exc:  # also an unforeseen one: it must not fail every later decision
            raise _CarryFailed from exc

    def _carry(
        self, tx: Transaction, batch: list[PendingOutcome], dropped: list[tuple[PendingOutcome, Exception]]
    ) -> list[PendingOutcome]:
        """Write ``batch`` in ``tx`` under a savepoint; the outcomes the store refused, to be
        tried again once ``tx`` has committed. Those not written for good are added to
        ``dropped``, with why, for their spans once ``tx`` has committed (``_span_refused``).

        An outcome that cannot be written (logged) never takes the others, or the decision that
        carries them, down with it. Its reservation stays held, which can only make a budget
        look smaller, never let it be overspent. One savepoint for the batch; one per outcome
        only after the batch failed. (Decisions try ``_carry_all`` first.) An outcome the store
        refused (``StoreError``, a driver error: a trigger, a lock timeout on its budget row) is
        returned, to be tried again for ``OUTCOME_RETRY_FOR_S``; one refused for its own sake
        (anything else) is dropped at once. One that met a reservation it cannot settle is
        written at once without settling it (``_written_past``): a malformed row
        (``MalformedRow``, edited outside agentgate; until review R67 tried again for
        ``OUTCOME_RETRY_FOR_S``, failing every time, then dropped), or one settled already
        (``NotHeld``: by hand, ``agentgate tasks settle`` or ``budget settle``, while the call
        still ran; until review R67 dropped: a once-only call settled as not run stayed so, and
        was allowed to run a second time)."""
        if not batch:
            return []
        # Any exception, not only the store's: one outcome that cannot be written for a reason
        # nobody foresaw (a backend's garbage usage) must not put itself back before every later
        # decision and fail them all, nor end the thread that commits outcomes.
        try:
            with tx.savepoint("agentgate_outcomes"):
                for outcome in batch:
                    self._write_outcome(tx, *outcome)
        except Exception:
            refused: list[PendingOutcome] = []
            for outcome in batch:
                try:
                    with tx.savepoint("agentgate_outcome"):
                        self._write_outcome(tx, *outcome)
                except Exception as exc:
                    if isinstance(exc, (MalformedRow, NotHeld)) and self._written_past(tx, outcome):
                        continue
                    if self._try_again(outcome[0], exc):
                        refused.append(outcome)
                    else:
                        _log.error(
                            "agentgate: outcome of audit entry %s not recorded: %s",
                            outcome[0].audit_index,
                            exc,
                        )
                        dropped.append((outcome, exc))
            return refused
        return []

    def _written_past(self, tx: Transaction, outcome: PendingOutcome) -> bool:
        """Write ``outcome`` in ``tx`` under a savepoint, each of its reservations settled under
        one of its own, past those it cannot settle, each named in a reason of the outcome: one
        whose row is malformed is left as it is, held (nothing can say what to give back to
        which budget; it goes with its grant), one settled already is not settled again (what
        settled it stands: never charged twice). The rest is written as ever: the entry, a
        once-only call's state (the call's own word over a hand's guess: a call settled as not
        run that did run is never allowed again). Whether it was written: not when something
        else of it fails too (logged by the caller, never tried again)."""
        try:
            with tx.savepoint("agentgate_outcome"):
                self._write_outcome(tx, *outcome, careful=True)
        except Exception:
            return False
        return True

    def _try_again(self, auth: Authorization, exc: Exception) -> bool:
        """Whether an outcome that ``exc`` kept from being written is to be tried again (see
        ``_carry``); logged when it is."""
        if isinstance(exc, MalformedRow) or not isinstance(exc, (StoreError, *self.store.driver_errors)):
            self._dropped(auth)
            return False
        now = time.monotonic()
        first = self._outcome_refused_at.setdefault(id(auth), now)
        if now - first > OUTCOME_RETRY_FOR_S:
            self._dropped(auth)
            return False
        _log.warning(
            "agentgate: outcome of audit entry %s not recorded yet (kept, retried): %s", auth.audit_index, exc
        )
        return True

    def _dropped(self, auth: Authorization) -> None:
        """Forget what ``auth``'s outcome, dropped for good (``_try_again``), waited for: its id
        may name another one later."""
        self._outcome_refused_at.pop(id(auth), None)
        self._decided_unknown.pop(id(auth), None)
        self._outcome_at.pop(id(auth), None)

    def _write_outcome(
        self,
        tx: Transaction,
        auth: Authorization,
        status: str,
        error: str | None,
        usage: tuple[int, int] | None,
        started: bool,
        reused: bool,
        *,
        careful: bool = False,
    ) -> None:
        """Write one outcome in ``tx``: its reservations settled, a once-only call's state, an
        approval re-armed, its ``outcome`` entry, whose reasons end with ``RESULT_REUSED`` for a
        call the scheduler served another call's result (``reused``: after the error, the usage's
        and the settlement's reasons, as docs/audit-format.md says; until review R90b it was
        joined to the error's text and came before them). ``careful``: each reservation settled under a
        savepoint, one it cannot settle left as it is and named in the reasons (``_written_past``).
        Nothing when the outcome is in the log already: written by a transaction whose COMMIT
        the server carried out but whose answer was lost (``CommitUnknown``; until review R68 it
        was written again, a second ``outcome`` entry for the call saying its reservation "was
        settled before this outcome")."""
        if self._outcome_at and self._in_log(tx, auth):
            return
        if (
            self._decided_unknown
            and id(auth) in self._decided_unknown
            and not self._decision_committed(tx, auth)
        ):
            return  # its decision never committed, or was settled by hand: nothing to settle
        identity = auth.identity
        reasons = [error] if error else []
        actual = None
        if usage is USAGE_UNREAD:
            reasons.append("the call ran but its usage could not be read; charged as reserved")
        elif usage is None:
            if status == "ok" and auth.reservations and auth.call.resource.startswith("model:"):
                reasons.append("no usage was reported; charged as reserved")
        else:
            actual = self._reported_cost(auth, usage, reasons)
        charges: dict[str, dict[str, int]] = {}
        delta = self._settle_reservations(
            tx,
            auth,
            status == "ok" or actual is not None or usage is USAGE_UNREAD,
            actual,
            reasons,
            charges,
            careful,
        )
        if auth.once_key is not None:
            assert auth.audit_index is not None  # a once-only call's allow is in the log
            self.once.finish(tx, auth.once_key, _once_state(status, started), auth.audit_index)
        if (status == "paused" or not started) and auth.approver:
            self._rearm_approval(tx, auth, status, reasons)
        if reused:
            reasons.append(RESULT_REUSED)
        written = utc_now()
        index = self.audit.append(
            {
                "kind": "outcome",
                "time": written,
                "principal": identity.did if identity else "unknown",
                "chain_hash": identity.grant_id if identity else None,
                "resource": auth.call.resource,
                "status": status,
                "ref": auth.audit_index,
                "budget_delta": delta,
                "reasons": [recordable(r) for r in reasons],
                "charges": charges or None,
            },
            tx,
        )
        self._outcome_at[id(auth)] = (index, written)
        if self._outcome_refused_at:  # written (if ``tx`` commits): no longer one being retried
            self._outcome_refused_at.pop(id(auth), None)

    def _in_log(self, tx: Transaction, auth: Authorization) -> bool:
        """Whether ``auth``'s outcome is the entry at the index an earlier transaction appended it
        at (``_outcome_at``), read in ``tx``. The entry's time tells it from another one there
        (that transaction rolled back, and another writer's entry took the index). It is kept
        until a transaction that wrote or found the outcome commits (``_forget_written``), or
        the outcome is dropped (``_dropped``): until review R93 any end but ``CommitUnknown``
        forgot it, and when the retry after a lost COMMIT's answer failed too (its BEGIN, a lock
        timeout, Ctrl-C) the next commit wrote the outcome a second time, saying its reservation
        "was settled before this outcome"."""
        at = self._outcome_at.get(id(auth))
        if at is None:
            return False
        index, written = at
        try:
            entry = self.audit.entry(index, tx)
        except InputError:  # none there (rolled back, the log's end): not written
            return False
        return entry.kind == "outcome" and entry.ref == auth.audit_index and entry.time == written

    def _settle_reservations(
        self,
        tx: Transaction,
        auth: Authorization,
        charge: bool,
        actual: Mapping[str, int] | None,
        reasons: list[str],
        charges: dict[str, dict[str, int]],
        careful: bool = False,
    ) -> int:
        """Commit ``auth``'s reservations at their ``actual`` cost (else as reserved) when
        ``charge``, else release them; returns what the caller's own budget was charged. What
        each grant was charged, by unit, is added to ``charges`` (the outcome entry's), and an
        overrun to ``reasons``. ``careful`` (``_write_outcome``): each under a savepoint, one
        that cannot be settled (``MalformedRow``, ``NotHeld``) left as it is, named in ``reasons``,
        but for one released by hand whose call ran, charged now (``_charge_released``)."""
        delta = 0
        for position, (reservation, unit, amount) in enumerate(auth.reservations):
            if careful:
                try:
                    with tx.savepoint("agentgate_reservation"):
                        used = self._settle_one(
                            tx, reservation, unit, amount, charge, actual, reasons, charges
                        )
                except MalformedRow as exc:
                    _log.warning("agentgate: outcome of audit entry %s: %s", auth.audit_index, exc)
                    reasons.append(f"{exc}; left held, not settled")
                    continue
                except NotHeld as exc:
                    _log.warning("agentgate: outcome of audit entry %s: %s", auth.audit_index, exc)
                    late = self._charge_released(
                        tx, auth, reservation, unit, amount, charge, actual, reasons, charges
                    )
                    if late is None:
                        continue
                    used = late
            else:
                used = self._settle_one(tx, reservation, unit, amount, charge, actual, reasons, charges)
            if position == 0:  # the unit of the caller's own budget (``_caps``)
                delta = used
        return delta

    def _charge_released(
        self,
        tx: Transaction,
        auth: Authorization,
        reservation: str,
        unit: str,
        amount: int,
        charge: bool,
        actual: Mapping[str, int] | None,
        reasons: list[str],
        charges: dict[str, dict[str, int]],
    ) -> int | None:
        """A reservation of ``_settle_reservations`` that was settled before its call's outcome
        (by hand, or by another process): what it is charged now, or ``None`` (nothing). One a
        person released (``--not-run``) whose call did run (``charge``) is charged as the call
        ran, each budget at most what it has left, the overrun named in ``reasons``
        (``BudgetLedger.charge_released``): a demanding operator's budget counts every call that
        ran, and one that cannot be charged in full says so. Until review R68 it was charged
        nothing. One a person charged as reserved (``--ran``) whose call reports using more is
        charged the rest the same way (``BudgetLedger.charge_more``; until review R69 nothing
        more); one that used less keeps the hand's charge, said in ``reasons`` (an outcome's
        ``charges`` cannot refund). One whose row was pruned since is named as such: nothing is
        charged, and the reason says where its settlement is (until review R69 it read "settled
        before", and a call released by hand that ran went uncharged unsaid). Anything else
        (committed at its cost already, a row that cannot be charged) is left as it is (never
        charged twice), named in ``reasons``."""
        used = actual.get(unit, amount) if actual is not None else amount
        if charge:
            try:
                with tx.savepoint("agentgate_late_charge"):
                    charged = self.ledger.charge_released(reservation, used, tx)
            except (NotHeld, MalformedRow) as exc:
                if isinstance(exc, MalformedRow):
                    reasons.append(f"{exc}; not charged")
                    return None
            else:
                self._late_charges(unit, used, charged, reasons, charges)
                reasons.append(
                    f"reservation {reservation} was released before this outcome (settled by hand as "
                    "not run), but the call ran: charged now"
                )
                return used
        try:
            found = self.ledger.settled(reservation, tx)
        except MalformedRow as exc:
            reasons.append(f"{exc}; not settled again")
            return None
        if found is None:
            cost = f"{used} {unit}" if charge else "nothing"
            reasons.append(
                f"reservation {reservation} was settled before this outcome and its row then pruned "
                f"(agentgate store prune): nothing was charged or released by this outcome (the call "
                f"used {cost}; if it was settled as not run, that is in no budget); its settlement "
                f"is among the entries of agentgate audit explain {auth.audit_index}"
            )
            return None
        if charge and found.state == "committed" and found.actual == found.amount and used != found.amount:
            return self._trued_up(tx, found, unit, used, reasons, charges)
        reasons.append(
            f"reservation {reservation} was settled before this outcome (by hand, or by "
            "another process); not settled again"
        )
        return None

    def _trued_up(
        self,
        tx: Transaction,
        found: Reservation,
        unit: str,
        used: int,
        reasons: list[str],
        charges: dict[str, dict[str, int]],
    ) -> int | None:
        """``_charge_released`` of a reservation a person charged as reserved (``found``) whose
        call reports ``used``: charged the rest when it is more (what was charged now), else the
        hand's charge stands (``None``); said in ``reasons`` either way."""
        hand = f"reservation {found.id} was charged as reserved ({found.amount}) by hand before this outcome"
        if used < found.amount:
            reasons.append(f"{hand}; the call used {used}, less: that charge stands, not refunded")
            return None
        try:
            with tx.savepoint("agentgate_late_charge"):
                charged = self.ledger.charge_more(found.id, used, tx)
        except (NotHeld, MalformedRow) as exc:  # settled otherwise meanwhile (PostgreSQL)
            reasons.append(f"{hand}; not charged again: {exc}")
            return None
        more = used - found.amount
        self._late_charges(unit, more, charged, reasons, charges)
        reasons.append(f"{hand}, but the call used {used}: {more} more charged now")
        return more

    @staticmethod
    def _late_charges(
        unit: str, due: int, charged: dict[str, int], reasons: list[str], charges: dict[str, dict[str, int]]
    ) -> None:
        """Record what a late outcome ``charged`` each grant in ``charges``, and in ``reasons`` an
        overrun: the part of ``due`` a budget could not cover."""
        for grant_id, n in charged.items():
            charges.setdefault(grant_id, {})[unit] = n
        short = max((due - n for n in charged.values()), default=0)
        if short:
            reasons.append(f"overran the {unit} budget by {short}; the budget is exhausted")

    def _settle_one(
        self,
        tx: Transaction,
        reservation: str,
        unit: str,
        amount: int,
        charge: bool,
        actual: Mapping[str, int] | None,
        reasons: list[str],
        charges: dict[str, dict[str, int]],
    ) -> int:
        """One reservation of ``_settle_reservations``: what it was charged (0 when released)."""
        if not charge:
            self.ledger.release(reservation, tx)
            return 0
        used = actual.get(unit, amount) if actual is not None else amount
        if used > amount:
            # Charged in full all the same (the budget is the limit, not the reservation), but
            # said: until review R69 nothing told an operator that reservations run short (a
            # prompt estimate too low) until a budget ran out.
            reasons.append(
                f"the reported usage costs {used} {unit}, {used - amount} over the {amount} reserved"
            )
        # The call has run: its cost is recorded even when it overruns what was left.
        charged = self.ledger.charge(reservation, used, tx, exhaust=True)
        for grant_id, n in charged.items():
            charges.setdefault(grant_id, {})[unit] = n
        short = max((used - n for n in charged.values()), default=0)
        if short:
            reasons.append(f"overran the {unit} budget by {short}; the budget is exhausted")
        return used

    @_serialized
    def flush(self) -> None:
        """Commit every outcome pending now (failures are logged; see ``_carry``)."""
        self._outcomes.flush()


def _once_state(status: str, started: bool) -> OnceState:
    """The state a call that must run once is left in by an outcome of ``status``."""
    if status == "ok":
        return "ok"
    if status == "paused":
        return "paused"
    return "error" if started else "not_run"
