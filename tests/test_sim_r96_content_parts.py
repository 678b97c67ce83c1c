"""Review R96: a message's ``content`` of no type it takes (a number) or holding a part that is not
an object (``[1]``) got "messages.0.content.str: Input should be a valid string": ``.str`` is
pydantic's name for a union's branch, not a field, and a client that sent a list was told to send a
string. The field at fault is now named with what it takes, as review R92 did for messages. A text
part whose ``text`` is not a string was served; vLLM's typed parts refuse it, and so does this."""

from __future__ import annotations

import json

import pytest

from agentgate.errors import InputError
from agentgate.sim._request import parse_chat


def _body(content: object) -> bytes:
    return json.dumps({"messages": [{"role": "user", "content": content}]}).encode()


@pytest.mark.parametrize(
    ("content", "said"),
    [
        ([1], "messages.0.content.0 must be a JSON object, not a number"),
        ([{"type": "text", "text": "hi"}, "hi"], "messages.0.content.1 must be a JSON object, not a string"),
        (5, "messages.0.content must be a string, a list of content parts, or null, not a number"),
        (True, "messages.0.content must be a string, a list of content parts, or null, not a boolean"),
        (
            {"type": "text"},
            "messages.0.content must be a string, a list of content parts, or null, not an object",
        ),
        ([{"type": "text", "text": 5}], "messages.0.content.0.text: Input should be a valid string"),
        ([{"type": "text", "text": None}], "messages.0.content.0.text: Input should be a valid string"),
        ([{"type": "text"}], "messages.0.content.0.text: Field required"),
    ],
)
def test_content_of_the_wrong_shape_is_refused_naming_the_field(content: object, said: str) -> None:
    with pytest.raises(InputError) as refused:
        parse_chat(_body(content), 4096)
    assert str(refused.value) == said


@pytest.mark.parametrize(
    "content",
    [
        "hi",
        None,
        [],
        [{"type": "text", "text": "hi"}],
        [
            {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
            {"type": "text", "text": "x"},
        ],
        [{"type": "input_audio", "text": 5}],  # only a text part's text is checked
    ],
)
def test_content_vllm_takes_is_served(content: object) -> None:
    assert parse_chat(_body(content), 4096).prompt_tokens >= 1
