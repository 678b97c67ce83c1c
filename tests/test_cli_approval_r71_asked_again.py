"""``agentgate approval sign --store`` on the payload LangGraph shows after an approval that did
not count (review R71)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from _cli import cli
from test_cli_approval_r70_store_check import POLICY

from agentgate.capabilities import Call
from agentgate.gate import Approval, Gate
from agentgate.integrations.langgraph._replies import _asking
from agentgate.keys import SigningKey, save_key
from agentgate.policy import parse_policy
from agentgate.store import SQLiteStore


def _asked_again(tmp_path: Path) -> dict[str, Any]:
    """The interrupt payload the LangGraph middleware (``_asking``) shows after a first approval,
    signed by a key the gate does not list, did not count: the request's reasons, then why."""
    keys = {n: SigningKey.generate() for n in ("root", "agent", "lead", "eve")}
    save_key(keys["lead"], tmp_path / "k", "lead")
    policy = parse_policy(POLICY.format(**{n: keys[n].did for n in ("root", "agent", "lead")}))
    gate = Gate(policy, SQLiteStore(tmp_path / "s.db"))
    try:
        agent = gate.issue(keys["root"], name="agent", key=keys["agent"], role="worker")
        call = Call.tool("refund", {"amount": 800, "note": "customer 42"})
        first = gate.authorize(agent, call, call_id="call-1")
        wrong = Approval.sign(first.approval_payload(), keys["eve"])
        again = gate.authorize(agent, call, call_id="call-1", approval=wrong)
        return _asking(again, first)
    finally:
        gate.close()


def test_a_payload_asked_again_after_an_approval_that_did_not_count_is_signed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Review R71: after an approval that did not count (another key, the requester's own), the
    payload LangGraph shows ends with why (``approval not counted: ...``), a reason the request's
    first ``approval_required`` entry cannot hold (a later entry of the request does). The store
    check refused that untouched payload as ``its 'reasons' are not those audit entry 1 records:
    changed on its way``, so an approver with ``--store`` could never sign a request asked again.
    Such trailing reasons, the Gate's word on an approval given before, are now let through; the
    ``why`` line shows the entry's reasons only, and (since review R72) a ``not counted`` line the
    one the log holds (tests/test_cli_approval_r72_reasons.py)."""
    monkeypatch.delenv("AGENTGATE_STORE", raising=False)
    payload = _asked_again(tmp_path)
    assert payload["request"]["reasons"][-1].startswith("approval not counted: ")
    path = tmp_path / "p.json"
    path.write_text(json.dumps(payload), encoding="utf-8")
    store = str(tmp_path / "s.db")
    code, out, err = cli(
        capsys, "approval", "sign", str(path), "--as", str(tmp_path / "k" / "lead.key"), "--store", store
    )
    assert code == 0, err
    assert json.loads(out)["request"] == payload["request"]["id"]
    assert "not counted" not in next(line for line in err.splitlines() if line.startswith("  why ")), err


@pytest.mark.parametrize(
    "added", ["approval gate big-refund applies: 1 of lead, boss must approve within 300s", "boss agreed"]
)
def test_a_reason_added_on_the_way_is_still_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, added: str
) -> None:
    """Review R71: only the Gate's reasons on an approval that did not count may follow the
    entry's; any other reason added on the way is refused, as before."""
    monkeypatch.delenv("AGENTGATE_STORE", raising=False)
    payload = _asked_again(tmp_path)
    payload["request"]["reasons"].append(added)
    path = tmp_path / "p.json"
    path.write_text(json.dumps(payload), encoding="utf-8")
    store = str(tmp_path / "s.db")
    code, out, err = cli(
        capsys, "approval", "sign", str(path), "--as", str(tmp_path / "k" / "lead.key"), "--store", store
    )
    assert (code, out) == (1, ""), err
    assert "its 'reasons' are not those audit entry" in err, err


def test_a_request_asked_again_carries_its_expiry_as_the_first_ask_wrote_it(tmp_path: Path) -> None:
    """Review R81: the first ask wrote ``expires_at`` as an integer (``1796559858``); asked again
    (LangGraph re-running the node, or after an approval that did not count) the payload carried
    the store's float (``1796559858.0``), though docs/cli.md gives whole times as integers and
    ``approval list`` the payload's. Rule: the same value, of the same type, every time."""
    keys = {n: SigningKey.generate() for n in ("root", "agent", "lead")}
    policy = parse_policy(POLICY.format(**{n: keys[n].did for n in ("root", "agent", "lead")}))
    gate = Gate(policy, SQLiteStore(tmp_path / "s.db"))
    try:
        agent = gate.issue(keys["root"], name="agent", key=keys["agent"], role="worker")
        call = Call.tool("refund", {"amount": 800, "note": "customer 42"})
        first = gate.authorize(agent, call, call_id="call-1").approval_payload()["request"]
        again = gate.authorize(agent, call, call_id="call-1").approval_payload()["request"]
    finally:
        gate.close()
    assert again["id"] == first["id"]
    assert type(first["expires_at"]) is int and type(again["expires_at"]) is int
    assert again["expires_at"] == first["expires_at"]
