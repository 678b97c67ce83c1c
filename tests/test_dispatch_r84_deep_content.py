"""Review R84: ``prefix.prompt_text`` writes a message's content that is not text as its ``repr``,
and a content nested a thousand lists deep (what ``orjson`` reads from JSON) made that ``repr``
raise ``RecursionError`` out of ``Dispatcher.chat`` (an integer of 5,000 digits a ``ValueError``).
Each is now an ``InputError`` naming the message, before the call is routed; the gateway refuses
such a body before it reaches the prompt's text, with a 400.

Review R84 (regression): ``prompt_text`` wrote the ``role`` unprotected, so the same values as a
role still raised ``RecursionError`` or ``ValueError`` out of ``prompt_text``,
``estimate_prompt_tokens`` and ``Dispatcher.chat`` and ``stream``. The role is now refused alike,
naming the message and the role, before the call is routed."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import orjson
import pytest
from test_gateway import Env, _post

from agentgate.dispatch import Dispatcher, estimate_prompt_tokens, inventory_from_mapping, prompt_text
from agentgate.dispatch.router import Router
from agentgate.errors import InputError

pytest_plugins = ("test_gateway",)  # its ``backends`` and ``env`` fixtures

INVENTORY = inventory_from_mapping(
    {"backends": [{"name": "b", "url": "http://127.0.0.1:9", "engine": "vllm", "models": ["m"]}]}
)


def _nested(depth: int) -> list[Any]:
    deep: list[Any] = []
    for _ in range(depth):
        deep = [deep]
    return deep


def _refused_before_routing(verb: str, payload: dict[str, Any], match: str) -> None:
    """``Dispatcher.chat`` (or ``stream``) of ``payload`` raises an ``InputError`` matching
    ``match``, and no call was routed to the backend."""
    router = Router(INVENTORY)

    async def call() -> None:
        async with Dispatcher(INVENTORY, router, max_attempts=1, recovery_wait_s=0) as dispatcher:
            if verb == "chat":
                await dispatcher.chat(payload)
            else:
                async for _ in dispatcher.stream(payload):
                    pass

    with pytest.raises(InputError, match=match):
        asyncio.run(call())
    assert router.states["b"].in_flight == 0


CONTENTS = {
    "lists-2000-deep": _nested(2000),
    "lists-1000-deep-from-json": orjson.loads("[" * 1000 + "]" * 1000),
    "part-nested-1000-deep": [{"type": "text", "text": "hi", "x": _nested(1000)}],
    "integer-of-5000-digits": [{"type": "text", "text": "hi", "x": 10**5000}],
}


@pytest.mark.parametrize("verb", ["chat", "stream"])
@pytest.mark.parametrize("case", sorted(CONTENTS))
def test_content_with_no_repr_is_an_input_error_naming_the_message(verb: str, case: str) -> None:
    payload = {
        "model": "m",
        "messages": [{"role": "system", "content": "s"}, {"role": "user", "content": CONTENTS[case]}],
    }
    _refused_before_routing(verb, payload, r"^message 1's content ")


def test_content_parts_are_still_written_as_their_repr() -> None:
    parts = [{"type": "text", "text": "hi"}, {"type": "image_url", "image_url": {"url": "u"}}]
    assert prompt_text([{"role": "user", "content": parts}]) == f"<user>\n{parts!r}\n"


def test_a_gateway_body_with_a_content_part_nested_just_under_the_parser_limit_is_a_400(env: Env) -> None:
    headers = {"Authorization": f"Bearer {env.agent.chain.token}"}
    for depth in (900, 980):
        part = b'{"type":"text","text":"hi","x":' + b"[" * depth + b"]" * depth + b"}"
        raw = b'{"model":"x","messages":[{"role":"user","content":[' + part + b"]}]}"
        answer = _post(env, raw, headers)
        assert answer.status_code == 400, (depth, answer.status_code, answer.text[:200])
        assert json.loads(answer.text)["error"]["type"] == "invalid_request_error"


ROLES = {
    "lists-2000-deep": (_nested(2000), r"^message 1's role is nested too deeply$"),
    "integer-of-5000-digits": (10**5000, r"^message 1's role holds an integer too long to write$"),
}


def _messages(role: object) -> list[dict[str, object]]:
    return [{"role": "system", "content": "s"}, {"role": role, "content": "hi"}]


@pytest.mark.parametrize("case", sorted(ROLES))
def test_a_role_with_no_text_is_an_input_error_naming_the_message(case: str) -> None:
    role, message = ROLES[case]
    for count in (prompt_text, estimate_prompt_tokens):
        with pytest.raises(InputError, match=message):
            count(_messages(role))


@pytest.mark.parametrize("verb", ["chat", "stream"])
@pytest.mark.parametrize("case", sorted(ROLES))
def test_the_dispatcher_refuses_such_a_role_before_routing(verb: str, case: str) -> None:
    role, message = ROLES[case]
    _refused_before_routing(verb, {"model": "m", "messages": _messages(role)}, message)


def test_a_role_that_is_not_text_is_still_written_as_its_str() -> None:
    assert prompt_text([{"role": 7, "content": "x"}, {"content": "y"}]) == "<7>\nx\n<>\ny\n"
