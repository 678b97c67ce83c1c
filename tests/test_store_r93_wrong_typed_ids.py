"""Wrong-typed arguments to the store API are ``InputError``, never a bare ``TypeError`` nor a
``StoreError`` (which a caller that fails closed reads as the store failing) (review R93):
``BudgetLedger.reserve`` with a chain that is not a list or tuple, and ``ApprovalStore``'s
``approve``, ``deny``, ``consume`` and ``get`` with an id that is not text or holds a lone
surrogate or a NUL (``ledger.may_be_stored``), answered as an id no request has. A real request
is still found and approved.

Real components: each store (the ``store`` fixture: SQLite and PostgreSQL)."""

from __future__ import annotations

import time

import pytest

from agentgate.errors import InputError
from agentgate.store import Store
from agentgate.store.approvals import ApprovalStore
from agentgate.store.ledger import BudgetLedger

TIP = "b" * 64
BAD_IDS = [["x"], {"x": 1}, "\ud800", "\x00"]
BAD_ID_NAMES = ["list", "dict", "surrogate", "nul"]


@pytest.mark.parametrize("chain", [(g for g in [TIP]), {TIP}, TIP], ids=["generator", "set", "string"])
def test_reserve_refuses_a_chain_that_is_not_a_list_or_tuple(store: Store, chain: object) -> None:
    ledger = BudgetLedger(store)
    with pytest.raises(InputError, match="chain must be a non-empty list or tuple"):
        ledger.reserve(None, chain, {TIP: 5, "b": 5}, 1)  # type: ignore[arg-type]
    assert store.query("SELECT COUNT(*) FROM budget_reservations")[0][0] == 0


@pytest.mark.parametrize("bad", BAD_IDS, ids=BAD_ID_NAMES)
def test_an_approval_id_no_request_can_have_is_no_request(store: Store, bad: object) -> None:
    approvals = ApprovalStore(store)
    with pytest.raises(InputError, match=r"^no approval request "):
        approvals.approve(bad, "did:key:zapprover")  # type: ignore[arg-type]
    with pytest.raises(InputError, match=r"^no approval request "):
        approvals.deny(bad, "did:key:zapprover")  # type: ignore[arg-type]
    with pytest.raises(InputError, match=r"^no approval request "):
        approvals.consume(bad, "h" * 64)  # type: ignore[arg-type]
    with pytest.raises(InputError, match=r"^no approval request "):
        approvals.get(bad)  # type: ignore[arg-type]


def test_a_real_request_is_still_approved(store: Store) -> None:
    approvals = ApprovalStore(store)
    request = approvals.request("h" * 64, "did:key:zrequester", time.time() + 60)
    approvals.approve(request, "did:key:zapprover")
    assert approvals.get(request).state == "approved"
