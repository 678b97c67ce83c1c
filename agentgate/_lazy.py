"""Packages whose public names are imported on first use (``agentgate``, ``agentgate.gate``,
``agentgate.dispatch``, ``agentgate.dispatch.broker``): importing one loads no layer, so the
command line starts (and can catch Ctrl-C) before it loads the parts a command needs, and a
command loads only those."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any


def lazy_exports(
    package: str, exports: Mapping[str, str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The module ``__getattr__`` and ``__dir__`` of ``package``: each name of ``exports``
    (name -> the module that defines it) is imported on first use and kept in the package's
    namespace; any other name is an ``AttributeError``."""
    namespace = sys.modules[package].__dict__

    def __getattr__(name: str) -> Any:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted([*namespace, *exports])

    return __getattr__, __dir__
