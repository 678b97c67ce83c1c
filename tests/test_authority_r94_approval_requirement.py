"""Review R94: ``ApprovalRequirement`` took any field types. An approval hook answering one with
``approvers=None`` or ``("alice", 7)`` made ``decide()`` raise a bare ``TypeError`` (after the
store was read), ``approvers="alice"`` asked for approval "from a, l, i, c, e", and
``quorum="two"`` went through. Its fields are now checked (``InputError`` naming the field), and
a hook whose answer is bad, or cannot be worded, gets the fail-closed ``approval_check_failed``
deny, as one that raises does."""

from __future__ import annotations

from typing import Any

import pytest

from agentgate.authority import ApprovalRequirement, Authority, Chain, GrantRepository, Invocation, issue
from agentgate.capabilities import Call
from agentgate.errors import InputError
from agentgate.findings import Outcome
from agentgate.keys import SigningKey
from agentgate.store import SQLiteStore

ROOT, ALICE = (SigningKey(bytes([i]) * 32) for i in range(51, 53))
NOW = 1_800_000_000

BAD = {
    "approvers None": ({"approvers": None}, "approvers must be a tuple of approver names, not NoneType"),
    "approvers a string": ({"approvers": "alice"}, "approvers must be a tuple of approver names, not str"),
    "approvers a list": ({"approvers": ["alice"]}, "approvers must be a tuple of approver names, not list"),
    "an approver a number": ({"approvers": ("alice", 7)}, "approvers[1] must be an approver's name, not int"),
    "quorum text": ({"approvers": ("alice",), "quorum": "two"}, "quorum must be a whole number from 1 to 1"),
    "quorum a bool": ({"approvers": ("alice",), "quorum": True}, "quorum must be a whole number from 1 to 1"),
    "quorum zero": ({"approvers": ("alice", "bob"), "quorum": 0}, "from 1 to 2 (the approvers named), not 0"),
    "quorum above approvers": ({"approvers": ("alice", "bob"), "quorum": 3}, "from 1 to 2"),
    "reason not text": ({"approvers": ("alice",), "reason": 5}, "reason must be a string, not int"),
}


def _decide(sqlite_store: SQLiteStore, answer: Any) -> Any:
    chain: Chain = issue(ROOT, ALICE.public, ["tool:x"], ttl=3600, now=NOW)
    authority = Authority(
        GrantRepository(sqlite_store), ROOT.public, approvals=lambda call, chain, inv: answer()
    )
    return authority.decide(Invocation.sign(ALICE, chain, Call.tool("x", {}), now=NOW), now=NOW + 1)


@pytest.mark.parametrize("case", list(BAD))
def test_a_malformed_requirement_is_refused_naming_the_field(case: str) -> None:
    fields, said = BAD[case]
    with pytest.raises(InputError, match="ApprovalRequirement") as raised:
        ApprovalRequirement(**fields)
    assert said in str(raised.value)


@pytest.mark.parametrize("case", list(BAD))
def test_a_hook_building_a_malformed_requirement_fails_closed(case: str, sqlite_store: SQLiteStore) -> None:
    fields, _ = BAD[case]
    d = _decide(sqlite_store, lambda: ApprovalRequirement(**fields))
    assert d.outcome is Outcome.DENY and [f.code for f in d.findings] == ["approval_check_failed"]


def test_a_requirement_built_around_its_checks_fails_closed_not_raised(sqlite_store: SQLiteStore) -> None:
    bad = object.__new__(ApprovalRequirement)
    for name, value in (("approvers", None), ("quorum", 1), ("reason", "")):
        object.__setattr__(bad, name, value)
    d = _decide(sqlite_store, lambda: bad)
    assert d.outcome is Outcome.DENY and [f.code for f in d.findings] == ["approval_check_failed"]


def test_a_well_formed_requirement_still_asks_its_approvers(sqlite_store: SQLiteStore) -> None:
    d = _decide(sqlite_store, lambda: ApprovalRequirement(("alice", "bob"), 2, "refunds"))
    assert d.outcome is Outcome.APPROVAL_REQUIRED
    assert d.reasons == ("approval required from alice, bob: refunds",)
    assert ApprovalRequirement(()).asked == "approval required from an approver"


@pytest.mark.parametrize("quorum", [10**5000, -(10**5000)], ids=["huge", "huge-negative"])
def test_a_quorum_too_large_to_write_is_refused_by_its_size(quorum: int) -> None:
    # Regression review of R94: the refusal wrote the quorum with repr, which raised a bare
    # ValueError past 4,300 digits.
    with pytest.raises(
        InputError, match=r"quorum must be a whole number from 1 to 1 .*an integer of 16610 bits"
    ):
        ApprovalRequirement(("alice",), quorum)
