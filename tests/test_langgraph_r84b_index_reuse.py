"""Review R84 (regression): the model hook put a streamed answer's tool call fragments together by
index alone, where LangChain (``merge_lists``) starts a new call when the index is the same but
both fragments carry ids and they differ, as OpenAI-compatible servers that send each parallel
call whole at index 0 do. The first call's text was then both calls' JSON glued, which no
reader parses, the second call had none, so neither was checked and ``500.00000000000000001``
ran as ``500.0`` against ``amount<=500``. Now the fragments are put together as LangChain adds
them up, and on LangGraph's v3 content-block events a call is kept under the id its finished
block gives (the compat bridge's, the last given). The real ``ChatOpenAI`` against a loopback
Chat Completions server, a real SQLite store."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest
from _langgraph_openai_rig import INEXACT, Loopback, QuietHandler, Rig
from _langgraph_openai_rig import rig as rig  # the fixture
from hypothesis import given, settings
from hypothesis import strategies as st
from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage, ToolMessage
from langchain_core.messages.tool import tool_call_chunk
from langchain_core.outputs import ChatGenerationChunk

from agentgate.integrations.langgraph._calls import _Streamed

EXACT = '{"amount": 1, "note": "inv-2"}'


def _chunk(delta: dict[str, Any] | None = None, finish: str | None = None) -> dict[str, Any]:
    head = {"id": "c1", "object": "chat.completion.chunk", "created": 0, "model": "scripted"}
    return {**head, "choices": [{"index": 0, "delta": delta or {}, "finish_reason": finish}]}


def _call(call_id: str, arguments: str) -> dict[str, Any]:
    """A call sent whole at index 0, as some OpenAI-compatible servers send each parallel call."""
    function = {"name": "refund", "arguments": arguments}
    return {"index": 0, "id": call_id, "type": "function", "function": function}


def _stream(*calls: dict[str, Any]) -> list[dict[str, Any]]:
    first, *rest = calls
    return [
        _chunk({"role": "assistant", "content": None, "tool_calls": [first]}),
        *(_chunk({"tool_calls": [call]}) for call in rest),
        _chunk(finish="tool_calls"),
    ]


class _Server(Loopback):
    """A loopback Chat Completions endpoint that streams ``first`` (its chunks), then ``done``."""

    def __init__(self, first: list[dict[str, Any]]) -> None:
        answered: list[int] = []

        class Handler(QuietHandler):
            def do_POST(self) -> None:
                self.rfile.read(int(self.headers["Content-Length"]))
                answered.append(1)
                done = [_chunk({"role": "assistant", "content": "done"}), _chunk(finish="stop")]
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.end_headers()
                for chunk in first if len(answered) == 1 else done:
                    self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
                self.wfile.write(b"data: [DONE]\n\n")

        super().__init__(Handler)


def _run(rig: Rig, first: list[dict[str, Any]], way: str, gate_models: bool = True) -> list[BaseMessage]:
    server = _Server(first)
    try:
        return rig.converse(server.url, way=way, gate_models=gate_models, streaming=True)
    finally:
        server.close()


@pytest.mark.parametrize(
    ("way", "gate_models"),
    [("invoke", True), ("ainvoke", True), ("messages", True), ("invoke", False), ("ainvoke", False)],
)
def test_two_calls_at_one_index_with_ids_of_their_own_are_each_checked(
    rig: Rig, way: str, gate_models: bool
) -> None:
    messages = _run(rig, _stream(_call("call_a", INEXACT), _call("call_b", EXACT)), way, gate_models)
    (answer, *_) = (m for m in messages if isinstance(m, AIMessage))
    assert [c["id"] for c in answer.tool_calls] == ["call_a", "call_b"]  # LangChain keeps them apart
    assert answer.response_metadata["agentgate_written_args"] == {"call_a": INEXACT, "call_b": EXACT}
    assert rig.ran == [1.0]  # until the fix: [500.0, 1.0], call_a's text being both calls' JSON
    results = {m.tool_call_id: m for m in messages if isinstance(m, ToolMessage)}
    assert results["call_a"].status == "error"
    assert "argument 'amount' is 500.00000000000000001" in str(results["call_a"].content)
    assert results["call_b"].status == "success"


def test_a_fragment_with_no_id_goes_to_the_first_call_at_its_index_as_langchain_adds_it(rig: Rig) -> None:
    half = len(INEXACT) // 2
    rest = {"index": 0, "function": {"arguments": INEXACT[half:]}}
    first = _stream(_call("call_a", INEXACT[:half]), _call("call_b", EXACT), rest)
    messages = _run(rig, first, "invoke")
    (answer, *_) = (m for m in messages if isinstance(m, AIMessage))
    assert answer.response_metadata["agentgate_written_args"] == {"call_a": INEXACT, "call_b": EXACT}
    assert rig.ran == [1.0]


def test_on_v3_events_a_call_is_kept_under_the_id_langchain_gives_it(rig: Rig) -> None:
    # LangChain's compat bridge puts the blocks of one index together, the last id given kept:
    # one call, call_b, with call_a's arguments. Kept under call_a (the first id given), its text
    # was no call's, and 500.00000000000000001 ran as 500.0.
    messages = _run(rig, _stream(_call("call_a", INEXACT), _call("call_b", "")), "v3")
    (answer, *_) = (m for m in messages if isinstance(m, AIMessage))
    assert [c["id"] for c in answer.tool_calls] == ["call_b"]
    assert rig.ran == []
    (result,) = (m for m in messages if isinstance(m, ToolMessage))
    assert result.status == "error" and "500.00000000000000001" in str(result.content)


_FRAGMENT = st.fixed_dictionaries(
    {
        "index": st.sampled_from([0, 1, None]),
        "id": st.sampled_from([None, "", "call_a", "call_b", "call_c"]),
        "args": st.sampled_from(["", "{", '"amount": 1', "}", None]),
    }
)


@given(st.lists(st.lists(_FRAGMENT, max_size=3), min_size=1, max_size=5))
@settings(max_examples=300)
def test_the_text_kept_is_the_text_langchain_adds_up_for_each_call(
    chunks: list[list[dict[str, Any]]],
) -> None:
    # LangChain adds the chunks up as a model's stream ends (``chunks[0] + chunks[1:]``); each of
    # its calls' text, by id, is what the watch keeps (a later call of one id over an earlier one).
    made = [AIMessageChunk(content="", tool_call_chunks=[tool_call_chunk(**f) for f in c]) for c in chunks]
    whole = made[0] + made[1:] if len(made) > 1 else made[0]
    expected = {c["id"]: c["args"] or "" for c in whole.tool_call_chunks if c["id"]}
    watch = _Streamed()
    run = uuid.uuid4()
    for message in made:
        watch.on_llm_new_token("", chunk=ChatGenerationChunk(message=message), run_id=run)
    assert watch.written() == expected
