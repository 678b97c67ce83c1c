"""Handlers named, not imported: a verb group whose handlers need a heavy layer (the authority
engine, the policy package) registers its parser from a light module, and each verb's handler is
imported from the group's module only when that verb runs. ``agentgate --help`` and a verb's
``--help`` then load what the parser needs, and no more (review R65)."""

from __future__ import annotations

import argparse
import contextlib
import importlib
import signal
import threading
from collections.abc import Callable, Iterator
from types import FrameType, ModuleType
from typing import Any

_HELD = (signal.SIGINT, signal.SIGTERM)
"""The signals whose Python handlers wait while a handler's module is imported."""

_Handlers = dict[signal.Signals, Callable[[int, FrameType | None], Any]]
"""The Python handlers of the signals held (``_HELD``), each as it was before the import."""


def _imported(module: str) -> ModuleType:
    """``module``, imported whole before Ctrl-C or SIGTERM act: a signal that comes meanwhile is
    noted and its handler (``KeyboardInterrupt``, SIGTERM's ``agentgate.cli.Terminated``) runs once the import
    is done. Until review R71 it raised inside the import, also inside an extension module's
    initialization, and orjson's then crashed the interpreter (SIGSEGV, no ``agentgate:
    interrupted`` line). A second signal, the operator insisting (an import that hangs on a
    network filesystem), acts at once (until review R71 every one waited for the import). The
    handlers are swapped with both signals blocked (``_blocked``), so that one landing between
    two swaps cannot leave the other held for good (until review R71 it could). Only the main
    thread runs signal handlers: elsewhere it imports as is."""
    if threading.current_thread() is not threading.main_thread():
        return importlib.import_module(module)
    held, caught = holding()
    try:
        return importlib.import_module(module)
    finally:
        _put_back(held)
        for number, frame in caught[:1]:
            held[signal.Signals(number)](number, frame)


def holding() -> tuple[_Handlers, list[tuple[int, Any]]]:
    """Hold SIGINT and SIGTERM (main thread only): the first that comes is noted in the list
    returned, its handler not run; a second puts the handlers back and acts at once (the operator
    insisting). Returns the handlers replaced, for ``_put_back``, and that list."""
    caught: list[tuple[int, Any]] = []
    with _blocked():
        before = {signum: signal.getsignal(signum) for signum in _HELD}
        held: _Handlers = {signum: handler for signum, handler in before.items() if callable(handler)}

        def hold(signum: int, frame: Any) -> None:
            if caught:  # a second one: put the handlers back and let this one act now
                caught.clear()
                _put_back(held)
                held[signal.Signals(signum)](signum, frame)
            else:
                caught.append((signum, frame))

        for signum in held:
            signal.signal(signum, hold)
    return held, caught


@contextlib.contextmanager
def committed_work_held() -> Iterator[Callable[[], None]]:
    """The block of a verb that commits work and then says it: yields ``committed``, to call as
    the work commits (last inside its transaction: a signal during the COMMIT, which SQLite runs
    to its end before Python acts on it, is held too; until review R94's regression pass the
    settle verbs called it once the call that commits returned). From then
    until the block ends (the store closed, the line said) the first Ctrl-C or SIGTERM is held
    (``holding``) and dropped: the work is done, and the verb exits as it went, its line said;
    a second acts at once. Before ``committed`` a signal acts as ever (the transaction rolls back).
    Until review R94 a SIGTERM while ``store prune`` closed the store after its commit said
    ``agentgate: terminated``, exit 143, and no counts, though the rows were gone. Outside the
    main thread nothing is held."""
    taken: list[_Handlers] = []

    def committed() -> None:
        if not taken and threading.current_thread() is threading.main_thread():
            taken.append(holding()[0])

    try:
        yield committed
    finally:
        for held in taken:
            _put_back(held)


def _put_back(held: _Handlers) -> None:
    """The handlers ``held`` put back, swapped with the signals blocked: one that comes meanwhile
    acts once all are back."""
    with _blocked():
        for signum, handler in held.items():
            signal.signal(signum, handler)


@contextlib.contextmanager
def _blocked() -> Iterator[None]:
    """SIGINT and SIGTERM blocked (delivered once unblocked) where the platform can block them."""
    if not hasattr(signal, "pthread_sigmask"):  # Windows: swapped as they come
        yield
        return
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, _HELD)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)


def handled_by(module: str, name: str) -> Callable[[argparse.Namespace], int]:
    """The handler ``name`` of ``module``, imported when it is called (never when the parser is
    built): its attributes are read then, so a handler replaced on the module is the one run."""

    def handler(args: argparse.Namespace) -> int:
        run: Callable[[argparse.Namespace], int] = getattr(_imported(module), name)
        return run(args)

    handler.__qualname__ = handler.__name__ = f"{module}.{name}"
    return handler
