"""Refusals of the approval store and of settling a held reservation quote the value as
``quoted`` does, cut short, an integer past 128 bits by its size (review R88): before,
``ApprovalStore.request(quorum=-10**5000)`` and ``held.settle_held(min_age_s=-10**5000)`` were a
bare ``ValueError`` (Python writes no integer past 4,300 digits), and ``ApprovalStore.approve``
of an unknown id of 1 MB wrote it whole into its ``InputError``."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from agentgate.errors import InputError
from agentgate.keys import SigningKey
from agentgate.store import Store, held, open_store
from agentgate.store.approvals import ApprovalStore
from agentgate.store.audit import AuditLog
from agentgate.store.ledger import BudgetLedger


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    opened = open_store(tmp_path / "s.db")
    BudgetLedger(opened)
    yield opened
    opened.close()


REFUSED: dict[str, tuple[Callable[[Store], object], str]] = {
    "quorum-5000-digits": (
        lambda s: ApprovalStore(s).request("h", "r", time.time() + 60, quorum=-(10**5000)),
        "an approval quorum is a whole number >= 1, got an integer of 16610 bits",
    ),
    "approve-1mb-id": (
        lambda s: ApprovalStore(s).approve("x" * 1_000_000, "bob"),
        "no approval request 'xxxx",
    ),
    "min-age-5000-digits": (
        lambda s: held.settle_held(
            s, AuditLog(s, SigningKey.generate()), "a" * 32, ran=True, by="op", min_age_s=-(10**5000)
        ),
        "the minimum age must be a number of seconds >= 0, got an integer of 16610 bits",
    ),
}


@pytest.mark.parametrize(("refused", "message"), list(REFUSED.values()), ids=list(REFUSED))
def test_a_refusal_quotes_the_value_short(
    store: Store, refused: Callable[[Store], object], message: str
) -> None:
    with pytest.raises(InputError) as caught:
        refused(store)
    assert str(caught.value).startswith(message), str(caught.value)[:200]
    assert len(str(caught.value)) < 200
