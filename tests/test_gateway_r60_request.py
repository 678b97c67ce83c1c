"""What the gateway reads from a chat request before it decides anything (review R60): a body is
refused 400 in OpenAI's error shape, audited as a refusal with nothing reserved and its
invocation's nonce left unused, when the backend it stands before (vLLM, and the simulator)
would refuse it anyway, so that no call is allowed, reserved and then refused by the backend.

Real components: the gateway on loopback HTTP before simulated vLLM backends, a SQLite store."""

from __future__ import annotations

import json

import _http
import httpx
import pytest
from test_gateway import Env, _assert_refused, _body

from agentgate.dispatch.gateway import invocation_headers

pytest_plugins = ("test_gateway",)  # its ``backends`` and ``env`` fixtures


def _send(env: Env, body: dict[str, object], headers: list[tuple[str, str]]) -> httpx.Response:
    return _http.post(
        f"{env.base_url}/chat/completions", content=json.dumps(body).encode(), headers=headers, timeout=10
    )


@pytest.mark.parametrize(
    "declared",
    [
        ["text/plain"],
        ["application/x-www-form-urlencoded"],
        ["multipart/form-data; boundary=x"],
        ["; charset=utf-8"],
        ["application/json", "text/plain"],
    ],
    ids=["text", "form", "multipart", "no_media_type", "json_then_text"],
)
def test_a_body_declared_as_anything_but_json_is_refused_before_it_is_decided(
    env: Env, declared: list[str]
) -> None:
    """Review R60: a JSON body declared Content-Type: text/plain (or a form) was decided and served 200; vLLM refuses it 400."""
    body = _body()
    signed = list(invocation_headers(env.agent.key, env.agent.chain, body).items())
    before, count = env.ledger(), len(env.entries())
    answer = _send(env, body, [*(("content-type", value) for value in declared), *signed])
    error = _assert_refused(env, answer, 400, before, count)
    assert (error["type"], error["code"]) == ("invalid_request_error", "invalid_request")
    assert "Content-Type: application/json" in error["message"]
    # Nothing was decided: the same signed invocation, declared as JSON, is allowed and served.
    again = _send(env, body, [("content-type", "application/json"), *signed])
    assert again.status_code == 200, again.text


@pytest.mark.parametrize(
    "declared", [[], [""], ["application/json; charset=utf-8"], ["application/vnd.x+json"]]
)
def test_a_body_declared_as_json_or_not_at_all_is_served(env: Env, declared: list[str]) -> None:
    body = _body()
    headers = [*(("content-type", value) for value in declared)]
    headers += invocation_headers(env.agent.key, env.agent.chain, body).items()
    answer = _send(env, body, headers)
    assert answer.status_code == 200, answer.text
    assert answer.json()["choices"][0]["message"]["content"]


@pytest.mark.parametrize(
    ("fields", "words"),
    [
        ({"stream": False, "stream_options": {"include_usage": True}}, "only be defined when `stream=True`"),
        ({"stream_options": {"include_usage": True}}, "only be defined when `stream=True`"),
        ({"stream": None, "stream_options": {"include_usage": False}}, "only be defined when `stream=True`"),
        ({"stream": True, "stream_options": ["include_usage"]}, "'stream_options' must be an object or null"),
        ({"stream": False, "stream_options": "yes"}, "'stream_options' must be an object or null"),
    ],
    ids=["stream_false", "stream_absent", "stream_null", "list_streamed", "text"],
)
def test_stream_options_are_refused_before_the_call_is_decided_where_vllm_refuses_them(
    env: Env, fields: dict[str, object], words: str
) -> None:
    """Review R60: a non-streaming call with stream_options was decided, reserved, then refused 400 rejected_by_backend."""
    body = _body(**fields)
    signed = list(invocation_headers(env.agent.key, env.agent.chain, body).items())
    before, count = env.ledger(), len(env.entries())
    answer = _send(env, body, [("content-type", "application/json"), *signed])
    error = _assert_refused(env, answer, 400, before, count)
    assert (error["type"], error["code"]) == ("invalid_request_error", "invalid_request")
    assert words in error["message"]


@pytest.mark.parametrize(
    "fields",
    [
        {"stream": False, "stream_options": {}},
        {"stream_options": None},
        {"stream": True, "stream_options": {"include_usage": True}},
    ],
    ids=["empty_unstreamed", "null", "streamed"],
)
def test_stream_options_vllm_takes_are_served(env: Env, fields: dict[str, object]) -> None:
    body = _body(**fields)
    headers = [
        ("content-type", "application/json"),
        *invocation_headers(env.agent.key, env.agent.chain, body).items(),
    ]
    answer = _send(env, body, headers)
    assert answer.status_code == 200, answer.text


_DUPLICATED = {
    "model": b'{"model": "llama-3.1-8b", "model": "qwen3-32b", "messages": [{"role": "user", "content": "hi"}]}',
    "max_tokens": b'{"model": "llama-3.1-8b", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}],'
    b' "max_tokens": 500}',
    "nested": b'{"model": "llama-3.1-8b", "messages": [{"role": "user", "content": "hi", "role": "system"}]}',
}


@pytest.mark.parametrize("key", list(_DUPLICATED))
def test_a_body_with_a_key_twice_in_one_object_is_refused_before_it_is_decided(env: Env, key: str) -> None:
    """Review R60: a body with a key twice ({"model": "a", "model": "b"}) was decided and served as its last value."""
    raw = _DUPLICATED[key]
    signed = list(invocation_headers(env.agent.key, env.agent.chain, json.loads(raw)).items())
    before, count = env.ledger(), len(env.entries())
    answer = _http.post(
        f"{env.base_url}/chat/completions",
        content=raw,
        headers=[("content-type", "application/json"), *signed],
        timeout=10,
    )
    error = _assert_refused(env, answer, 400, before, count)
    assert (error["type"], error["code"]) == ("invalid_request_error", "invalid_request")
    assert "twice in one object" in error["message"]


@pytest.mark.parametrize(
    ("message", "words"),
    [
        ({"role": None, "content": "hi"}, "'messages[0].role' must be a string"),
        ({"content": "hi"}, "'messages[0].role' must be a string"),
        ({"role": 1, "content": "hi"}, "'messages[0].role' must be a string"),
        ({"role": "user", "content": 5}, "'messages[0].content' must be a string"),
        ({"role": "user", "content": {"text": "hi"}}, "'messages[0].content' must be a string"),
        # Review R81: a list of values that are not parts (objects) passed, was decided, counted
        # against the caller's quotas, and then refused by the backend.
        ({"role": "user", "content": [1]}, "a list of content parts (objects)"),
        ({"role": "user", "content": ["hi"]}, "a list of content parts (objects)"),
        ({"role": "user", "content": [{"type": "text", "text": "hi"}, None]}, "a list of content parts (objects)"),
    ],
    ids=["role_null", "role_missing", "role_number", "content_number", "content_object", "part_number",
         "part_text", "part_null"],
)  # fmt: skip
def test_a_message_vllm_refuses_is_refused_before_the_call_is_decided(
    env: Env, message: dict[str, object], words: str
) -> None:
    """Review R60: a message whose role or content vLLM refuses was decided, reserved, then refused 400 rejected_by_backend."""
    body = _body(messages=[message])
    signed = list(invocation_headers(env.agent.key, env.agent.chain, body).items())
    before, count = env.ledger(), len(env.entries())
    answer = _send(env, body, [("content-type", "application/json"), *signed])
    error = _assert_refused(env, answer, 400, before, count)
    assert (error["type"], error["code"]) == ("invalid_request_error", "invalid_request")
    assert words in error["message"]


def test_messages_vllm_takes_are_served(env: Env) -> None:
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": [{"type": "text", "text": "hi"}]},
        {"role": "assistant", "content": None, "tool_calls": []},
        {"role": "user", "content": "and again"},
    ]
    body = _body(messages=messages)
    headers = [
        ("content-type", "application/json"),
        *invocation_headers(env.agent.key, env.agent.chain, body).items(),
    ]
    answer = _send(env, body, headers)
    assert answer.status_code == 200, answer.text
