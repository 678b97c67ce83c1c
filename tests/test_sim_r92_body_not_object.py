"""Review R92: a chat body (or a message, or ``stream_options``) that is not a JSON object is
refused in plain words, "the body must be a JSON object, not an array", and never with pydantic's
"Input should be a valid dictionary or instance of _Body", which names a private model."""

from __future__ import annotations

import pytest

from agentgate.errors import InputError
from agentgate.sim._request import parse_chat

_HI = b'[{"role": "user", "content": "hi"}]'


@pytest.mark.parametrize(
    ("raw", "said"),
    [
        (b"[1, 2]", "the body must be a JSON object, not an array"),
        (b"5", "the body must be a JSON object, not a number"),
        (b'"hi"', "the body must be a JSON object, not a string"),
        (b"true", "the body must be a JSON object, not a boolean"),
        (b"null", "the body must be a JSON object, not null"),
        (b'{"messages": [1]}', "messages.0 must be a JSON object, not a number"),
        (
            b'{"messages": ' + _HI + b', "stream": true, "stream_options": []}',
            "stream_options must be a JSON object, not an array",
        ),
    ],
)
def test_a_value_that_is_not_an_object_is_refused_in_plain_words(raw: bytes, said: str) -> None:
    with pytest.raises(InputError) as refused:
        parse_chat(raw, 4096)
    assert str(refused.value) == said
