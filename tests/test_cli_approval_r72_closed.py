"""``agentgate approval sign --store`` refuses, exit 1, a request the store holds as closed
(declined, superseded, void), used, or already approved by the signer: until review R72 it
checked what the payload shows against the store's request but not where the request stands,
and signed approvals that could never count (the CLI's main run with argv, a real Gate on a
SQLite file)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from _approval_rig import ApprovalRig
from test_cli_approval_r70_store_check import POLICY

from agentgate.gate import Approval

TWO = POLICY.replace(
    '  lead: {{kind: human, did: "{lead}", roles: [lead]}}\n',
    '  lead: {{kind: human, did: "{lead}", roles: [lead]}}\n  lead2: {{kind: human, did: "{lead2}"}}\n',
).replace("approvers: [lead]\n", "approvers: [lead, lead2]\n    quorum: 2\n")


@pytest.fixture
def one(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[ApprovalRig]:
    monkeypatch.delenv("AGENTGATE_STORE", raising=False)
    rig = ApprovalRig(
        tmp_path,
        POLICY.replace("approvers: [lead]", "approvers: [lead, lead2]").replace(
            '  lead: {{kind: human, did: "{lead}", roles: [lead]}}\n',
            '  lead: {{kind: human, did: "{lead}", roles: [lead]}}\n  lead2: {{kind: human, did: "{lead2}"}}\n',
        ),
    )
    yield rig
    rig.gate.close()


@pytest.fixture
def two(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[ApprovalRig]:
    monkeypatch.delenv("AGENTGATE_STORE", raising=False)
    rig = ApprovalRig(tmp_path, TWO)
    yield rig
    rig.gate.close()


def test_a_declined_request_is_refused(one: ApprovalRig, capsys: pytest.CaptureFixture[str]) -> None:
    """Review R72: a request declined (the run resumed with a "no") was signed with --store, its
    payload matching the store's request field for field. Refused now, exit 1, saying it was
    declined and nothing waits for it; nothing on standard output."""
    payload = one.asked.approval_payload()
    one.gate.decline(one.asked, "not today")
    code, out, err = one.sign(capsys, payload, "lead")
    assert code == 1 and out == "", err
    assert "refused" in err and "declined" in err, err


def test_a_used_request_is_refused(one: ApprovalRig, capsys: pytest.CaptureFixture[str]) -> None:
    """Review R72: once lead's approval let the refund run (the request consumed), lead2 signing
    the same payload with --store got an approval no run can count. Refused, exit 1."""
    payload = one.asked.approval_payload()
    approval = Approval.parse(one.gate.approve(payload, one.keys["lead"]))
    assert one.gate.authorize(one.agent, one.call, call_id="call-1", approval=approval).allowed
    code, out, err = one.sign(capsys, payload, "lead2")
    assert code == 1 and out == "", err
    assert "already used" in err, err


def test_a_second_yes_of_the_same_approver_is_refused(
    two: ApprovalRig, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R72: under a quorum of two, with lead's vote counted, lead signing again with --store
    got a yes the quorum never counts twice. Refused, exit 1; lead2 signs (exit 0)."""
    payload = two.asked.approval_payload()
    approval = Approval.parse(two.gate.approve(payload, two.keys["lead"]))
    again = two.gate.authorize(two.agent, two.call, call_id="call-1", approval=approval)
    assert again.needs_approval
    code, out, err = two.sign(capsys, again.approval_payload(), "lead")
    assert code == 1 and out == "", err
    assert "has already approved" in err, err
    code, out, err = two.sign(capsys, again.approval_payload(), "lead2")
    assert code == 0, err


def test_a_request_whose_grant_was_revoked_is_refused(
    one: ApprovalRig, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R72: a request still pending in the table whose call's grant was revoked by a writer
    other than a Gate (void: no yes of it ever counts) was signed with --store. Refused, exit 1,
    naming the grant."""
    payload = one.asked.approval_payload()
    one.gate.grants.revoke(one.agent.grant_id, now=int(time.time()))
    assert one.gate.approvals.get(payload["request"]["id"]).state == "pending"
    code, out, err = one.sign(capsys, payload, "lead")
    assert code == 1 and out == "", err
    assert "void" in err and one.agent.grant_id in err, err
