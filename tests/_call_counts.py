"""Counting the calls of a module's function, patched for one test: work counted, not timed."""

from __future__ import annotations

from typing import Any

import pytest


def calls_of(monkeypatch: pytest.MonkeyPatch, module: object, name: str) -> list[int]:
    """Count the calls of ``module.name`` (patched for the test): the count is the list's item."""
    calls = [0]
    real = getattr(module, name)

    def counting(*args: Any) -> Any:
        calls[0] += 1
        return real(*args)

    monkeypatch.setattr(module, name, counting)
    return calls
