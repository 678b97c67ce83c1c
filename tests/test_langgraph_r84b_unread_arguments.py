"""Review R84 (regression): the check of a tool call's arguments as the model wrote them read the
text with strict JSON and, where it did not parse, checked nothing, so the call ran; LangChain
reads a streamed call's text as *partial* JSON, which takes the first object and drops what
follows (``{...}x``), and closes one left open, so such text still became a call:
``500.00000000000000001`` followed by a stray ``x`` ran as ``500.0`` against ``amount<=500``.
Now a call whose text, where the answer keeps it, is not one JSON object and nothing else is
refused before it is decided, recorded without its text, and the model is told to write its
arguments again; on every path no such call runs (not streamed, LangChain already makes it an
invalid call), and no valid call is refused: a call with no arguments (``""`` or ``{}``) runs.
The real ``ChatOpenAI`` against loopback Chat Completions and Responses API servers."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from _langgraph_openai_rig import INEXACT, Rig
from _langgraph_openai_rig import rig as rig  # the fixture
from langchain_core.messages import AIMessage
from langchain_core.tools import StructuredTool

from agentgate.errors import InputError
from agentgate.gate import Gate
from agentgate.integrations.langgraph._models import DispatchedChatModel
from agentgate.integrations.langgraph._scope import WRITTEN_ARGS_KEY
from agentgate.integrations.langgraph._tool_calls import (
    _exact_arguments,
    _unread_arguments,
    _written_arguments,
)
from agentgate.keys import SigningKey
from agentgate.policy import parse_policy
from agentgate.store import SQLiteStore

EXACT_TRAILING = '{"amount": 5, "note": "inv-1"}x'
UNREAD = [
    pytest.param(INEXACT + "x", id="text-after-the-object"),
    pytest.param(INEXACT + " ,", id="comma-after-the-object"),
    pytest.param(INEXACT[:-1], id="object-not-closed"),
    pytest.param(EXACT_TRAILING, id="exact-number-text-after"),
]
STREAMED = [
    pytest.param({"streaming": True}, {}, id="chat-completions-streamed"),
    pytest.param({"streaming": True}, {"way": "ainvoke"}, id="chat-completions-streamed-ainvoke"),
    pytest.param({"streaming": True}, {"gate_models": False}, id="chat-completions-streamed-ungated-model"),
    pytest.param({"streaming": True, "use_responses_api": True}, {}, id="responses-streamed"),
]


@pytest.mark.parametrize("text", UNREAD)
@pytest.mark.parametrize(("model", "run"), STREAMED)
def test_a_streamed_call_whose_text_is_no_json_object_is_refused(
    rig: Rig, text: str, model: dict[str, Any], run: dict[str, Any]
) -> None:
    (answer,) = rig.run(text, **run, **model)
    assert rig.ran == []  # until the fix: [500.0] (or [5.0]), LangChain's partial reading run
    assert answer.status == "error"
    assert "arguments as the model wrote them are not one JSON object" in str(answer.content)
    assert "write its arguments again" in str(answer.content)
    (reason,) = rig.denied()
    assert "not one JSON object" in reason
    assert "inv-1" not in reason and "500" not in reason  # nothing of the text is recorded


@pytest.mark.parametrize(
    "model",
    [
        pytest.param({}, id="chat-completions"),
        pytest.param({"use_responses_api": True}, id="responses"),
        pytest.param({"use_responses_api": True, "output_version": "v1"}, id="responses-v1"),
    ],
)
def test_not_streamed_such_a_call_is_langchains_invalid_call_and_runs_either(
    rig: Rig, model: dict[str, Any]
) -> None:
    # A pin of what docs/langgraph.md says of these paths, not a regression test: it passed before
    # R84's fix too (LangChain's own reader makes such text an invalid call, never run).
    assert rig.run(INEXACT + "x", **model) == []
    assert rig.ran == []


class _NoArguments(Rig):
    """A ``refund`` that takes no argument it needs, allowed as it comes."""

    def __init__(self, tmp_path: Path) -> None:
        root, boss = SigningKey.generate(), SigningKey.generate()
        policy = f"""
version: 1
trust_anchors: {{root: {{did: "{root.did}"}}}}
principals:
  boss: {{kind: agent, did: "{boss.did}", roles: [boss]}}
tools:
  refund: {{args: {{note: {{type: string}}}}}}
models:
  scripted: {{cost_per_mtok: {{input: 1, output: 1}}}}
roles:
  boss:
    kind: agent
    capabilities: [{{resource: tool:refund}}, {{resource: model:scripted}}]
    ttl_s: 3600
"""
        self.gate = Gate(parse_policy(policy, source="p.yaml"), SQLiteStore(tmp_path / "agentgate.db"))
        self.boss = self.gate.issue(root, name="boss", key=boss, role="boss")
        self.ran = []

        def refund(note: str = "") -> str:
            self.ran.append(0.0)
            return "refunded"

        self.tools = [StructuredTool.from_function(func=refund, name="refund", description="refund")]


@pytest.mark.parametrize(
    ("model", "text"),
    [
        pytest.param({"streaming": True}, "", id="chat-completions-streamed-empty"),
        pytest.param({"streaming": True}, "{}", id="chat-completions-streamed-braces"),
        pytest.param({"streaming": True, "use_responses_api": True}, "", id="responses-streamed-empty"),
        pytest.param({"streaming": True, "use_responses_api": True}, "{}", id="responses-streamed-braces"),
        pytest.param({"use_responses_api": True}, "{}", id="responses-braces"),
        pytest.param({"streaming": True}, '{"note": "a\nb"}', id="control-character-in-a-string"),
    ],
)
def test_a_call_with_no_arguments_runs(tmp_path: Path, model: dict[str, Any], text: str) -> None:
    rig = _NoArguments(tmp_path)
    try:
        (answer,) = rig.run(text, **model)
        assert answer.status == "success" and rig.ran == [0.0]
    finally:
        rig.gate.close()


def _answer(**kept: Any) -> AIMessage:
    call = {"name": "refund", "args": {}, "id": "c1", "type": "tool_call"}
    return AIMessage(content=kept.pop("content", ""), tool_calls=[call], **kept)


@pytest.mark.parametrize(
    "form",
    [
        pytest.param(
            lambda t: _answer(additional_kwargs={"tool_calls": [{"id": "c1", "function": {"arguments": t}}]}),
            id="openai-form",
        ),
        pytest.param(
            lambda t: _answer(content=[{"type": "function_call", "call_id": "c1", "arguments": t}]),
            id="responses-block",
        ),
        pytest.param(lambda t: _answer(response_metadata={WRITTEN_ARGS_KEY: {"c1": t}}), id="streamed-text"),
    ],
)
def test_each_form_of_kept_text_is_read_alike(form: Any) -> None:
    def unread(answer: Any) -> object:
        text = _written_arguments(answer, "c1")
        return _unread_arguments(text, _exact_arguments(text))

    for text in ("", "{}", '{"amount": 1}', ' {"amount": 1}\n'):
        assert unread(form(text)) is None
    for text in ('{"amount": 1}x', '{"amount": 1', "[1]", "null", "x", " "):
        assert isinstance(unread(form(text)), InputError)


def test_dispatched_chat_model_makes_no_call_of_such_text() -> None:
    # A pin, passing before R84's fix too: its own reader is strict, so the text the middleware
    # would refuse is an invalid call there.
    for text in ('{"amount": 1}x', '{"amount": 1'):
        raw = {"id": "c1", "function": {"name": "refund", "arguments": text}}
        assert DispatchedChatModel._tool_call(raw)["type"] == "invalid_tool_call"
    for text in (None, "", "{}"):
        raw = {"id": "c1", "function": {"name": "refund", "arguments": text}}
        assert DispatchedChatModel._tool_call(raw)["type"] == "tool_call"
