"""How the ``Gate`` dispatches model calls (``_Dispatching``) through an attached
``dispatch.Dispatcher``, which runs on a private event loop thread."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import queue
import threading
import weakref
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

from opentelemetry import context as otel_context

from agentgate._names import MAX_SESSION_CHARS as MAX_SESSION_CHARS  # re-exported, as check_session
from agentgate._names import check_session as check_session
from agentgate._names import check_tenant as check_tenant
from agentgate._shown import shown
from agentgate.errors import DispatchError, InputError
from agentgate.policy import Policy

# The dispatcher brings aiohttp, httpx and the GPU inventory: a gate without one never loads them.
if TYPE_CHECKING:
    from agentgate.dispatch._answers import ChatChunk, ChatResult
    from agentgate.dispatch.dispatcher import Dispatcher

T = TypeVar("T")

STREAM_AHEAD = 64
"""Chunks of a streamed answer read ahead of its reader, at most (``_Ahead``): from the dispatcher
ahead of the reader of ``dispatch_stream`` / ``adispatch_stream`` (``_relay``), and from the
backend ahead of the gateway's caller (``gateway._authority``, ``gated_stream``)."""
STREAM_AHEAD_BYTES = 1 << 20
"""The most of those chunks' events, by their size as the backend sent them (``ChatChunk.size``),
read ahead of the reader, though one chunk is always let through, however large (up to the
dispatcher's ``MAX_LINE_BYTES``, 1 MiB). 64 chunks of a few kB (an event with top
log-probabilities) fit; until review R94 only the count was bounded, and 64 events of 1 MiB,
each some twenty times that once decoded, held over 1 GB for one reader that stopped reading."""


class _Dispatching:
    """The ``Gate``'s model dispatch: ``attach_dispatcher``, ``dispatch``/``adispatch`` (one chat
    call) and ``dispatch_stream``/``adispatch_stream`` (its chunks as they come), each handed to
    the dispatcher's loop (``_send``), and ``_close_dispatcher`` for ``close``."""

    # The gate's state this part reads (``Gate.__init__`` sets it).
    policy: Policy
    _dispatch: tuple[Dispatcher, asyncio.AbstractEventLoop, threading.Thread] | None
    _dispatch_lock: threading.RLock
    _dispatch_closed: bool
    _dispatch_attaching: bool

    def attach_dispatcher(self, dispatcher: Dispatcher) -> None:
        """Serve model calls through ``dispatcher`` (``dispatch.Dispatcher``), which runs on a
        private event loop thread owned by the gate until ``close()``. A model the policy gives a
        ``slo.ttft_ms`` is routed under it, unless the dispatcher was given its own for it.

        One dispatcher per gate, attached before ``close``: ``DispatchError`` (nothing started)
        when one is attached already, or the gate is closed; ``InputError`` for a ``dispatcher``
        without a ``Dispatcher``'s ``start``, ``aclose`` and ``model_slo_ttft_s`` (a dict; read
        by what it has, as tests stand in for one). Until review R87 a second dispatcher replaced
        the first, whose loop thread ``close`` never stopped, one attached after ``close`` ran
        its thread for good, and ``"nope"`` raised a bare ``AttributeError``. What the
        dispatcher's ``start`` raises is raised, once its ``aclose`` was called (its errors
        dropped) and its loop thread stopped, nothing attached; so is what ``start`` raises when
        called, and a ``start`` that returns no coroutine raises ``InputError`` so (until review
        R87c both left the gate refusing every later attach, its loop thread running for good).

        The dispatcher starts outside the gate's ``_dispatch_lock``: a second attach meanwhile is
        refused (``DispatchError``), and a ``close`` meanwhile does not wait for the start; the
        attach, once the start returns, finds the gate closed, stops the dispatcher (``aclose``,
        its loop thread) and raises ``DispatchError``. The lock is re-entrant: a signal handler's
        ``close`` in the attaching thread while it holds the lock closes the gate there, and the
        attach stops its dispatcher as above (until review R87c it deadlocked). Until review R87b
        the lock was held across
        ``start``: a signal handler's ``close`` in the attaching thread deadlocked, and a ``close``
        from another thread waited for a start that never returned, whatever its ``timeout_s``."""
        from agentgate.dispatch.dispatcher import model_slos  # here: the module brings aiohttp

        if not (
            isinstance(getattr(dispatcher, "model_slo_ttft_s", None), dict)
            and callable(getattr(dispatcher, "start", None))
            and callable(getattr(dispatcher, "aclose", None))
        ):
            raise InputError(f"dispatcher must be a dispatch.Dispatcher, got {shown(dispatcher)}")
        with self._dispatch_lock:
            if self._dispatch_closed:
                raise DispatchError("the gate is closed: it takes no dispatcher")
            if self._dispatch is not None:
                raise DispatchError(
                    "a dispatcher is attached to this gate already: it serves the gate's model calls "
                    "until close(); attach one dispatcher per gate"
                )
            if self._dispatch_attaching:
                raise DispatchError(
                    "a dispatcher is being attached to this gate already (its start has not returned): "
                    "attach one dispatcher per gate"
                )
            self._dispatch_attaching = True
        # Whether the gate holds ``attached``, or a ``close`` took it (and stops it): set on the
        # line that sets the gate's field, which a signal handler's ``close`` cannot split.
        held = False
        attached: tuple[Dispatcher, asyncio.AbstractEventLoop, threading.Thread] | None = None
        starting: concurrent.futures.Future[None] | None = None
        try:
            dispatcher.model_slo_ttft_s = {**model_slos(self.policy), **dispatcher.model_slo_ttft_s}
            loop = asyncio.new_event_loop()
            thread = threading.Thread(target=loop.run_forever, name="agentgate-dispatch", daemon=True)
            thread.start()
            attached = (dispatcher, loop, thread)
            begun = dispatcher.start()
            if not asyncio.iscoroutine(begun):
                raise InputError(
                    f"the dispatcher's start must be a coroutine function, it returned {shown(begun)}"
                )
            starting = asyncio.run_coroutine_threadsafe(begun, loop)
            starting.result()
            with self._dispatch_lock:
                self._dispatch_attaching = False
                self._dispatch, held = attached, True
                if not self._dispatch_closed:
                    return
                # Closed before it was held: taken back, to stop here; closed since: that close took it.
                held, self._dispatch = self._dispatch is not attached, None
            raise DispatchError(
                "the gate was closed while the dispatcher started: it was stopped, not attached"
            )
        except BaseException:
            if starting is not None:  # interrupted (a Ctrl-C, a signal handler's exit): the start stops
                starting.cancel()
            with self._dispatch_lock:
                self._dispatch_attaching = False
            if attached is not None and not held:  # else none started, or the gate's: close stops it
                _stop_dispatcher(*attached, quiet=True)
            raise

    @property
    def dispatches(self) -> bool:
        """Whether a dispatcher is attached."""
        return self._dispatch is not None

    def dispatch(
        self, payload: Mapping[str, Any], *, tenant: str = "default", session: str | None = None
    ) -> ChatResult:
        """Route and send an OpenAI-style chat payload (blocking). ``session``: the conversation
        (an agent run's thread) whose earlier calls' backend holds its prefix in cache, kept when
        it meets the SLO (docs/dispatch.md). Raises ``DispatchError`` when no dispatcher is
        attached, ``InputError`` for a ``tenant`` that is no name (``check_tenant``) or a
        ``session`` that is no id (``check_session``), and what
        ``Dispatcher.chat`` raises (``NoBackend``, ``Shed``, ``BackendFailed``).

        A wait interrupted (a Ctrl-C's ``KeyboardInterrupt``, a signal handler's exception)
        cancels the call on the dispatcher's loop, as leaving ``dispatch_stream`` early and
        cancelling ``adispatch`` do: its backend connection is closed, so the engine stops
        generating, and its router slot is freed. Until review R89 the call ran on until the
        generation ended, holding that slot and the backend's work."""
        check_tenant(tenant)
        check_session(session)
        sent = self._send(lambda d: d.chat(payload, tenant=tenant, session=session))
        try:
            return sent.result()
        except BaseException:
            sent.cancel()  # interrupted: stop the call (once it ended, this does nothing)
            raise

    async def adispatch(
        self, payload: Mapping[str, Any], *, tenant: str = "default", session: str | None = None
    ) -> ChatResult:
        """The async twin of ``dispatch``: awaits the dispatcher's loop without blocking this one."""
        check_tenant(tenant)
        check_session(session)
        return await asyncio.wrap_future(
            self._send(lambda d: d.chat(payload, tenant=tenant, session=session))
        )

    def dispatch_stream(
        self, payload: Mapping[str, Any], *, tenant: str = "default", session: str | None = None
    ) -> Iterator[ChatChunk]:
        """Route and stream an OpenAI-style chat payload: the chunks as the backend sends them
        (blocking iterator). Raises as ``dispatch`` does, before or between chunks (a stream that
        breaks after output: ``BackendFailed``). Leaving the loop early, or closing the iterator,
        cancels the call on the backend. The backend's stream is read at most ``STREAM_AHEAD``
        chunks, and ``STREAM_AHEAD_BYTES`` of their events, ahead of the reader (``_relay``)."""
        check_tenant(tenant)
        check_session(session)
        chunks: queue.SimpleQueue[ChatChunk | BaseException | None] = queue.SimpleQueue()
        ahead = _Ahead()
        relay = self._relay(payload, tenant, session, chunks.put, ahead)
        try:
            while (item := chunks.get()) is not None:
                if isinstance(item, BaseException):
                    raise item
                ahead.taken(item.size)
                yield item
        finally:
            relay.cancel()

    async def adispatch_stream(
        self, payload: Mapping[str, Any], *, tenant: str = "default", session: str | None = None
    ) -> AsyncIterator[ChatChunk]:
        """The async twin of ``dispatch_stream``: awaits each chunk without blocking this loop."""
        check_tenant(tenant)
        check_session(session)
        loop = asyncio.get_running_loop()
        chunks: asyncio.Queue[ChatChunk | BaseException | None] = asyncio.Queue()
        ahead = _Ahead()

        def put(item: ChatChunk | BaseException | None) -> None:
            with contextlib.suppress(RuntimeError):  # this loop closed: nobody reads any more
                loop.call_soon_threadsafe(chunks.put_nowait, item)

        relay = self._relay(payload, tenant, session, put, ahead)
        try:
            while (item := await chunks.get()) is not None:
                if isinstance(item, BaseException):
                    raise item
                ahead.taken(item.size)
                yield item
        finally:
            relay.cancel()

    def _relay(
        self,
        payload: Mapping[str, Any],
        tenant: str,
        session: str | None,
        put: Callable[[ChatChunk | BaseException | None], None],
        ahead: _Ahead,
    ) -> concurrent.futures.Future[None]:
        """Stream on the dispatcher's loop, handing each chunk to ``put``, then ``None`` at the
        end or the exception that ended it. The stream runs whole on that loop (an async
        generator cannot move between loops); cancelling the future returned cancels it there,
        which closes the backend's connection. The stream carries the trace context of the span
        current where it is asked for (``Dispatcher.stream``), not the loop thread's.

        A chunk is handed over only while those handed over and not yet taken stay within
        ``STREAM_AHEAD`` chunks and ``STREAM_AHEAD_BYTES`` (``_Ahead``; the reader calls
        ``ahead.taken(chunk.size)`` for each one it takes): a reader that reads
        slowly slows the read of the backend down, instead of having the answer pile up in this
        process's memory (until review R89 the whole answer was queued, however slowly it was
        read). A reader that stops reading without closing the stream holds the call until it
        closes it, or until the gate closes."""
        caller = otel_context.get_current()

        async def pump(dispatcher: Dispatcher) -> None:
            traced = otel_context.attach(caller)  # this task's own context: detached when it ends
            try:
                async for chunk in dispatcher.stream(payload, tenant=tenant, session=session):
                    await ahead.room(chunk.size)
                    put(chunk)
            except BaseException as exc:  # CancelledError too: the reader is gone, or the gate closes
                put(exc)
                raise
            finally:
                otel_context.detach(traced)
            put(None)

        return self._send(pump)

    def _send(self, call: Callable[[Dispatcher], Coroutine[Any, Any, T]]) -> concurrent.futures.Future[T]:
        """Hand ``call(dispatcher)`` to the dispatcher's loop. The coroutine is made first, then
        handed over under ``_dispatch_lock``, which ``_close_dispatcher`` takes to detach the
        dispatcher: a call that raced ``close`` is refused with ``DispatchError``, never handed to
        a loop stopped or closed under it (it would wait for ever, or raise ``RuntimeError``)."""
        attached = self._dispatch
        if attached is None:
            raise DispatchError(self._no_dispatcher())
        sent = call(attached[0])
        with self._dispatch_lock:
            if self._dispatch is not attached:
                sent.close()
                raise DispatchError(self._no_dispatcher())
            try:
                return asyncio.run_coroutine_threadsafe(sent, attached[1])
            except RuntimeError:  # its loop closed by a signal handler's close, re-entering the lock
                if self._dispatch is attached:
                    raise
                sent.close()
                raise DispatchError(self._no_dispatcher()) from None

    def _no_dispatcher(self) -> str:
        if self._dispatch_closed:
            return "the gate is closed: its dispatcher takes no more calls"
        return "no dispatcher is attached to this gate (Gate.attach_dispatcher)"

    def _close_dispatcher(self) -> None:
        """Detach and stop the dispatcher, if any, and take none after (``attach_dispatcher``):
        until review R87 a gate closed without one still took one, whose thread ran for good."""
        with self._dispatch_lock:
            self._dispatch_closed = True
            # One line: a close re-entered here (a signal handler's) cannot take it twice.
            taken, self._dispatch = self._dispatch, None
        if taken is not None:
            _stop_dispatcher(*taken, quiet=False)


class _Ahead:
    """How far a stream's pump has read ahead of its reader: the chunks it handed over that the
    reader has not taken yet, at most ``STREAM_AHEAD`` of them and ``STREAM_AHEAD_BYTES`` of their
    sizes (``ChatChunk.size``), or one chunk of any size (``_fits``). Used by the gate's streams
    (``_relay``) and the gateway's (``gated_stream``). ``room(size)`` waits, on the pump's loop
    (the dispatcher's, or the gateway's), until a chunk of ``size`` may be handed over;
    ``taken(size)``, called by the reader on its own thread or loop for each chunk it takes, makes
    room for it. The count is kept under a lock, so ``taken`` wakes the pump's loop (a callback
    handed to it from another thread, a write to its self-pipe) only when the pump waits: until a
    regression review of R89 every chunk taken cost one, however far behind the reader was.

    Once the gate's dispatcher stops (``read_on``, for every stream of its loop), no pump waits:
    each reads on, and the dispatcher's close ends its stream as it ends one being read
    (``BackendFailed`` after output), which reaches the reader after the chunks it has not
    taken. A pump left waiting would be dropped with the loop, its reader waiting for ever."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._ahead = 0  # under ``_lock``: added to on the pump's loop, taken from on the reader's thread
        self._size = 0  # under ``_lock``: the sizes of those ``_ahead`` chunks
        self._room: asyncio.Future[None] | None = None  # under ``_lock``: while the pump waits

    def _fits(self, size: int) -> bool:
        """Whether a chunk of ``size`` may be handed over now. Called under ``_lock``."""
        return self._ahead == 0 or (self._ahead < STREAM_AHEAD and self._size + size <= STREAM_AHEAD_BYTES)

    async def room(self, size: int = 0) -> None:
        with self._lock:
            if self._fits(size):
                self._ahead += 1
                self._size += size
                return
        loop = asyncio.get_running_loop()
        pumps = _pumps_of(loop)
        while not pumps.reading_on:
            with self._lock:
                if self._fits(size):
                    break
                # Set under the lock the count was read under: a chunk taken since sees it.
                room = self._room = loop.create_future()
            pumps.waiting.add(self)
            try:
                await room
            finally:
                pumps.waiting.discard(self)
                with self._lock:
                    if self._room is room:
                        self._room = None
        with self._lock:
            self._ahead += 1
            self._size += size

    def taken(self, size: int = 0) -> None:
        with self._lock:
            self._ahead -= 1
            self._size -= size
            room, self._room = self._room, None  # woken once, however many are taken meanwhile
        if room is not None:
            with contextlib.suppress(RuntimeError):  # that loop closed with the gate: nothing pumps
                room.get_loop().call_soon_threadsafe(_resolve, room)

    def _wake(self) -> None:
        """Wake the pump if it waits. Called on the pump's loop."""
        with self._lock:
            room, self._room = self._room, None
        if room is not None:
            _resolve(room)

    @staticmethod
    def read_on(loop: asyncio.AbstractEventLoop) -> None:
        """Let every pump of ``loop`` read on from now: its dispatcher stops. Called on ``loop``."""
        pumps = _pumps_of(loop)
        pumps.reading_on = True
        for ahead in list(pumps.waiting):
            ahead._wake()


def _resolve(room: asyncio.Future[None]) -> None:
    """Let the pump waiting on ``room`` go on (unless it is gone: the future cancelled with it)."""
    if not room.done():
        room.set_result(None)


class _Pumps:
    """The pumps of one loop's streams that wait for their readers (``_Ahead``), and whether none
    waits any more (``reading_on``: the gate's dispatcher, whose loop it is, stops). Used on that
    loop only."""

    def __init__(self) -> None:
        self.waiting: set[_Ahead] = set()
        self.reading_on = False


_PUMPS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Pumps] = weakref.WeakKeyDictionary()
"""The ``_Pumps`` of each dispatcher loop, each read and changed on its own loop's thread (a gate
keeps no record of its streams: the entry goes with the loop)."""


def _pumps_of(loop: asyncio.AbstractEventLoop) -> _Pumps:
    """The ``_Pumps`` of ``loop`` (made on first use). Called on ``loop``."""
    pumps = _PUMPS.get(loop)
    if pumps is None:
        pumps = _PUMPS[loop] = _Pumps()
    return pumps


def _stop_dispatcher(
    dispatcher: Dispatcher, loop: asyncio.AbstractEventLoop, thread: threading.Thread, *, quiet: bool
) -> None:
    """Close ``dispatcher`` (its ``aclose``, on its ``loop``), then stop the loop and join its
    ``thread`` whatever ``aclose`` raised. ``quiet``: what ``aclose`` raises is dropped (a
    dispatcher whose start failed, half started, or that the gate never took: what is raised
    then is why), when called as when awaited, as is the ``TypeError`` of one that returns no
    coroutine (until review R87c those two replaced the start's error); else it is raised, once
    the thread stopped. The streams' pumps waiting for their readers read on first (``_Ahead``):
    the close then ends their streams as it ends those being read."""
    try:
        loop.call_soon_threadsafe(_Ahead.read_on, loop)  # before the close: the loop runs callbacks in order
        with contextlib.suppress(Exception) if quiet else contextlib.nullcontext():
            asyncio.run_coroutine_threadsafe(dispatcher.aclose(), loop).result()
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join()
        loop.close()
