"""Review R88: a stream that broke after a tool call fragment that is its ``index`` alone was not
failed over. ``carries_output`` counted any delta value but the role as output, so the dispatcher
passed ``{"tool_calls": [{"index": 0}]}`` on as delivered and raised ``BackendFailed`` with
``after_output`` when the stream then broke, though its caller had nothing it could use, and the
stream's deadlines (``_advances``) and answer limit (``_answer_chars``) counted the same fragment
as nothing. Both read one rule now: a chunk carries output when it brings a character of the
answer. Real HTTP on 127.0.0.1 (``test_dispatch_dispatcher``'s ``Canned`` backends)."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from test_dispatch_dispatcher import PAYLOAD, Canned, _dispatcher, _inventory

from agentgate.dispatch.backends import ChatChunk, carries_output
from agentgate.errors import BackendFailed

ROLE = json.dumps({"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]})
INDEX_ONLY = json.dumps({"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0}]}}]})


@pytest.fixture
def canned() -> Iterator[list[Canned]]:
    made = [Canned(), Canned()]
    yield made
    for server in made:
        server.stop()


def _chunk(delta: dict[str, object]) -> ChatChunk:
    return ChatChunk("", None, None, event={"choices": [{"index": 0, "delta": delta}]})


@pytest.mark.parametrize(
    ("delta", "carries"),
    [
        ({"tool_calls": [{"index": 0}]}, False),
        ({"content": "", "tool_calls": [{"index": 0, "function": {"arguments": ""}}]}, False),
        ({"content": "", "n": 5}, False),
        ({"tool_calls": [{"index": 0, "id": "t"}]}, True),
        ({"tool_calls": [{"index": 0, "function": {"arguments": "{"}}]}, True),
        ({"reasoning_content": "so"}, True),
    ],
)
def test_a_chunk_carries_output_when_it_brings_a_character_of_the_answer(
    delta: dict[str, object], carries: bool
) -> None:
    assert carries_output(_chunk(delta)) is carries


async def test_a_stream_that_broke_after_an_index_alone_fragment_fails_over(canned: list[Canned]) -> None:
    """Each backend opens with the role and an index-only fragment, then ends without
    ``[DONE]``: the call is tried on both, nothing passed on, and fails as one that broke before
    any output, not ``after_output``."""
    for server in canned:
        server.answer = [ROLE, INDEX_ONLY]
    got: list[ChatChunk] = []
    async with _dispatcher(_inventory(canned), max_attempts=2) as dispatcher:
        with pytest.raises(BackendFailed, match="call failed on 2 attempts") as raised:
            async for chunk in dispatcher.stream(PAYLOAD, slo_ttft_s=30.0, priority=0):
                got.append(chunk)
    assert not raised.value.after_output
    assert got == []
    assert [server.posts for server in canned] == [1, 1]
