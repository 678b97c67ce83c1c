"""Hostile request bodies at the gateway (review R61's pass): what each is answered, pinned.

``n: 1.0`` is one choice, as vLLM (pydantic, lax) reads it; a body that opens with a UTF-8 BOM
is read as vLLM (Starlette's ``json.loads`` of the bytes) reads it; a ``Content-Length`` that
disagrees with the body delimits it all the same (fewer bytes: the call decided on those, the rest
a next request refused; more: the body timeout), and one that is not a single decimal number is
refused by the parser. Each refusal is an OpenAI error body; nothing is charged for any of them.

Real loopback sockets against the gateway tests' ``env`` fixture (a gateway before simulators)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from test_gateway import Env, _body
from test_gateway_server_settings import _answer, _served

from agentgate.dispatch.gateway import invocation_headers, max_tokens_of
from agentgate.dispatch.gateway._client import DEFAULT_MAX_TOKENS, MAX_TOKENS_LIMIT
from agentgate.dispatch.gateway._request import _parse_body
from agentgate.errors import InputError

pytest_plugins = ("test_gateway",)  # its ``backends`` and ``env`` fixtures


def _request(
    env: Env, body: bytes, length: bytes, signed: dict[str, Any] | None = None, *, last: bool = False
) -> bytes:
    """A chat request whose invocation signs ``signed`` (default: ``body`` parsed), sent with
    ``Content-Length: length`` and ``body`` as they are; ``last``: with ``Connection: close``, so
    that the gateway closes the connection once it answered (else an answered request leaves it
    open until the keep-alive timeout, 5 s)."""
    headers = invocation_headers(env.agent.key, env.agent.chain, signed or json.loads(body))
    head = b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
    head += b"Connection: close\r\n" if last else b""
    head += b"".join(f"{name}: {value}\r\n".encode() for name, value in headers.items())
    return head + b"Content-Length: " + length + b"\r\n\r\n" + body


def _answers(received: bytes) -> list[tuple[int, Any]]:
    """Each answer on the connection: its status and its JSON body."""
    found = []
    while received:
        head, _, rest = received.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        length = next(int(line.split(":")[1]) for line in lines if line.lower().startswith("content-length:"))
        found.append((int(lines[0].split(" ")[1]), json.loads(rest[:length])))
        received = rest[length:]
    return found


@pytest.mark.parametrize("value", [1, 1.0, None])
def test_n_of_one_as_a_float_is_one_choice_as_vllm_reads_it(value: Any) -> None:
    """Review R61: ``n: 1.0`` (vLLM's pydantic takes it as 1) is not refused: one choice."""
    assert _parse_body(json.dumps({"messages": [{"role": "user", "content": "hi"}], "n": value}).encode())


@pytest.mark.parametrize("value", [1.5, 2, 0, True, "1", [1]])
def test_n_other_than_one_is_refused(value: Any) -> None:
    """Review R61: any other ``n`` (a boolean, text, a list included) is refused before a decision."""
    with pytest.raises(InputError, match=r"^'n' must be 1"):
        _parse_body(json.dumps({"messages": [{"role": "user", "content": "hi"}], "n": value}).encode())


def test_a_body_with_a_utf8_bom_is_read_as_the_json_after_it(env: Env) -> None:
    """Review R61: a body that opens with a UTF-8 BOM is the JSON after it (as vLLM reads it):
    decided on that, answered, charged its usage; the backend is sent the JSON re-encoded."""
    body = json.dumps(_body()).encode()
    spent = env.spent()
    answers = _answers(
        _answer(env.server.port, _request(env, b"\xef\xbb\xbf" + body, b"%d" % (len(body) + 3), last=True))
    )
    assert [status for status, _ in answers] == [200], answers
    assert env.spent() > spent


def test_a_content_length_short_of_the_body_delimits_it(env: Env) -> None:
    """Review R61: a ``Content-Length`` five bytes short: the call is decided on the bytes it
    counts (not JSON: 400, audited), the rest read as a next request and refused 400
    ``invalid_http_request``, the connection closed; nothing charged."""
    body = json.dumps(_body()).encode()
    before = env.ledger()
    answers = _answers(_answer(env.server.port, _request(env, body, b"%d" % (len(body) - 5))))
    assert [(status, answer["error"]["code"]) for status, answer in answers] == [
        (400, "invalid_request"),
        (400, "invalid_http_request"),
    ]
    assert env.ledger() == before
    assert [e.kind for e in env.entries()] == ["deny"]


def test_a_content_length_past_the_body_waits_for_it_then_408(env: Env) -> None:
    """Review R61: a ``Content-Length`` ten bytes past the body: the rest never comes, the body
    timeout answers 408 ``request_timeout``; nothing charged."""
    body = json.dumps(_body()).encode()
    before = env.ledger()
    with _served(env, body_timeout_s=0.3) as server:
        answers = _answers(_answer(server.port, _request(env, body, b"%d" % (len(body) + 10))))
    assert [(status, answer["error"]["code"]) for status, answer in answers] == [(408, "request_timeout")]
    assert env.ledger() == before


@pytest.mark.parametrize("length", [b"-1", b"+%d", b"%d, %d", b"0x10", b"99999999999999999999999"])
def test_a_content_length_that_is_not_one_decimal_number_is_refused_by_the_parser(
    env: Env, length: bytes
) -> None:
    """Review R61: a negative, signed, listed, hexadecimal or overflowing ``Content-Length`` is
    refused 400 ``invalid_http_request`` before the app; nothing decided or audited."""
    body = json.dumps(_body()).encode()
    value = length % ((len(body),) * length.count(b"%d")) if b"%d" in length else length
    answers = _answers(_answer(env.server.port, _request(env, body, value)))
    assert [(status, answer["error"]["code"]) for status, answer in answers] == [
        (400, "invalid_http_request")
    ]
    assert env.entries() == []


@pytest.mark.parametrize(("value", "read"), [(5, 5), (5.0, 5), (None, DEFAULT_MAX_TOKENS)])
def test_max_tokens_as_a_whole_float_is_read_as_vllm_reads_it(value: Any, read: int) -> None:
    """Review R61: ``max_tokens: 5.0`` (vLLM's lax pydantic serves it, and the dispatcher's
    ``output_limit`` reads it as 5) was refused 400 by the gateway and its invocation signer; it
    is read as 5, and the payload forwarded names the integer."""
    assert max_tokens_of({"max_tokens": value}) == read
    assert max_tokens_of({"max_completion_tokens": value, "max_tokens": 7}) == (read if value else 7)


@pytest.mark.parametrize("value", [5.5, True, "5", 0, 0.0, -1, MAX_TOKENS_LIMIT + 1, float("inf"), [5]])
def test_max_tokens_that_is_no_whole_number_in_range_is_refused(value: Any) -> None:
    """Review R61: anything else stays refused before a decision, naming the value."""
    with pytest.raises(InputError, match=r"^max_tokens must be a whole number from 1 to "):
        max_tokens_of({"max_tokens": value})
