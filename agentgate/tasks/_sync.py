"""The sync facade: ``SyncScheduler.submit(call, fn)`` for callers without an event loop.

Design (docs/tasks.md, "sync callers"): the scheduler's async core runs on one event loop in one
thread that this object owns and joins in ``close()``; the tool function itself runs in the
*caller's* thread. For every attempt the core hands the caller an ``Attempt`` through a private
queue and waits for the caller to report the outcome; admission, fairness, limits, retries and
breakers are the core's, identical for sync and async callers. So no thread pool is needed, a
tool runs with its caller's thread-locals and context, and the only thread is the loop thread.

Limit: a sync function cannot be interrupted. Its timeout is not enforced while it runs: it keeps
its slot until it returns (so concurrency limits hold even then), a result that arrives late is
returned, and a late failure is not retried past the deadline.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import queue
import random
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from opentelemetry import context as otel_context
from prometheus_client import CollectorRegistry

from agentgate.errors import SchedulingError
from agentgate.store._base import Store
from agentgate.store.dead_letters import DeadLetter
from agentgate.tasks._breaker import BreakerSnapshot
from agentgate.tasks._call import Attempt, ToolCall
from agentgate.tasks._classify import DEFAULT_CLASSIFIER, Classifier
from agentgate.tasks._config import SchedulerConfig
from agentgate.tasks._scheduler import Scheduler

T = TypeVar("T")

_Work = tuple[Attempt, "asyncio.Future[Any]"]


class SyncScheduler:
    """A ``Scheduler`` for threads. Same arguments as ``Scheduler``; use as a context manager or ``close()``."""

    def __init__(
        self,
        config: SchedulerConfig | None = None,
        *,
        store: Store | None = None,
        rng: random.Random | None = None,
        classifier: Classifier = DEFAULT_CLASSIFIER,
        registry: CollectorRegistry | None = None,
    ) -> None:
        self.scheduler = Scheduler(config, store=store, rng=rng, classifier=classifier, registry=registry)
        self.scheduler._preemptive = False
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="agentgate-scheduler", daemon=True
        )
        self._thread.start()
        self._closed = False
        self._close_lock = threading.Lock()

    @property
    def registry(self) -> CollectorRegistry:
        """The Prometheus registry holding the scheduler's metrics."""
        return self.scheduler.registry

    def submit(self, call: ToolCall, fn: Callable[[Attempt], T]) -> T:
        """Run ``fn`` in this thread for ``call`` under the scheduler's limits; return its result.

        Blocks until the call is done. Raises what ``Scheduler.submit`` raises, and
        ``SchedulingError`` when the scheduler is closed or shuts down under the call.
        """
        if threading.current_thread() is self._thread:
            raise SchedulingError("SyncScheduler.submit must not be called from the scheduler's own thread")
        if self._closed:
            raise SchedulingError("the scheduler is closed")
        loop = self._loop
        inbox: queue.SimpleQueue[_Work | None] = queue.SimpleQueue()
        caller_context = otel_context.get_current()

        async def hand_to_caller(attempt: Attempt) -> T:
            done: asyncio.Future[T] = loop.create_future()
            inbox.put((attempt, done))
            return await done

        async def in_caller_context() -> T:
            token = otel_context.attach(caller_context)
            try:
                return await self.scheduler.submit(call, hand_to_caller)
            finally:
                otel_context.detach(token)

        try:
            outcome = asyncio.run_coroutine_threadsafe(in_caller_context(), loop)
        except RuntimeError as exc:  # the loop was closed between the check and here
            raise SchedulingError("the scheduler is closed") from exc
        outcome.add_done_callback(lambda _: inbox.put(None))
        while True:
            work = inbox.get()
            if work is None:
                try:
                    return outcome.result()
                except concurrent.futures.CancelledError as exc:
                    raise SchedulingError("the scheduler shut down before the call finished") from exc
            attempt, done = work
            try:
                value = fn(attempt)
            except Exception as exc:
                self._settle(done, None, exc)
            except BaseException:
                outcome.cancel()
                raise
            else:
                self._settle(done, value, None)

    def _settle(self, done: asyncio.Future[Any], value: Any, error: Exception | None) -> None:
        def settle() -> None:
            if done.done():
                return
            if error is not None:
                done.set_exception(error)
            else:
                done.set_result(value)

        with contextlib.suppress(RuntimeError):  # a closed loop: shutdown already cancelled the call
            self._loop.call_soon_threadsafe(settle)

    def breakers(self) -> list[BreakerSnapshot]:
        """The state of every breaker the scheduler has used."""
        return self.scheduler.breakers()

    def dead_letters(self) -> list[DeadLetter]:
        """Dead letters recorded by the scheduler, oldest first."""
        return self.scheduler.dead_letters()

    def close(self, *, drain: bool = True, timeout_s: float | None = None) -> None:
        """Drain (or cancel) the calls in progress, stop the loop thread and join it. Idempotent."""
        with self._close_lock:
            if self._closed:
                return
            self._closed = True
        asyncio.run_coroutine_threadsafe(
            self.scheduler.aclose(drain=drain, timeout_s=timeout_s), self._loop
        ).result()
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join()
        self._loop.run_until_complete(self._loop.shutdown_default_executor())
        self._loop.close()

    def __enter__(self) -> SyncScheduler:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
