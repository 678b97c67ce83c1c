"""What the verb groups share: strict JSON arguments, one way to print a time, opening a store to read."""

from __future__ import annotations

import json
import math
import os
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from agentgate.errors import InputError
from agentgate.store import DEFAULT_PATH, Store, open_store


def json_object(text: str, flag: str = "--args") -> dict[str, Any]:
    """Parse a call's arguments given on the command line: one JSON object, strictly.

    Duplicate keys (JSON would silently keep the last one), ``NaN`` and ``Infinity``, and
    anything but an object are refused with ``InputError`` naming ``flag``.
    """

    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        seen: dict[str, Any] = {}
        for key, value in items:
            if key in seen:
                raise InputError(f"{flag}: duplicate key {key!r}")
            seen[key] = value
        return seen

    def constant(name: str) -> Any:
        raise InputError(f"{flag}: {name} is not a JSON value")

    try:
        value = json.loads(text, object_pairs_hook=pairs, parse_constant=constant)
    except (ValueError, RecursionError) as exc:
        raise InputError(
            f"{flag} is not JSON: {str(exc)[:120]}; quote it: {flag} '{{\"amount\": 80}}'"
        ) from None
    if not isinstance(value, dict):
        raise InputError(f"{flag} must be a JSON object, e.g. {flag} '{{\"amount\": 80}}'")
    return value


def utc(timestamp: float | None) -> str:
    """A Unix time as ``2026-11-29T18:00:00Z`` (UTC, seconds); ``-`` for none or a non-finite one."""
    if timestamp is None or not math.isfinite(timestamp):
        return "-"
    try:
        return datetime.fromtimestamp(timestamp, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    except (OverflowError, ValueError, OSError):  # beyond the years a datetime can hold
        return "-"


def open_existing_store(url: str | None) -> Store:
    """``open_store`` for a command that only reads: a SQLite file that does not exist is an
    ``InputError`` (a mistyped path), not a new empty store that looks like an empty answer."""
    target = url or os.environ.get("AGENTGATE_STORE") or DEFAULT_PATH
    if not target.startswith(("postgresql://", "postgres://")):
        path = target.removeprefix("sqlite:///")
        if not Path(path).exists():
            raise InputError(f"no store at {path}: check --store or AGENTGATE_STORE")
    return open_store(target)
