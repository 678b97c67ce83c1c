"""The gateway's request authentication as a client in another language sees it: a
signer written from docs/gateway.md and docs/token-format.md alone (standard library and PyNaCl,
no agentgate code), and the headers, revocations and bodies a hostile or careless caller sends.

Uses the gateway tests' ``env`` fixture (real HTTP on 127.0.0.1, simulated backends, SQLite).
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import socket
import time
from datetime import timedelta
from functools import partial
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
from nacl.signing import SigningKey as NaclKey
from test_gateway import MODEL, NAMES, OTHER, Env, _assert_refused, _messages, _policy_text, _post

from agentgate.authority import issue
from agentgate.dispatch.gateway import (
    INVOCATION_HEADER,
    GatewayGate,
    InvocationSigner,
    chat_call,
    invocation_headers,
)
from agentgate.errors import InputError
from agentgate.keys import SigningKey
from agentgate.policy import parse_policy
from agentgate.store import Store

pytest_plugins = ("test_gateway",)  # its ``backends`` and ``env`` fixtures

BODY = {"model": MODEL, "messages": _messages(), "max_tokens": 8}


# --- a signer from the docs alone ------------------------------------------------------------------


def _canonical(value: Any) -> bytes:
    return json.dumps(
        value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    ).encode()


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _did(key: NaclKey) -> str:
    alphabet = "123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz"
    data = b"\xed\x01" + bytes(key.verify_key)
    n, text = int.from_bytes(data, "big"), ""
    while n:
        n, digit = divmod(n, 58)
        text = alphabet[digit] + text
    return "did:key:z" + text


def _doc_headers(key: NaclKey, chain: str, body: dict[str, Any]) -> dict[str, str]:
    """The two headers, as docs/gateway.md ("Authenticating callers") describes them."""
    tip = base64.urlsafe_b64decode(chain.split(".")[-2] + "==")
    limit = body.get("max_completion_tokens") or body.get("max_tokens") or 1024
    args = {"max_tokens": limit, "body_sha256": hashlib.sha256(_canonical(body)).hexdigest()}
    now = int(time.time())
    payload = _canonical(
        {
            "v": 1,
            "iss": _did(key),
            "tip": hashlib.sha256(tip).hexdigest(),
            "res": f"model:{body['model']}",
            "act": "generate",
            "args": hashlib.sha256(_canonical(args)).hexdigest(),
            "nonce": os.urandom(16).hex(),
            "iat": now,
            "exp": now + 60,
        }
    )
    signature = key.sign(b"agentgate/invocation/v1\x00" + payload).signature
    return {"Authorization": f"Bearer {chain}", INVOCATION_HEADER: f"agi1.{_b64(payload)}.{_b64(signature)}"}


def test_a_client_written_from_the_docs_alone_is_served_and_its_body_is_hashed_canonically(env: Env) -> None:
    """The digest is over the canonical JSON of the body the gateway reads, not its bytes: the same
    body sent with other whitespace, key order and escapes passes; another body does not."""
    key = NaclKey(env.keys["agent"].seed)
    headers = _doc_headers(key, env.agent.chain.token, BODY)
    respelled = json.dumps(dict(reversed(list(BODY.items()))), indent=2, ensure_ascii=True).encode()
    assert _post(env, respelled, headers).status_code == 200
    other = {**BODY, "messages": _messages("Something else.")}
    before, count = env.ledger(), len(env.entries())
    replayed = _post(env, other, _doc_headers(key, env.agent.chain.token, BODY))
    assert _assert_refused(env, replayed, 401, before, count)["code"] == "args_digest_mismatch"


# --- defects ------------------------------------------------------------------------------------------


def _raw_post(env: Env, lines: list[str], body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    """POST ``body`` over a raw socket with the header ``lines`` as written (httpx refuses white
    space at the end of a header value; HTTP allows it and says it is not part of the value)."""
    url = urlsplit(env.base_url)
    content = json.dumps(body).encode()
    head = (
        "POST /v1/chat/completions HTTP/1.1\r\nHost: gateway\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(content)}\r\nConnection: close\r\n" + "".join(f"{line}\r\n" for line in lines)
    )
    with socket.create_connection((url.hostname, url.port), timeout=10) as sock:
        sock.sendall(head.encode() + b"\r\n" + content)
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    status, _, rest = answer.partition(b"\r\n\r\n")
    return int(status.split()[1]), json.loads(rest)


@pytest.mark.parametrize("after", [" ", "  ", "\t"])
def test_white_space_after_the_invocation_header_is_not_part_of_its_value(env: Env, after: str) -> None:
    """RFC 9110, 5.5: a field value excludes the white space around it. httptools keeps what ends
    the line, so a valid invocation followed by a space was 401 ``malformed_token`` (the bearer
    token, read with its white space stripped, was not)."""
    headers = invocation_headers(env.agent.key, env.agent.chain, BODY)
    lines = [f"{name}: {value}{after}" for name, value in headers.items()]
    status, answer = _raw_post(env, lines, BODY)
    assert status == 200, answer


def test_a_revoked_grant_is_401_revoked_even_for_a_call_it_does_not_cover(env: Env) -> None:
    """docs/gateway.md: 401 when the authority does not hold (``revoked`` among them), "even if the
    grant does not cover the call either". The engine checks coverage before it reads
    revocation, so a revoked grant asking outside its scope was 403 ``call_not_covered`` (telling
    the holder of a dead grant to ask for one that covers the call)."""
    env.gate.revoke(env.poor, reason="leaked")
    outside = {**BODY, "model": OTHER}
    before, count = env.ledger(), len(env.entries())
    answer = _post(env, outside, invocation_headers(env.poor.key, env.poor.chain, outside))
    error = _assert_refused(env, answer, 401, before, count)
    assert (error["type"], error["code"]) == ("authentication_error", "revoked")
    assert "revoked" in env.entries()[-1].reasons[0]


def test_a_revoked_grant_behind_an_approval_gate_is_401_for_a_call_it_does_not_cover(env: Env) -> None:
    """The same on the gated path: the policy puts the call behind a gate, the (delegated) grant
    does not cover it, and the grant is revoked."""
    narrow = env.gate.delegate(
        env.agent,
        name="helper",
        key=SigningKey.generate(),
        capabilities=[f"model:{MODEL}?max_tokens<=256"],
        ttl=timedelta(minutes=5),
        budget=1000,
    )
    env.gate.revoke(narrow, reason="leaked")
    gated = {"model": OTHER, "messages": _messages(), "max_tokens": 200}
    before, count = env.ledger(), len(env.entries())
    answer = _post(env, gated, invocation_headers(narrow.key, narrow.chain, gated))
    assert _assert_refused(env, answer, 401, before, count)["code"] == "revoked"


def test_a_grant_that_does_not_cover_the_call_is_still_403_when_it_is_not_revoked(env: Env) -> None:
    outside = {**BODY, "model": OTHER}
    answer = _post(env, outside, invocation_headers(env.poor.key, env.poor.chain, outside))
    assert answer.status_code == 403 and answer.json()["error"]["code"] == "call_not_covered"


def test_the_signer_hook_refuses_a_body_nested_too_deeply_with_an_input_error() -> None:
    """``InvocationSigner`` raised ``RecursionError`` from ``json.loads`` for a body nested a few
    thousand levels deep (one nested a few hundred was already an ``InputError``)."""
    agent = SigningKey.generate()
    signer = InvocationSigner(agent, issue(SigningKey.generate(), agent.public, [f"model:{MODEL}"], ttl=60))
    nested = b"[" * 100_000 + b"]" * 100_000
    content = b'{"model":"' + MODEL.encode() + b'","messages":[{"role":"user","content":' + nested + b"}]}"
    with pytest.raises(InputError):
        signer(httpx.Request("POST", "http://gateway/v1/chat/completions", content=content))


def test_a_revoked_grant_outside_its_scope_is_401_revoked_on_both_stores(store: Store) -> None:
    """The revocation read of a coverage refusal runs in the decision's transaction on either store."""
    keys = {name: SigningKey.generate() for name in NAMES}
    policy = parse_policy(_policy_text({n: k.did for n, k in keys.items()}), source="gateway.yaml")
    gate = GatewayGate(policy, store, log_key=SigningKey.generate())
    try:
        poor = gate.issue(keys["root"], name="poor", key=keys["poor"], role="thrifty")
        outside = {**BODY, "model": OTHER}
        call = chat_call(outside)
        signed = invocation_headers(poor.key, poor.chain, outside)
        decide = partial(gate.authorize_invocation, poor.chain.token, tokens=(10, 8))
        assert decide(signed[INVOCATION_HEADER], call).code == "call_not_covered"
        gate.revoke(poor, reason="leaked")
        refused = decide(invocation_headers(poor.key, poor.chain, outside)[INVOCATION_HEADER], call)
        assert (refused.status, refused.code) == (401, "revoked")
        gate.flush()
        assert [e.kind for e in gate.audit.entries()][-1] == "deny"
    finally:
        gate.close()
