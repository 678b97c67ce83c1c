"""Review R88d: ``merkle.tree_integer`` read a leaf index or tree size with ``operator.index``
and caught only its ``TypeError``; ``operator.index`` raises whatever the object's own
``__index__`` raises, so a ``ValueError`` or an ``OverflowError`` came out of the Merkle checks
and the audit log's readers bare. Each is now the ``InputError`` any non-integer gets, as
``tasks.backoff_bound`` refuses it (review R88c)."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentgate.audit.merkle import inclusion_ranges, tree_integer
from agentgate.errors import InputError
from agentgate.keys import SigningKey
from agentgate.store import SQLiteStore
from agentgate.store.audit import AuditLog


class _FailingIndex:
    def __init__(self, error: Exception) -> None:
        self.error = error

    def __index__(self) -> int:
        raise self.error

    def __repr__(self) -> str:
        return "_FailingIndex()"


class _Three:
    def __index__(self) -> int:
        return 3


ERRORS = [ValueError("bad __index__"), OverflowError("too big")]


@pytest.mark.parametrize("error", ERRORS, ids=["value-error", "overflow-error"])
def test_tree_integer_refuses_a_failing_index(error: Exception) -> None:
    with pytest.raises(
        InputError,
        match=r"^Merkle proof check: index must be a whole number \(an int\), got _FailingIndex\(\)$",
    ):
        tree_integer(_FailingIndex(error), "index")
    with pytest.raises(InputError, match="size must be a whole number"):
        inclusion_ranges(1, _FailingIndex(error))  # type: ignore[arg-type]


@pytest.mark.parametrize("error", ERRORS, ids=["value-error", "overflow-error"])
def test_audit_log_refuses_a_failing_index(error: Exception, tmp_path: Path) -> None:
    with SQLiteStore(tmp_path / "s.db") as store:
        log = AuditLog(store, SigningKey.generate())
        with pytest.raises(InputError, match="index must be a whole number"):
            log.entry(_FailingIndex(error))  # type: ignore[arg-type]


def test_a_working_index_is_still_read() -> None:
    assert tree_integer(_Three(), "index") == 3
