"""The gateway's HTTP-level refusals are OpenAI-shaped JSON errors (review R61).

A request the bounded protocol (``agentgate/_bounded_http.py``) refuses before the app sees it (a
head over ``max_head_bytes``: 431; a head too slow: 408; a head the parser rejects, without one
valid ``Host``, or ``CONNECT``: 400; a transfer coding but ``chunked``: 501; an HTTP version but
1.0 and 1.1: 505) was answered ``text/plain``, where every other refusal of the gateway is
``{"error": {"message", "type", "param", "code"}}``: an OpenAI SDK showed no message or code for it.

Real loopback sockets written by hand, against the gateway tests' ``env`` fixture."""

from __future__ import annotations

import json
from typing import Any

import pytest
from test_gateway import Env
from test_gateway_server_settings import _answer, _served

pytest_plugins = ("test_gateway",)  # its ``backends`` and ``env`` fixtures

_BIG = b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: %s\r\n\r\n" % (b"a" * 70_000)
REFUSED = {
    "head_too_large": (_BIG, 431, "request_header_fields_too_large"),
    "unparsable": (b"GARBAGE\x01 / HTTP/1.1\r\n\r\n", 400, "invalid_http_request"),
    "no_host": (b"GET /healthz HTTP/1.1\r\n\r\n", 400, "invalid_http_request"),
    "connect": (b"CONNECT x:443 HTTP/1.1\r\nHost: x:443\r\n\r\n", 400, "invalid_http_request"),
    "gzip_coding": (
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n",
        501,
        "transfer_coding_not_supported",
    ),
    "http_2_0": (b"GET /healthz HTTP/2.0\r\nHost: x\r\n\r\n", 505, "http_version_not_supported"),
}


def _parsed(answer: bytes) -> tuple[int, dict[str, str], Any]:
    """The status, the headers (lower-case names) and the JSON body of a whole HTTP answer."""
    head, _, body = answer.partition(b"\r\n\r\n")
    status_line, *lines = head.decode("latin-1").split("\r\n")
    headers = {
        name.strip().lower(): value.strip() for name, _, value in (line.partition(":") for line in lines)
    }
    assert int(headers["content-length"]) == len(body), answer[:300]
    return int(status_line.split(" ")[1]), headers, json.loads(body)


def _assert_openai_error(answer: bytes, status: int, code: str, kind: str) -> None:
    got, headers, body = _parsed(answer)
    assert got == status, answer[:300]
    assert headers["content-type"] == "application/json", headers
    assert headers["connection"] == "close", headers
    error = body["error"]
    assert set(body) == {"error"} and set(error) == {"message", "type", "param", "code"}, body
    assert (error["code"], error["type"], error["param"]) == (code, kind, None), body
    assert isinstance(error["message"], str) and error["message"], body


@pytest.mark.parametrize("case", list(REFUSED))
def test_a_request_the_protocol_refuses_gets_an_openai_shaped_json_error(env: Env, case: str) -> None:
    """Review R61: the protocol's refusals (431, 400, 501, 505) were bare ``text/plain``; each is
    now an OpenAI error body with its own code, the connection closed, nothing audited."""
    request, status, code = REFUSED[case]
    before = len(env.entries())
    kind = "invalid_request_error" if status < 500 else "api_error"
    _assert_openai_error(_answer(env.server.port, request), status, code, kind)
    assert len(env.entries()) == before


def test_a_head_too_slow_gets_an_openai_shaped_408(env: Env) -> None:
    """Review R61: a head not complete within ``head_timeout_s`` was a bare ``text/plain`` 408."""
    with _served(env, {"head_timeout_s": 0.3}) as server:
        answer = _answer(server.port, b"GET /healthz HTTP/1.1\r\n", pause=0.8, rest=b"Host: x\r\n\r\n")
    _assert_openai_error(answer, 408, "request_timeout", "invalid_request_error")
