"""Review R86c: a body that mixes a field only Python's json writes with one only orjson writes
was refused saying the first held "an integer beyond 64 bits, a key that is a number, nesting
deeper than orjson's limit" whatever orjson refused in it: a prompt holding a lone surrogate beside
a ``UUID`` was said to hold one of those. Rule: each field named is given the words of the encoder
that refused it (orjson's for the one only json writes), never its value."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from agentgate.dispatch import Dispatcher, inventory_from_mapping
from agentgate.dispatch._engine_fields import FieldError
from agentgate.dispatch.router import Router

INVENTORY = inventory_from_mapping(
    {"backends": [{"name": "b", "url": "http://127.0.0.1:9", "models": ["m"]}]}
)

PAYLOAD = {"model": "m", "messages": [{"role": "user", "content": "secret prompt"}], "max_tokens": 10}


def _refused(body: dict[str, Any]) -> FieldError:
    with pytest.raises(FieldError) as caught:
        Dispatcher(INVENTORY, Router(INVENTORY)).route_request({**PAYLOAD, **body})
    return caught.value


def test_a_lone_surrogate_beside_a_uuid_is_named_with_orjsons_reason() -> None:
    messages = [{"role": "user", "content": "secret \ud800 prompt"}]
    refused = _refused({"messages": messages, "user": uuid.UUID(int=7)})
    assert refused.param == "messages"
    message = str(refused)
    assert message.endswith(
        "body field 'messages' cannot be written as JSON beside body field 'user': only Python's "
        "json writes 'messages' (orjson: str is not valid UTF-8: surrogates not allowed), only orjson 'user' "
        "(json: Object of type UUID is not JSON serializable)"
    ), message
    assert "64 bits" not in message and "secret" not in message and str(uuid.UUID(int=7)) not in message


def test_an_integer_beyond_64_bits_beside_a_uuid_is_named_with_orjsons_reason() -> None:
    message = str(_refused({"user": uuid.UUID(int=7), "seed": 2**70}))
    assert "only Python's json writes 'seed' (orjson: Integer exceeds 64-bit range)" in message, message
    assert str(2**70) not in message
