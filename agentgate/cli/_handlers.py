"""Handlers named, not imported: a verb group whose handlers need a heavy layer (the authority
engine, the policy package) registers its parser from a light module, and each verb's handler is
imported from the group's module only when that verb runs. ``agentgate --help`` and a verb's
``--help`` then load what the parser needs, and no more (review R65)."""

from __future__ import annotations

import argparse
import importlib
from collections.abc import Callable


def handled_by(module: str, name: str) -> Callable[[argparse.Namespace], int]:
    """The handler ``name`` of ``module``, imported when it is called (never when the parser is
    built): its attributes are read then, so a handler replaced on the module is the one run."""

    def handler(args: argparse.Namespace) -> int:
        run: Callable[[argparse.Namespace], int] = getattr(importlib.import_module(module), name)
        return run(args)

    handler.__qualname__ = handler.__name__ = f"{module}.{name}"
    return handler
