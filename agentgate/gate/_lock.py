"""The store lock that the ``Gate``'s entry points which read or write the store hold
(``_serialized``)."""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from typing import Concatenate, ParamSpec, Protocol, TypeVar

from agentgate.audit.spans import ends_held

T = TypeVar("T")
P = ParamSpec("P")


class _Locked(Protocol):
    """A ``Gate`` or one of its parts: what ``_serialized`` needs of it."""

    _store_lock: threading.RLock


G = TypeVar("G", bound=_Locked)


def _serialized(method: Callable[Concatenate[G, P], T]) -> Callable[Concatenate[G, P], T]:
    """Run a ``Gate`` method holding the gate's store lock (re-entrant).

    The gate's reads and writes run one at a time, in the caller's own thread: SQLite has one
    writer anyway, and a Python lock hands over at once, where two SQLite connections racing
    for the write lock would wait in SQLite's busy handler (sleeps of milliseconds). The store
    pools its connections, so the threads a framework makes and drops (LangGraph makes a thread
    pool per run) leave none open.

    The spans the method makes end once the lock is released (``ends_held``): ending a span
    runs the tracer's span processors in this thread, and an exporter that blocks there (a
    ``SimpleSpanProcessor``'s) must not hold every other thread's decision.
    """

    def wrapper(self: G, /, *args: P.args, **kwargs: P.kwargs) -> T:
        with ends_held(), self._store_lock:
            return method(self, *args, **kwargs)

    functools.update_wrapper(wrapper, method)
    return wrapper
