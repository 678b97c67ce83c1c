"""``ApprovalStore.request`` with a quorum past what the stores' integers hold (review R88, third
regression pass). A quorum of 2**63 or ``10**5000`` passed the ``>= 1`` check and reached the
statement, which refused it as a ``StoreError`` about "an integer value out of the range a store
holds", naming no quorum. It is now an ``InputError`` naming the quorum and its bound, 2**63 - 1,
nothing written (a policy's quorum is at most 1000; the store holds what its column does)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentgate.errors import InputError, StoreError
from agentgate.store import Store, open_store
from agentgate.store.approvals import ApprovalStore


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    opened = open_store(tmp_path / "s.db")
    yield opened
    opened.close()


@pytest.mark.parametrize(
    ("quorum", "shown"),
    [(2**63, "9223372036854775808"), (10**5000, "an integer of 16610 bits")],
    ids=["2**63", "10**5000"],
)
def test_a_quorum_past_2_63_minus_1_is_an_input_error_naming_it(
    store: Store, quorum: int, shown: str
) -> None:
    approvals = ApprovalStore(store)
    with pytest.raises(InputError) as caught:
        approvals.request("h", "alice", time.time() + 60, quorum=quorum)
    assert not isinstance(caught.value, StoreError)
    assert str(caught.value) == (
        f"an approval quorum is at most 2**63 - 1 (what a store's integer holds), got {shown}"
    )
    assert store.query("SELECT COUNT(*) FROM approvals")[0][0] == 0


def test_the_largest_quorum_a_store_holds_is_kept(store: Store) -> None:
    approvals = ApprovalStore(store)
    approval_id = approvals.request("h", "alice", time.time() + 60, quorum=2**63 - 1)
    approval = approvals.get(approval_id)
    assert approval is not None and approval.quorum == 2**63 - 1
