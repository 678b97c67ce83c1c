"""Review R86d: a negative entry index names no entry, and every audit log read refuses one with
an ``InputError`` that quotes it as ``quoted`` does (an integer past 128 bits by its size), never
passing it to the driver. Until R86d ``entry``, ``entry_bytes``, ``entries_at``, ``prove`` and ``explain``
wrote -10**5000 (and ``prove`` with a checkpoint given 10**5000) raw: a bare ``ValueError``;
``referring`` and ``entries`` passed it to the driver: ``StoreError``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from test_audit_r86c_store_whole import log as log  # the fixture: four entries

from agentgate.errors import InputError, StoreError
from agentgate.store.audit import AuditLog

HUGE = 10**5000


_READS: list[tuple[str, Callable[[AuditLog, int], Any]]] = [
    ("entry", lambda log, i: log.entry(i)),
    ("entry_bytes", lambda log, i: log.entry_bytes(i)),
    ("entries_at", lambda log, i: log.entries_at([0, i])),
    ("prove", lambda log, i: log.prove(i)),
    ("prove-with-checkpoint", lambda log, i: log.prove(i, log.checkpoint())),
    ("explain", lambda log, i: log.explain(i)),
    ("referring", lambda log, i: log.referring(i)),
    ("entries", lambda log, i: list(log.entries(i))),
]


@pytest.mark.parametrize("read", [r for _, r in _READS], ids=[n for n, _ in _READS])
@pytest.mark.parametrize(
    ("index", "named"), [(-HUGE, "an integer of 16610 bits"), (-1, "-1")], ids=["huge", "one"]
)
def test_a_negative_index_names_no_entry(
    log: AuditLog, read: Callable[[AuditLog, int], Any], index: int, named: str
) -> None:
    with pytest.raises(InputError) as refused:
        read(log, index)
    assert not isinstance(refused.value, StoreError)
    assert str(refused.value) == f"audit log has no entry {named}"


def test_an_index_past_a_checkpoint_given_is_named_by_its_size(log: AuditLog) -> None:
    with pytest.raises(InputError) as refused:
        log.prove(HUGE, log.checkpoint())
    assert str(refused.value) == "entry an integer of 16610 bits is not covered by a checkpoint of size 4"
