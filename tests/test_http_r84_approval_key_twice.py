"""Review R84 of the gateway's ``X-Agentgate-Approval`` header: a key given twice in its JSON.

The header was read with a plain ``json.loads``, which keeps the last of two values for one key:
an approval whose first ``approver`` names one key and whose second names the real signer
verified and ran the call, where a proxy or a log in front that reads the first saw another
approver than the one the gateway verified and audited. The gateway refuses a key twice in a
request body (400) and a credential header sent twice (401 ``ambiguous_credentials``), and
``agentgate approval sign`` refuses a key twice in a payload; the approval is now refused as a
header sent twice is: 401 ``ambiguous_credentials`` naming the key, audited, nothing charged.

Through a live gateway on loopback (the ``env`` fixture of tests/test_gateway.py).
"""

from __future__ import annotations

import json

import pytest
from test_gateway import Env, _long

from agentgate.dispatch.gateway import APPROVAL_HEADER
from agentgate.gate import Approval

pytest_plugins = ("test_gateway",)  # its ``backends`` and ``env`` fixtures


def _twice(signed: dict[str, str], key: str, other: str, *, other_first: bool) -> str:
    """``signed`` as JSON with ``key`` given twice: ``other``, then the signed value (or after)."""
    pairs = [(key, other), *signed.items()] if other_first else [*signed.items(), (key, other)]
    return "{" + ",".join(f"{json.dumps(k)}:{json.dumps(v)}" for k, v in pairs) + "}"


@pytest.mark.parametrize("other_first", [True, False], ids=["other-first", "other-last"])
def test_an_approval_giving_a_key_twice_is_refused_never_resolved_by_order(
    env: Env, other_first: bool
) -> None:
    """Review R84: with the outsider's DID first and the approver's own last, the call ran (200),
    approved by the last; a reader of the first saw the outsider. Either order is now 401
    ``ambiguous_credentials`` naming the key, audited as a deny, nothing charged; the approval,
    not used, then runs the call when sent as signed."""
    send = _long(env)
    payload = send().json()
    signed = Approval.sign(payload, env.keys["lead"]).to_dict()
    before, count = env.ledger(), len(env.entries())
    answer = send(
        {APPROVAL_HEADER: _twice(signed, "approver", env.keys["outsider"].did, other_first=other_first)}
    )
    assert answer.status_code == 401, answer.text
    error = answer.json()["error"]
    assert (error["type"], error["code"]) == ("authentication_error", "ambiguous_credentials")
    assert f"{APPROVAL_HEADER} header gives the key 'approver' twice" in error["message"]
    assert env.ledger() == before
    assert [e.kind for e in env.entries()[count:]] == ["deny"]
    assert send({APPROVAL_HEADER: json.dumps(signed)}).status_code == 200


def test_a_key_twice_with_equal_values_is_refused_too(env: Env) -> None:
    """Review R84: the rule is the key given twice, whatever its values (as for two headers)."""
    send = _long(env)
    signed = Approval.sign(send().json(), env.keys["lead"]).to_dict()
    answer = send({APPROVAL_HEADER: _twice(signed, "signature", signed["signature"], other_first=True)})
    assert (answer.status_code, answer.json()["error"]["code"]) == (401, "ambiguous_credentials")
