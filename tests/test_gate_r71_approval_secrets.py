"""What an approver is shown of a call's arguments that the policy does not mark loggable
(review R71): nothing, in the interrupt payload nor in what ``agentgate approval sign`` prints or
writes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from _cli import cli

from agentgate.capabilities import Call
from agentgate.gate import Approval, Gate
from agentgate.keys import SigningKey, save_key
from agentgate.policy import parse_policy
from agentgate.store import SQLiteStore

SECRET = "sk-live-4242"

POLICY = """
version: 1
trust_anchors:
  root: {{did: "{root}"}}
principals:
  agent: {{kind: agent, did: "{agent}", roles: [worker]}}
  lead: {{kind: human, did: "{lead}", roles: [lead]}}
  boss: {{kind: human, did: "{boss}", roles: [lead]}}
tools:
  refund:
    args: {{amount: {{type: integer, required: true}}, card: {{type: string}}}}
    loggable: [amount]
roles:
  worker:
    kind: agent
    capabilities:
      - resource: tool:refund
        constraints: {{card: {{prefix: "sk-"}}}}
    ttl_s: 600
  lead:
    kind: human
    capabilities:
      - resource: tool:refund
    ttl_s: 600
approvals:
  big-refund:
    resource: tool:refund
    when: {{card: {{prefix: "sk-live"}}}}
    approvers: [lead, boss]
    quorum: 2
    expiry_s: 300
"""


def test_an_argument_not_loggable_reaches_no_payload_nor_anything_approval_sign_writes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Review R71: confirmed sound, not a defect. The payload's reasons are not passed through
    ``redact_reasons`` as the log's are, so the question was whether a value not loggable (a card
    the gate's ``when`` and the grant's constraint both test) could reach what an approver reads.
    It cannot: the payload's ``args`` keep only loggable arguments (``redact``) and its reasons
    (the rule that allowed, the gate that applies, why an approval did not count) quote the
    policy, never a value; nor do the payloads asked again after an approval that does not count
    and after a first vote of two, nor ``approval sign``'s description, approval and ``--out``."""
    monkeypatch.delenv("AGENTGATE_STORE", raising=False)
    keys = {n: SigningKey.generate() for n in ("root", "agent", "lead", "boss", "eve")}
    for name in ("lead", "boss"):
        save_key(keys[name], tmp_path / "k", name)
    gate = Gate(
        parse_policy(POLICY.format(**{n: k.did for n, k in keys.items()})), SQLiteStore(tmp_path / "s.db")
    )
    try:
        agent = gate.issue(keys["root"], name="agent", key=keys["agent"], role="worker")
        call = Call.tool("refund", {"amount": 800, "card": SECRET})
        first = gate.authorize(agent, call, call_id="call-1")
        payload = first.approval_payload()
        shown = [payload]
        for signer in ("eve", "agent", "lead"):
            again = gate.authorize(
                agent, call, call_id="call-1", approval=Approval.sign(payload, keys[signer])
            )
            assert again.needs_approval
            shown.append(again.approval_payload())
        assert all(SECRET not in json.dumps(each) and "sk-live" not in json.dumps(each) for each in shown)
        (tmp_path / "p.json").write_text(json.dumps(payload), encoding="utf-8")
        out_file = tmp_path / "a.json"
        code, out, err = cli(
            capsys, "approval", "sign", str(tmp_path / "p.json"), "--as", str(tmp_path / "k" / "boss.key"),
            "--store", str(tmp_path / "s.db"), "--out", str(out_file),
        )  # fmt: skip
        assert code == 0, err
        assert SECRET not in out + err + out_file.read_text(encoding="utf-8")
    finally:
        gate.close()
