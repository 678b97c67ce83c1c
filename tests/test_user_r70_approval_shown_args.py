"""`agentgate approval sign` no longer tells its signer why the arguments shown are not the whole
call when it cannot know: a defect found by review R70 following docs/cli.md as a new user (an
approver handed an edited payload), failing before its fix."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agentgate.audit.entry import argument_digest
from agentgate.cli.main import main
from agentgate.gate import approval_call_hash
from agentgate.keys import SigningKey, save_key


def _payload(shown: dict[str, object], called: dict[str, object]) -> str:
    """An interrupt payload as the Gate writes it for a call with ``called`` arguments, but
    showing ``shown``: what a payload edited on its way to the approver holds."""
    request: dict[str, object] = {
        "id": "req-1",
        "expires_at": 4_000_000_000,
        "resource": "tool:payments.refund",
        "action": "invoke",
        "args": shown,
        "args_digest": argument_digest(called),
        "grant": "g" * 64,
        "call_id": "call-1",
        "requester": "support-agent",
        "requester_did": "did:key:z6MkgMUsyySoG71wYxUWVSE3CcGYrsCLrxu6EsdvSMf3tR1E",
        "approvers": ["alice"],
    }
    parts = [str(request[f]) for f in ("resource", "action", "args_digest", "grant", "call_id")]
    request["call_hash"] = approval_call_hash(*parts)
    return json.dumps({"agentgate": "approval_required", "request": request})


@pytest.mark.usefixtures("no_default_store")
def test_shown_arguments_that_are_not_the_call_are_not_explained_as_loggable_only(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R70: a payload showing `amount: 80` for a call of `amount: 800` was signed with the line
    `arguments  NOT all shown: only those the policy marks loggable; the digest signed covers all`.

    The command cannot tell arguments left out (not loggable) from arguments changed on the way:
    it only sees that what is shown does not hash to the digest. Its line said the first, so the
    approver read the amount shown as the call's. It now says both are possible and that the
    signature covers the call as it was made, not the arguments shown."""
    key, _ = save_key(SigningKey.generate(), tmp_path / "k", "alice")
    payload = tmp_path / "refund.json"
    payload.write_text(_payload({"amount": 80}, {"amount": 800}), encoding="utf-8")
    assert main(["approval", "sign", str(payload), "--as", str(key), "--out", str(tmp_path / "a.json")]) == 0
    err = capsys.readouterr().err
    line = next(each for each in err.splitlines() if each.lstrip().startswith("arguments"))
    assert "NOT all shown: only those the policy marks loggable;" not in line
    assert "do not hash to the args_digest signed" in line
    assert "changed" in line and "the call as it was made" in line
