"""Ctrl-C and SIGTERM held back while a native extension module initialises (``run``).

The command turns Ctrl-C and SIGTERM into exceptions from its first line (``KeyboardInterrupt``,
``Terminated``), and imports native modules as it goes (orjson for every command, pydantic_core,
the signing library's bindings for some). Such a module's initialisation imports Python modules
of its own, whose code runs the signal's handler: the exception then leaves a native call that
does not expect one, and orjson 3.13 crashes the interpreter (SIGSEGV, exit 139, nothing said),
pydantic_core panics (a ``PanicException`` and a Rust backtrace). Review R88: while an extension
module is created and executed, SIGINT and SIGTERM are blocked in the thread that loads it, and
a signal that came meanwhile is taken as soon as the module is loaded: the command then ends as
any interrupted command does (``agentgate: interrupted``, exit 130; ``terminated``, 143).

Written by hand, at the loader, rather than by importing each native module first: a command
imports only what its verb needs (``grant check`` loads no pydantic), and a native module added
later is covered without a list to keep. Only the loading thread holds the signals back: the
command loads its modules in its main thread, before it starts any other."""

from __future__ import annotations

import signal
from collections.abc import Callable
from importlib.machinery import ExtensionFileLoader
from typing import Any

_HELD = frozenset({signal.SIGINT, signal.SIGTERM})


def _with_signals_held(load: Callable[..., Any]) -> Callable[..., Any]:
    """``load`` (a loader's method), run with SIGINT and SIGTERM blocked in this thread; the
    signals blocked before are blocked again after, and one that came meanwhile is then taken."""

    def held(*args: Any) -> Any:
        before = signal.pthread_sigmask(signal.SIG_BLOCK, _HELD)
        try:
            return load(*args)
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, before)

    return held


def native_imports_held() -> Callable[[], None]:
    """Make every extension module load with SIGINT and SIGTERM held back (see the module
    docstring); returns what puts the loader back as it was. Nothing is changed, and nothing
    put back, where the platform cannot block a signal (Windows)."""
    if not hasattr(signal, "pthread_sigmask"):
        return lambda: None
    originals = {name: getattr(ExtensionFileLoader, name) for name in ("create_module", "exec_module")}
    for name, load in originals.items():
        setattr(ExtensionFileLoader, name, _with_signals_held(load))

    def put_back() -> None:
        for name, load in originals.items():
            setattr(ExtensionFileLoader, name, load)

    return put_back
