"""A body ``_encode`` cannot write is refused naming a field it really cannot write: each field is
judged as ``_encode`` judges a body (orjson, then ``json``), where ``json`` alone judged it and a
body of a ``UUID`` (which orjson writes) and an integer beyond 64 bits (which only ``json``
writes) was refused naming the ``UUID``'s field, accepted alone (review R86b)."""

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


def _route(extra: dict[str, Any]) -> None:
    Dispatcher(INVENTORY, Router(INVENTORY)).route_request({**PAYLOAD, **extra})


def test_a_uuid_and_an_integer_beyond_64_bits_are_refused_naming_the_integer_beside_the_uuid() -> None:
    with pytest.raises(FieldError) as caught:
        _route({"user": uuid.UUID(int=7), "seed": 2**70})
    assert caught.value.param == "seed"
    message = str(caught.value)
    assert "body field 'seed' cannot be written as JSON beside body field 'user'" in message
    assert "UUID is not JSON serializable" in message
    assert str(uuid.UUID(int=7)) not in message and "secret prompt" not in message


@pytest.mark.parametrize("extra", [{"user": uuid.UUID(int=7)}, {"seed": 2**70}])
def test_each_alone_is_taken(extra: dict[str, Any]) -> None:
    _route(extra)


def test_a_field_neither_encoder_writes_is_named_though_orjson_writes_another() -> None:
    with pytest.raises(FieldError, match=r"body field 'stop' cannot be written as JSON: .*bytes") as caught:
        _route({"user": uuid.UUID(int=7), "seed": 2**70, "stop": b"x"})
    assert caught.value.param == "stop"


def test_the_reason_is_the_named_fields_own() -> None:
    with pytest.raises(FieldError) as caught:
        _route({"user": uuid.UUID(int=7), "stop": {"a"}})
    assert caught.value.param == "stop"
    assert "set is not JSON serializable" in str(caught.value)
    assert "UUID" not in str(caught.value)
