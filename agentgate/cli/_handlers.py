"""Handlers named, not imported: a verb group whose handlers need a heavy layer (the authority
engine, the policy package) registers its parser from a light module, and each verb's handler is
imported from the group's module only when that verb runs. ``agentgate --help`` and a verb's
``--help`` then load what the parser needs, and no more (review R65)."""

from __future__ import annotations

import argparse
import importlib
import signal
import threading
from collections.abc import Callable
from types import ModuleType
from typing import Any

_HELD = (signal.SIGINT, signal.SIGTERM)
"""The signals whose Python handlers wait while a handler's module is imported."""


def _imported(module: str) -> ModuleType:
    """``module``, imported whole before Ctrl-C or SIGTERM act: a signal that comes meanwhile is
    noted and its handler (``KeyboardInterrupt``, ``main``'s ``_Terminated``) runs once the import
    is done. Until review R71 it raised inside the import, also inside an extension module's
    initialization, and orjson's then crashed the interpreter (SIGSEGV, no ``agentgate:
    interrupted`` line). Only the main thread runs signal handlers: elsewhere it imports as is."""
    if threading.current_thread() is not threading.main_thread():
        return importlib.import_module(module)
    caught: list[tuple[int, Any]] = []
    before = {signum: signal.getsignal(signum) for signum in _HELD}
    held = [signum for signum, handler in before.items() if callable(handler)]
    for signum in held:
        signal.signal(signum, lambda signum, frame: caught.append((signum, frame)))
    try:
        return importlib.import_module(module)
    finally:
        for signum in held:
            signal.signal(signum, before[signum])
        for number, frame in caught[:1]:
            handler = before[signal.Signals(number)]
            if callable(handler):
                handler(number, frame)


def handled_by(module: str, name: str) -> Callable[[argparse.Namespace], int]:
    """The handler ``name`` of ``module``, imported when it is called (never when the parser is
    built): its attributes are read then, so a handler replaced on the module is the one run."""

    def handler(args: argparse.Namespace) -> int:
        run: Callable[[argparse.Namespace], int] = getattr(_imported(module), name)
        return run(args)

    handler.__qualname__ = handler.__name__ = f"{module}.{name}"
    return handler
