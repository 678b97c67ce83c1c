"""Scheduling state shared by processes and hosts: concurrency leases that expire when their
holder dies, token buckets for rate limits, and circuit breaker states.

A limit of N for a key (``tool:payments.refund``) is N rows ``(lease_key, slot)``, slot in
``0..N-1``. Taking a slot is one conditional upsert: insert the row, or take it over if its
lease has expired (``ON CONFLICT ... DO UPDATE ... WHERE expires_at <= now``). On PostgreSQL the
conflicting row is locked and the ``WHERE`` is re-checked on its newest version, so two
processes can never both get a slot; on SQLite ``BEGIN IMMEDIATE`` serializes the writers.

A holder renews all of the leases it holds in one statement from a heartbeat thread every
``ttl_s / 3``, so a live holder keeps its slots however long its call runs, and the slots of a
holder that was killed (SIGKILL, a lost host) come back at most ``ttl_s`` after its last
heartbeat. A lease it gave back is never renewed again, even when the store did not take the
release (it was unreachable): that slot comes back at most ``ttl_s`` later. A live holder that
did not renew within ``ttl_s`` (paused, cut off from the store) may find its slot taken over: its
next renewal forgets such a lease, with a warning (``LeaseManager._lost``).

A rate limit shared by processes is one row per key: the token level and when it was last
brought up to date. Taking a token reads the row, refills it for the time passed (never for time
running backwards between two hosts' clocks), and writes it back only if the row is still what
was read (compare and swap); a lost race is retried. The takers of a bucket wait for each other
(SQLite's ``BEGIN IMMEDIATE``; on PostgreSQL the read locks the row, ``FOR UPDATE``), so a taker
does not lose its swap to another taker. A row's time more than ``BUCKET_AHEAD_S``
ahead of the taker's clock was written by a clock that has been stepped back since (or is far
off): it is believed only that far ahead and written back so, else a single forward step of one
host's clock would leave the bucket empty, for every process, until the wall clock caught up.

A breaker state shared by processes is one row per breaker key: ``open`` or ``closed``, the wall
time of that transition (``opened_at``: when it opened, or closed), and a version that every
write increases. A process publishes its own transitions to open and to closed and adopts newer
ones it reads (half-open is derived locally from the opening time), so one process seeing a
backend fail opens the breaker for all. Newer is by transition time, not by version: a write
takes only when it is newer than the row (an opening outranks a closing at the same time), so a
publication that comes late changes nothing, and a process adopts a row only when it is newer
than the latest transition it knows (its own or one adopted), so a row restored from a backup,
its version back to a lower number, neither wins nor hides the transitions written after it. A
row dated more than ``BREAKER_AHEAD_S`` ahead of a process's clock is taken as older than any. A
half-open probe holds a claim, a lease slot of ``probe:<breaker key>`` (``half_open_max_calls``
slots), so the bound holds across processes (``SharedBreakers.probe_guard`` and ``reopen``).

Expiry, refill and transition times are the holders' wall clocks (``time.time()``): hosts must keep their
clocks within a small fraction of ``ttl_s`` of each other (NTP does). A scheduler dates a breaker
transition made after one it knows just after that one (``_BreakerSharing``), so only transitions
of hosts that know nothing of each other, closer together than their clocks' offset, may be
ordered wrongly (the later one dropped); a host more than ``BREAKER_AHEAD_S`` ahead has its rows
overwritten by every other.
"""

from __future__ import annotations

import hashlib
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass

from agentgate._numbers import finite
from agentgate._shown import quoted, shown
from agentgate.errors import InputError, StoreError
from agentgate.store._base import Dialect, Store, Transaction, positive_number, unstorable_text, whole_number

_logger = logging.getLogger(__name__)

_TABLES = """
CREATE TABLE IF NOT EXISTS agentgate_leases (
    lease_key TEXT NOT NULL,
    slot INTEGER NOT NULL,
    holder TEXT NOT NULL,
    lease_id TEXT NOT NULL,
    expires_at {real} NOT NULL,
    PRIMARY KEY (lease_key, slot)
);
CREATE INDEX IF NOT EXISTS agentgate_leases_holder ON agentgate_leases (holder);
CREATE TABLE IF NOT EXISTS agentgate_rate_buckets (
    bucket_key TEXT PRIMARY KEY,
    tokens {real} NOT NULL,
    updated_at {real} NOT NULL
);
CREATE TABLE IF NOT EXISTS agentgate_breakers (
    breaker_key TEXT PRIMARY KEY,
    state TEXT NOT NULL,
    opened_at {real} NOT NULL,
    version {integer} NOT NULL
);
"""

SCHEMA: dict[Dialect, str] = {
    "sqlite": _TABLES.format(real="REAL", integer="INTEGER"),
    "postgresql": _TABLES.format(real="DOUBLE PRECISION", integer="BIGINT"),
}

_TAKEN = "SELECT slot FROM agentgate_leases WHERE lease_key = ? AND expires_at > ?"
_CLAIM = (
    "INSERT INTO agentgate_leases (lease_key, slot, holder, lease_id, expires_at) VALUES (?, ?, ?, ?, ?) "
    "ON CONFLICT (lease_key, slot) DO UPDATE SET holder = excluded.holder, lease_id = excluded.lease_id, "
    "expires_at = excluded.expires_at WHERE agentgate_leases.expires_at <= ?"
)
_RELEASE = "DELETE FROM agentgate_leases WHERE lease_key = ? AND slot = ? AND lease_id = ? AND holder = ?"
_RENEW = "UPDATE agentgate_leases SET expires_at = ? WHERE holder = ? AND lease_id IN ({ids})"
_HELD = "SELECT lease_id FROM agentgate_leases WHERE holder = ? AND lease_id IN ({ids})"
_RENEW_BATCH = 500
"""Lease ids renewed per statement (SQLite's default limit is 32,766 parameters)."""
MAX_TTL_S = 10 * 365 * 86_400
"""Longest lease lifetime, ten years: ``SchedulerConfig.lease_ttl_s``'s bound (the heartbeat
waits a third of it, and ``threading.Event.wait`` refuses a wait of some hundred years)."""
MIN_TTL_S = 1.0
"""Shortest lease lifetime, one second: ``SchedulerConfig.lease_ttl_s``'s bound. A holder renews
its leases every third of it, through the store: with a lease of microseconds (until review R87
any ttl above 0 was taken here) the heartbeat renewed without pause, and the slot expired before
the first renewal, free to every other holder while its call still ran."""
MAX_BURST = 2**53
"""Largest shared bucket, as ``RateLimit.burst``'s: the level is a float, exact up to 2**53."""
_DIGEST_PREFIX = "sha256:"
"""How a key stored by digest starts (``stored_key``)."""
_KEY_BYTES = 1024
"""The longest key (UTF-8 bytes) stored as it is. A PostgreSQL B-tree index entry holds about
2.7 KB, where SQLite has no bound: a longer key is stored by digest (``stored_key``)."""


def stored_key(key: str) -> str:
    """The row key of the lease, rate bucket or breaker ``key``: ``key`` itself, unless it holds a
    NUL character (PostgreSQL's text cannot), is longer than ``_KEY_BYTES`` or starts with
    ``sha256:``; then ``sha256:HEX`` of its UTF-8 bytes. A key (a tool name, a ``breaker_key``)
    then takes its slot, bucket or breaker alike on SQLite and PostgreSQL, where such a key was
    refused on PostgreSQL only (``StoreError``: the scheduler gave the call up as
    ``store_unavailable``). A key spelled ``sha256:HEX`` is hashed too, so no key is stored as
    another's digest: until review R88 a ``breaker_key`` spelled as a long key's digest shared
    that key's breaker, slots and rate bucket. ``StoreError`` for a key that is not valid Unicode
    (as the stores raise); ``InputError`` naming its type for a key that is not text (``str``):
    until review R91 one (``5``, ``None``, ``b"k"``, a tuple) was a bare ``AttributeError`` or
    ``TypeError`` out of ``try_take``, ``publish``, ``read`` or ``try_acquire``, which the
    scheduler, failing closed only on ``StoreError``, did not expect."""
    spelled_as_digest = _text_key(key).startswith(_DIGEST_PREFIX)
    if not spelled_as_digest and len(key) <= _KEY_BYTES // 4 and "\x00" not in key:  # <= 4 bytes a character
        return key
    try:
        data = key.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise unstorable_text(exc) from None
    if not spelled_as_digest and len(data) <= _KEY_BYTES and b"\x00" not in data:
        return key
    return _DIGEST_PREFIX + hashlib.sha256(data).hexdigest()


def _text_key(key: object) -> str:
    """``key`` when it is text; ``InputError`` naming its type otherwise (``stored_key``)."""
    if not isinstance(key, str):
        raise InputError(f"a lease, rate bucket or breaker key must be text (str), got {shown(key)}")
    return key


@dataclass(frozen=True)
class Lease:
    """One held slot."""

    key: str
    slot: int
    lease_id: str
    holder: str


@dataclass(frozen=True)
class LeaseRow:
    """A slot as the store has it (for operators and tests)."""

    key: str
    slot: int
    holder: str
    expires_at: float


class LeaseManager:
    """Takes, renews and gives back slots for one holder (one process). Thread-safe.

    ``holder`` names this process in the table (default ``host:pid:random``). The heartbeat
    thread starts with the first lease and stops in ``close()``, which also gives back every
    lease still held. ``ttl_s``: a number of seconds from ``MIN_TTL_S`` to ``MAX_TTL_S``, else
    ``InputError``. Until review R57 NaN and infinity were taken: infinity made leases that never
    expire and a heartbeat thread that died of ``OverflowError`` at its first wait, NaN leases
    that never expire on PostgreSQL and a heartbeat that renewed without a pause.
    """

    def __init__(
        self,
        store: Store,
        *,
        ttl_s: float = 10.0,
        holder: str | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.store = store
        self.ttl_s = positive_number(ttl_s, "lease ttl_s", MAX_TTL_S, least=MIN_TTL_S)
        self.holder = holder or f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self._clock = clock
        self._lock = threading.Lock()
        self._held: set[Lease] = set()
        self._stop = threading.Event()
        self._heartbeat: threading.Thread | None = None
        self._closed = False
        store.ensure_schema("leases", SCHEMA)

    def try_acquire(
        self, key: str, limit: int, *, guard: Callable[[Transaction, float], bool] | None = None
    ) -> Lease | None:
        """Take a free slot of ``key`` (at most ``limit`` held at once, by everyone); None if all are held.

        ``guard(tx, now)``, when given, is asked first in the same transaction: False takes no
        slot (None), so a slot is taken only while what it reads holds (``SharedBreakers.probe_guard``).

        Raises ``InputError`` for a ``limit`` that is not a whole number >= 1 (a bool neither: a
        fractional one was a ``TypeError`` traceback), ``StoreError`` when the store cannot be
        reached (callers fail closed: no slot).
        """
        whole_number(limit, "the lease limit", 1)
        if self._closed:
            raise StoreError("the lease manager is closed")
        lease_id = uuid.uuid4().hex
        row_key = stored_key(key)
        with self.store.transaction() as tx:
            now = self._clock()
            if guard is not None and not guard(tx, now):
                return None
            taken = {row[0] for row in tx.execute(_TAKEN, (row_key, now))}
            # Every live slot counts, also one above ``limit``: a process whose policy allows more
            # (a rolling deploy that lowered the limit) holds slots this one does not take.
            if len(taken) >= limit:
                return None
            for slot in range(limit):
                if slot in taken:
                    continue
                tx.execute(_CLAIM, (row_key, slot, self.holder, lease_id, now + self.ttl_s, now))
                if tx.rowcount == 1:
                    lease = Lease(key, slot, lease_id, self.holder)
                    break
            else:
                return None
        with self._lock:
            self._held.add(lease)
            if self._heartbeat is None:
                self._heartbeat = threading.Thread(
                    target=self._beat, name="agentgate-lease-heartbeat", daemon=True
                )
                self._heartbeat.start()
        return lease

    def release(self, lease: Lease, *, before: Callable[[Transaction], None] | None = None) -> None:
        """Give ``lease`` back (a lease already taken over after expiring is left alone).

        ``before(tx)``, when given, runs first in the same transaction (``SharedBreakers.reopen``:
        the store says a breaker opened again before its probe's claim is free).

        Raises ``InputError`` (nothing released) for a lease of another holder: only the holder
        gives a slot back; ``StoreError`` when the store cannot be reached (the lease is not
        renewed again, so it expires within ``ttl_s``).
        """
        if lease.holder != self.holder:
            raise InputError(
                f"lease {quoted(lease.key)} slot {lease.slot} is held by {quoted(lease.holder)}, not {quoted(self.holder)}: "
                "only its holder releases it"
            )
        with self._lock:
            self._held.discard(lease)
        with self.store.transaction() as tx:
            if before is not None:
                before(tx)
            tx.execute(_RELEASE, (stored_key(lease.key), lease.slot, lease.lease_id, self.holder))

    def renew(self) -> int:
        """Push the expiry of every lease this manager holds to now + ttl; returns the rows renewed.

        Only the leases it holds: one it gave back (``release``), even if the store did not take
        the release, is never renewed again, so it expires within ``ttl_s``. Raises ``StoreError``
        when the store cannot be reached.
        """
        with self._lock:
            ids = sorted(lease.lease_id for lease in self._held)
        renewed = 0
        if not ids:
            return renewed
        gone: set[str] = set()
        with self.store.transaction() as tx:
            expires = self._clock() + self.ttl_s
            for start in range(0, len(ids), _RENEW_BATCH):
                batch = ids[start : start + _RENEW_BATCH]
                marks = ", ".join("?" * len(batch))
                tx.execute(_RENEW.format(ids=marks), (expires, self.holder, *batch))
                renewed += tx.rowcount
                if tx.rowcount < len(batch):
                    found = tx.execute(_HELD.format(ids=marks), (self.holder, *batch))
                    gone |= set(batch) - {str(row[0]) for row in found}
        if gone:
            self._lost(gone)
        return renewed

    def _lost(self, lease_ids: set[str]) -> None:
        """Forget the leases of ``lease_ids`` that this manager still holds and the store no
        longer does, each with a warning: it expired unrenewed (this process was paused, or cut
        off from the store, for longer than ``ttl_s``) and another holder took its slot over, or
        it was pruned. The call that took it may still be running, so the limit may be passed.
        Until review R58 such a lease was held and renewed in vain for good, and nothing said so.
        One given back meanwhile (``release``) is not held any more and says nothing."""
        with self._lock:
            lost = [lease for lease in self._held if lease.lease_id in lease_ids]
            self._held.difference_update(lost)
        for lease in lost:
            _logger.warning(
                "lease %r slot %d of %s was lost: it expired before this process renewed it (paused "
                "or cut off from the store for longer than its ttl of %ss) and its slot is another "
                "holder's now or free; a call still running under it passes the limit",
                lease.key,
                lease.slot,
                self.holder,
                self.ttl_s,
            )

    def held(self) -> int:
        """How many leases this manager holds now."""
        with self._lock:
            return len(self._held)

    def rows(self, key: str) -> list[LeaseRow]:
        """The live (unexpired) slots of ``key``, by anyone (each row names the key as stored,
        ``stored_key``)."""
        rows = self.store.query(
            "SELECT lease_key, slot, holder, expires_at FROM agentgate_leases WHERE lease_key = ? AND expires_at > ? "
            "ORDER BY slot",
            (stored_key(key), self._clock()),
        )
        return [LeaseRow(r[0], int(r[1]), r[2], float(r[3])) for r in rows]

    def _beat(self) -> None:
        while not self._stop.wait(self.ttl_s / 3):
            if self.held():
                try:
                    self.renew()
                except StoreError:
                    # The store is unreachable: keep trying; leases not renewed in time expire,
                    # which is the safe direction (slots come back rather than leak).
                    continue

    def close(self, *, unreleased: Callable[[Lease], None] | None = None) -> None:
        """Stop the heartbeat and give back every lease still held. Idempotent.

        A lease the store does not take back is not renewed again: it expires within ``ttl_s``.
        ``unreleased(lease)``, when given, is called for each such lease, once, whatever the
        error (the scheduler counts it as ``lease_not_released``; until review R91d these were
        skipped uncounted). A ``StoreError`` is not raised; the first other error is, once every
        lease has been tried, and an interrupt (``KeyboardInterrupt``) at once.
        """
        if self._closed:
            return
        self._closed = True
        self._stop.set()
        if self._heartbeat is not None:
            self._heartbeat.join()
        with self._lock:
            held, self._held = list(self._held), set()
        failed: Exception | None = None
        for lease in held:
            try:
                with self.store.transaction() as tx:
                    tx.execute(_RELEASE, (stored_key(lease.key), lease.slot, lease.lease_id, self.holder))
            except BaseException as exc:
                if unreleased is not None:
                    unreleased(lease)
                if not isinstance(exc, Exception):
                    raise
                if failed is None and not isinstance(exc, StoreError):
                    failed = exc
        if failed is not None:
            raise failed


_BUCKET_CREATE = (
    "INSERT INTO agentgate_rate_buckets (bucket_key, tokens, updated_at) VALUES (?, ?, ?) "
    "ON CONFLICT (bucket_key) DO NOTHING"
)
_BUCKET_READ: dict[Dialect, str] = {
    "sqlite": "SELECT tokens, updated_at FROM agentgate_rate_buckets WHERE bucket_key = ?",
    # Locked until the commit: the takers of a bucket queue on its row, as SQLite's BEGIN
    # IMMEDIATE queues every writer, so the swap below cannot lose (module docstring).
    "postgresql": "SELECT tokens, updated_at FROM agentgate_rate_buckets WHERE bucket_key = ? FOR UPDATE",
}
_BUCKET_SWAP = (
    "UPDATE agentgate_rate_buckets SET tokens = ?, updated_at = ? "
    "WHERE bucket_key = ? AND tokens = ? AND updated_at = ?"
)
_SWAP_TRIES = 20
BUCKET_AHEAD_S = 60.0
"""The furthest a shared bucket's time is believed ahead of a taker's clock (module docstring)."""


class SharedRateLimits:
    """Token buckets in the store, shared by every process that uses it. Thread-safe.

    A bucket starts full (``burst`` tokens) and refills at ``per_second``; ``try_take`` returns
    0.0 when it took a token, else the seconds until one will be there.
    """

    def __init__(self, store: Store, *, clock: Callable[[], float] = time.time) -> None:
        self.store = store
        self._clock = clock
        store.ensure_schema("leases", SCHEMA)

    def try_take(self, key: str, per_second: float, burst: int) -> float:
        """Take one token from ``key``'s bucket: 0.0 when taken, else the wait until one is due.

        Raises ``InputError`` for a ``per_second`` that is not a finite number above 0 or a
        ``burst`` that is not a whole number from 1 to ``MAX_BURST`` (bools neither; until review
        R57 NaN, infinity and fractions were taken, as ``RateLimit`` refuses them), and
        ``StoreError`` when the store cannot be reached, or when the row keeps changing
        under us (``_SWAP_TRIES`` lost races in a row: a row written by something other than a
        taker, since takers wait for each other), so the caller fails closed. Until review R88 a
        taker on PostgreSQL read the row unlocked and lost its swap to every taker that
        committed meanwhile: busy takers got this ``StoreError`` (their calls given up as
        ``store_unavailable``) with the bucket full.
        """
        positive_number(per_second, "the rate's per_second")
        whole_number(burst, "the rate's burst", 1, MAX_BURST)
        row_key = stored_key(key)
        for _ in range(_SWAP_TRIES):
            now = self._clock()
            with self.store.transaction() as tx:
                tx.execute(_BUCKET_CREATE, (row_key, float(burst), now))
                row = tx.execute(_BUCKET_READ[self.store.dialect], (row_key,))[0]
                tokens = _stored_number(row[0], "rate bucket", key, "tokens")
                updated_at = _stored_number(row[1], "rate bucket", key, "updated_at")
                since = min(updated_at, now + BUCKET_AHEAD_S)
                level = min(float(burst), tokens + max(0.0, now - since) * per_second)
                if level < 1.0:
                    if since < updated_at:  # re-dated even when no token is taken
                        tx.execute(_BUCKET_SWAP, (level, since, row_key, tokens, updated_at))
                    return (1.0 - level) / per_second
                tx.execute(_BUCKET_SWAP, (level - 1.0, max(now, since), row_key, tokens, updated_at))
                if tx.rowcount == 1:
                    return 0.0
        raise StoreError(f"rate bucket {quoted(key)}: too much contention, no token taken")


BREAKER_AHEAD_S = 60.0
"""The furthest a shared breaker row's transition time is believed ahead of a process's clock:
a row dated further ahead was written by a clock that is far off (or stepped back since) and is
taken as older than any transition (module docstring)."""
_BREAKER_READ = "SELECT state, opened_at, version FROM agentgate_breakers WHERE breaker_key = ?"
_BREAKER_LOCK_DOMAIN = b"agentgate-breaker\x00"
"""What the breaker's advisory lock number hashes before its row key (``_lock_breaker``), so it
is no other advisory lock's number."""


def _lock_breaker(tx: Transaction, row_key: str) -> None:
    """On PostgreSQL, take the transaction-scoped advisory lock of the breaker stored as
    ``row_key`` (a signed 64-bit number from SHA-256); on SQLite nothing, ``BEGIN IMMEDIATE``
    already serializes writers. Taken before any row of the transaction is touched, by the probe
    guard and by every write of the breaker row, so a claim and a reopening are ordered whether or
    not the row exists yet: a row lock (``FOR SHARE``, review R88's first fix) locks only a row that
    exists, and a first reopening's INSERT, with the claim it frees, committed between the guard's
    read and the claim. A statement of its own: at READ COMMITTED a statement reads what
    committed before it began, so a read in the statement that waited would not see the
    transaction it waited for."""
    if tx.dialect != "postgresql":
        return
    # surrogatepass: a key that is not valid Unicode is refused by the statement that follows
    # (StoreError, as every store refuses such text), not here by a bare UnicodeEncodeError.
    digest = hashlib.sha256(_BREAKER_LOCK_DOMAIN + row_key.encode("utf-8", "surrogatepass")).digest()
    lock = int.from_bytes(digest[:8], "big", signed=True)
    tx.execute("SELECT pg_catalog.pg_advisory_xact_lock(?)", (lock,))


_BREAKER_WRITE = (
    "INSERT INTO agentgate_breakers (breaker_key, state, opened_at, version) VALUES (?, {state}, ?, 1) "
    "ON CONFLICT (breaker_key) DO UPDATE SET state = excluded.state, opened_at = excluded.opened_at, "
    "version = agentgate_breakers.version + 1 "
    # Only a newer transition: a later time, or an opening at the same time as a closing (the
    # safe direction); a row dated more than BREAKER_AHEAD_S ahead, or corrupt, is older than any.
    "WHERE agentgate_breakers.opened_at < excluded.opened_at OR (agentgate_breakers.opened_at = "
    "excluded.opened_at AND excluded.state = 'open' AND agentgate_breakers.state <> 'open') "
    "OR agentgate_breakers.opened_at > ? OR agentgate_breakers.state NOT IN ('open', 'closed')"
)
_BREAKER_PUBLISH = _BREAKER_WRITE.format(state="?")
_BREAKER_REOPEN = _BREAKER_WRITE.format(state="'open'")


@dataclass(frozen=True)
class SharedBreakerState:
    """A breaker's state as the store has it: ``open`` or ``closed``, when it opened, its version."""

    key: str
    state: str
    opened_at: float
    version: int


class SharedBreakers:
    """Circuit breaker states in the store, shared by every process that uses it. Thread-safe."""

    def __init__(self, store: Store, *, clock: Callable[[], float] = time.time) -> None:
        self.store = store
        self._clock = clock
        store.ensure_schema("leases", SCHEMA)

    def publish(self, key: str, state: str, opened_at: float) -> bool:
        """Record that ``key`` became ``state`` (``open`` or ``closed``) at wall time
        ``opened_at``, unless the row has a newer transition: one at a later time (a publication
        that comes late, after another process's later transition, changes nothing), or an
        opening at the same time. True when written. ``InputError`` for another state or a time
        that is not a finite number; ``StoreError`` when the store cannot be reached.

        Until review R67 every publication was written: one that came late overwrote a newer
        transition of another process (a stale "open" reopened the breaker in every process after
        a probe had closed it, a stale "closed" closed it on a failing backend)."""
        if state not in ("open", "closed"):
            raise InputError(f"a shared breaker state is open or closed, got {quoted(state)}")
        if not finite(opened_at):
            raise InputError(
                f"a shared breaker's transition time is a finite number, got {quoted(opened_at)}"
            )
        row_key = stored_key(key)
        with self.store.transaction() as tx:
            _lock_breaker(tx, row_key)
            tx.execute(
                _BREAKER_PUBLISH,
                (row_key, state, float(opened_at), self._clock() + BREAKER_AHEAD_S),
            )
            return tx.rowcount == 1

    @staticmethod
    def probe_key(key: str) -> str:
        """The lease key of the half-open probe claims of breaker ``key`` (``agentgate_leases``);
        ``InputError`` for a key that is not text, as ``stored_key``."""
        return "probe:" + _text_key(key)

    @staticmethod
    def probe_guard(key: str, reset_timeout_s: float) -> Callable[[Transaction, float], bool]:
        """For ``LeaseManager.try_acquire``: a probe claim of breaker ``key`` is taken only while
        the store does not say the breaker opened less than ``reset_timeout_s`` ago (another
        process's probe failed, or its calls opened it, after this process's breaker half-opened).
        A corrupt row, or one dated more than ``BREAKER_AHEAD_S`` ahead of ``now``, says nothing
        (the claims still bound the probes): until review R67 an opening written by a clock an
        hour ahead refused every other process's probe for that hour.

        On PostgreSQL the guard first takes the breaker's advisory lock (``_lock_breaker``), as
        every write of its row does (``reopen``, ``publish``): a reopening waits for the claim's
        transaction, or the guard waits for the reopening's and reads it, as SQLite's
        ``BEGIN IMMEDIATE`` serializes them, whether or not the row exists yet. Until review R88
        the read took no lock, and a failed probe's reopening (and freed claim) that committed
        between it and the claim left the claim free to take, while the store said the breaker
        opened just now; R88's first fix locked the row ``FOR SHARE``, which still let a reopening
        through when it wrote the breaker's first row."""
        _text_key(key)  # a key that is not text is refused now, not in the claim's transaction

        def guard(tx: Transaction, now: float) -> bool:
            row_key = stored_key(key)
            _lock_breaker(tx, row_key)
            rows = tx.execute(_BREAKER_READ, (row_key,))
            if not rows:
                return True
            try:
                state = _breaker_state(key, *rows[0])
            except StoreError:
                return True
            return (
                state.state != "open"
                or now - state.opened_at >= reset_timeout_s
                or state.opened_at > now + BREAKER_AHEAD_S
            )

        return guard

    @staticmethod
    def reopen(key: str, opened_at: float) -> Callable[[Transaction], None]:
        """For ``LeaseManager.release``: write that breaker ``key`` opened at ``opened_at`` (wall
        time), unless the row has a newer transition (as ``publish``), in the transaction that frees a failed
        probe's claim: no other process takes the claim and probes before the store says open."""
        _text_key(key)  # a key that is not text is refused now, not in the release's transaction

        def write(tx: Transaction) -> None:
            row_key = stored_key(key)
            _lock_breaker(tx, row_key)
            tx.execute(_BREAKER_REOPEN, (row_key, opened_at, time.time() + BREAKER_AHEAD_S))

        return write

    def read(self, key: str) -> SharedBreakerState | None:
        """The shared state of ``key``, or None if no process has published one."""
        rows = self.store.query(_BREAKER_READ, (stored_key(key),))
        if not rows:
            return None
        return _breaker_state(key, *rows[0])

    def all(self) -> list[SharedBreakerState]:
        """Every shared breaker state, by key as stored (``stored_key``: a key with a NUL or over
        ``_KEY_BYTES`` bytes as its ``sha256:HEX``)."""
        rows = self.store.query(
            "SELECT breaker_key, state, opened_at, version FROM agentgate_breakers ORDER BY breaker_key"
        )
        return [_breaker_state(str(r[0]), *r[1:]) for r in rows]


def _breaker_state(key: str, state: object, opened_at: object, version: object) -> SharedBreakerState:
    """A breaker row as read; ``StoreError`` naming the key and the field when a value is not
    what ``publish`` writes (a row edited by hand, or by another program): the row is corrupt.
    Read as before, ``'abc'`` raised ``ValueError`` out of the scheduler's ``submit`` and out of
    ``agentgate tasks breakers``, and a state other than ``open`` counted as ``closed``."""
    if state not in ("open", "closed"):
        raise StoreError(
            f"shared breaker {quoted(key)}: the stored state is {quoted(state)}, not open or closed"
        )
    stored_version = _stored_number(version, "shared breaker", key, "version")
    if not stored_version.is_integer() or stored_version < 1:
        raise StoreError(
            f"shared breaker {quoted(key)}: the stored version is {quoted(version)}, not an integer >= 1"
        )
    return SharedBreakerState(
        key,
        str(state),
        _stored_number(opened_at, "shared breaker", key, "opened_at"),
        int(stored_version),
    )


def _stored_number(value: object, kind: str, key: str, field: str) -> float:
    """``value`` read from the number column ``field`` of ``kind`` ``key``'s row, as a float;
    ``StoreError`` naming them when it is not a finite number (SQLite keeps the text ``'abc'``
    in a REAL column as text). The key and the value are quoted short (``quoted``): the message
    is made only then, and until review R88 it held the whole of a key of any length."""
    if not finite(value):
        raise StoreError(
            f"{kind} {quoted(key)}: {field}: the stored value {quoted(value)} is not a finite number (a corrupt row)"
        )
    return float(value)
