"""(From a review) approvals over HTTP (``X-Agentgate-Approval``) and the one-transaction decisions.

Uses the gateway tests' ``env`` fixture (real HTTP on 127.0.0.1, simulated backends, SQLite).
"""

from __future__ import annotations

import json
from typing import Any

from test_gateway import OTHER, Env, _messages, _post

from agentgate.dispatch.gateway import APPROVAL_HEADER, invocation_headers
from agentgate.gate import AgentIdentity, Approval

pytest_plugins = ("test_gateway",)  # its ``backends`` and ``env`` fixtures

BODY = {"model": OTHER, "messages": _messages(), "max_tokens": 200}


def _send(env: Env, who: AgentIdentity, extra: dict[str, str] | None = None, body: Any = None) -> Any:
    sent = BODY if body is None else body
    return _post(env, sent, {**invocation_headers(who.key, who.chain, sent), **(extra or {})})


def _allows(env: Env) -> int:
    return sum(1 for e in env.entries() if e.kind == "allow")


def test_an_approval_is_bound_to_the_grant_not_only_to_the_key(env: Env) -> None:
    """The same agent key under another grant (same body, same model) gets no use of it."""
    asked = _send(env, env.agent).json()
    approval = json.dumps(Approval.sign(asked, env.keys["lead"]).to_dict())
    again = env.gate.issue(env.keys["root"], name="agent", key=env.keys["agent"], role="chat")
    moved = _send(env, again, {APPROVAL_HEADER: approval})
    assert moved.status_code == 403 and moved.json()["error"]["code"] == "approval_required"
    # ... and it still works, once, for the grant it was asked under
    assert _send(env, env.agent, {APPROVAL_HEADER: approval}).status_code == 200
    assert _send(env, env.agent, {APPROVAL_HEADER: approval}).status_code == 403


def test_an_approval_presented_with_a_refused_invocation_is_not_spent(env: Env) -> None:
    """A replayed invocation carrying a valid approval is 401 and leaves the approval unused; a
    fresh invocation with it then runs, once."""
    headers = invocation_headers(env.agent.key, env.agent.chain, BODY)
    asked = _post(env, BODY, headers).json()  # this invocation's nonce is now spent
    assert asked["error"]["code"] == "approval_required"
    approval = {APPROVAL_HEADER: json.dumps(Approval.sign(asked, env.keys["lead"]).to_dict())}
    before = env.ledger()
    replay = _post(env, BODY, {**headers, **approval})
    assert replay.status_code == 401 and replay.json()["error"]["code"] == "replayed_invocation"
    assert env.ledger() == before and _allows(env) == 0
    assert _send(env, env.agent, approval).status_code == 200
    assert _send(env, env.agent, approval).status_code == 403
    assert _allows(env) == 1


def test_approval_headers_that_are_json_but_odd_never_answer_500(env: Env) -> None:
    """Huge numbers, nested values, a wrong-length signature by the right approver,
    an approver that is not a did: each is a 4xx and nothing is charged or allowed."""
    asked = _send(env, env.agent).json()
    request = asked["request"]
    lead = env.keys["lead"].did
    real = Approval.sign(asked, env.keys["lead"]).to_dict()
    odd = [
        {**real, "signature": "00"},
        {**real, "signature": real["signature"][:-2]},
        {**real, "approver": "did:key:z" + "1" * 50},
        {**real, "approver": lead + "\u0000"},
        {**real, "request": {"id": request["id"]}},
        {**real, "call_hash": 10**400},
        {
            "request": request["id"],
            "call_hash": request["call_hash"],
            "approver": lead,
            "signature": "x" * 128,
        },
    ]
    before = env.ledger()
    for value in odd:
        text = json.dumps(value)  # ASCII, with \ud800 escaped as JSON allows
        answer = _send(env, env.agent, {APPROVAL_HEADER: text})
        assert answer.status_code in (400, 403), (value, answer.status_code, answer.text)
    for text in ('{"request":', "[" * 50_000, "1e999999", '"x"', "null"):
        answer = _send(env, env.agent, {APPROVAL_HEADER: text})
        assert answer.status_code == 400, (text[:20], answer.status_code, answer.text)
    # A request head over 64 KiB never reaches the app (review R4: the head is bounded).
    answer = _send(env, env.agent, {APPROVAL_HEADER: "[" * 100_000})
    assert answer.status_code == 431, answer.text
    assert env.ledger() == before and _allows(env) == 0


def test_an_approval_header_on_a_call_below_the_gate_is_not_consumed(env: Env) -> None:
    """A call that needs no approval runs without touching an approval it happens to carry; the
    approval still serves the gated call it was given for."""
    asked = _send(env, env.agent).json()
    approval = {APPROVAL_HEADER: json.dumps(Approval.sign(asked, env.keys["lead"]).to_dict())}
    small = {"model": OTHER, "messages": _messages(), "max_tokens": 50}
    assert _send(env, env.agent, approval, body=small).status_code == 200
    assert _send(env, env.agent, approval).status_code == 200


def test_an_approval_whose_request_id_holds_a_lone_surrogate_is_a_refusal_not_a_500(env: Env) -> None:
    """HIGH (found): JSON may escape a lone surrogate (``"\\ud800"``). With the right approver and
    call hash, ``Approval.verify`` encodes the signed bytes, ``str.encode`` raises
    UnicodeEncodeError (not an AgentGateError), and the gateway answers 500 with a traceback in
    its log instead of a 400 ``malformed_approval`` (or 403 ``approval_required``)."""
    asked = _send(env, env.agent).json()
    real = Approval.sign(asked, env.keys["lead"]).to_dict()
    before = env.ledger()
    answer = _send(env, env.agent, {APPROVAL_HEADER: json.dumps({**real, "request": "\ud800"})})
    assert answer.status_code in (400, 403), (answer.status_code, answer.text)
    assert env.ledger() == before and _allows(env) == 0


def test_a_deeply_nested_body_is_a_400_with_the_refusal_audited(env: Env) -> None:
    """A body nested 100,000 deep (far under the 8 MiB limit) made ``json.loads`` raise
    RecursionError, which escaped as a bare 500 with nothing audited. Nesting that does parse
    (900 deep, inside a message) is an ordinary request or refusal, never a 500."""
    headers = {"Authorization": f"Bearer {env.agent.chain.token}"}
    before = len(env.entries())
    raw = b'{"model":"x","messages":' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    answer = _post(env, raw, headers)
    assert answer.status_code == 400, (answer.status_code, answer.text[:200])
    assert json.loads(answer.text)["error"]["type"] == "invalid_request_error"
    assert len(env.entries()) == before + 1
    for depth in (900, 5000):
        nested = b'{"model":"x","messages":[{"role":"user","content":' + b"[" * depth + b"]" * depth + b"}]}"
        answer = _post(env, nested, headers)
        assert answer.status_code < 500, (depth, answer.status_code, answer.text[:200])
