"""Settling by hand quotes what it refuses as ``quoted`` does, cut at 60 characters, as the
ledger's reservation ids are (review R88): ``held.settle_held`` with a reservation or a ``by``
nested past the recursion limit, and ``once.settle`` with such a key, were a bare
``RecursionError`` (``!r`` writes the whole ``repr`` before it is cut), and ``once.settle`` with a
key of 1 MB wrote it whole into ``SettlementRefused``."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from agentgate.errors import InputError
from agentgate.keys import SigningKey
from agentgate.store import Store, held, once, open_store
from agentgate.store.audit import AuditLog
from agentgate.store.ledger import BudgetLedger
from agentgate.store.once import OnceCalls


def _deep() -> list[Any]:
    value: list[Any] = []
    for _ in range(100_000):
        value = [value]
    return value


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    opened = open_store(tmp_path / "s.db")
    BudgetLedger(opened)
    OnceCalls(opened)
    yield opened
    opened.close()


SETTLES: dict[str, Callable[[Store, AuditLog], object]] = {
    "held-deep-reservation": lambda s, a: held.settle_held(s, a, _deep(), ran=True, by="op"),
    "held-deep-by": lambda s, a: held.settle_held(s, a, "a" * 32, ran=True, by=_deep()),
    "once-deep-key": lambda s, a: once.settle(s, a, _deep(), ran=True, by="op"),
    "once-deep-by": lambda s, a: once.settle(s, a, "k", ran=True, by=_deep()),
    "once-1mb-key": lambda s, a: once.settle(s, a, "k" * 1_000_000, ran=True, by="op"),
}


@pytest.mark.parametrize("settle", list(SETTLES.values()), ids=list(SETTLES))
def test_a_refused_settlement_quotes_the_value_short(
    store: Store, settle: Callable[[Store, AuditLog], object]
) -> None:
    audit = AuditLog(store, SigningKey.generate())
    with pytest.raises(InputError) as caught:
        settle(store, audit)
    assert len(str(caught.value)) < 200, str(caught.value)[:200]
