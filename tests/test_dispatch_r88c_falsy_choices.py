"""Review R88c: a stream event's ``choices`` was read with ``or []``, so one that is falsy but no
list (``false``, ``0``, ``{}``, ``""``) was no choice, and an event with a usage beside it was
passed on as it came (the gateway forwards the event), while ``{"a": 1}`` was malformed. Absent or
``null`` alone is no choice now (and ``[]``, vLLM's usage chunk); anything else that is not a list
is ``BackendFailed`` naming the backend."""

from __future__ import annotations

import json

import pytest

from agentgate.dispatch._sse import _parse_chunk
from agentgate.errors import BackendFailed

USAGE = {"prompt_tokens": 1, "completion_tokens": 4}


@pytest.mark.parametrize(
    "choices", [False, 0, {}, "", {"a": 1}], ids=["false", "zero", "object", "text", "truthy"]
)
def test_stream_choices_that_are_not_a_list_are_malformed_falsy_or_not(choices: object) -> None:
    event = json.dumps({"choices": choices, "usage": USAGE})
    with pytest.raises(BackendFailed, match=r"^b0: malformed stream event: choices is not a list"):
        _parse_chunk("b0", event)


@pytest.mark.parametrize(
    "event", [{"usage": USAGE}, {"choices": None, "usage": USAGE}, {"choices": [], "usage": USAGE}]
)
def test_absent_null_or_empty_stream_choices_are_none(event: dict[str, object]) -> None:
    chunk = _parse_chunk("b0", json.dumps(event))
    assert chunk is not None and chunk.content == "" and chunk.usage is not None
    assert chunk.usage.completion_tokens == 4
