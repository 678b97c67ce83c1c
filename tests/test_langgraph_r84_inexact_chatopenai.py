"""Review R84: a number no float holds as written (``500.00000000000000001`` against
``amount<=500``) is refused with the real ``ChatOpenAI`` wherever its answer, or its stream, keeps
the text of the call's arguments (docs/langgraph.md, Numbers no float holds). langchain-openai
(1.8) never fills ``additional_kwargs["tool_calls"]``, the only place the middleware read until
R84, so the call was allowed and ran as 500.0. Now it reads the fragments a streamed answer's
``tool_call_chunks`` carry (Chat Completions and the Responses API, ``invoke``, ``ainvoke`` and
LangGraph's v3 event stream, with ``gate_models`` on or off) and the Responses API's ``function_call`` content blocks; a
Chat Completions answer not streamed keeps the text nowhere, and is not checked (said so in the
docs). Loopback OpenAI endpoints, a real SQLite store."""

from __future__ import annotations

from typing import Any

import pytest
from _langgraph_openai_rig import INEXACT, Rig
from _langgraph_openai_rig import rig as rig  # the fixture

EXACT = '{"amount": 499.5, "note": "inv-1"}'


CHECKED = [
    pytest.param({"streaming": True}, {}, id="chat-completions-streamed"),
    pytest.param({"streaming": True}, {"way": "ainvoke"}, id="chat-completions-streamed-ainvoke"),
    pytest.param({"streaming": True}, {"way": "v3"}, id="chat-completions-streamed-v3-events"),
    pytest.param({"streaming": True}, {"gate_models": False}, id="chat-completions-streamed-ungated-model"),
    pytest.param({"streaming": True, "use_responses_api": True}, {}, id="responses-streamed"),
    pytest.param({"use_responses_api": True}, {}, id="responses-not-streamed"),
    pytest.param(
        {"streaming": True, "use_responses_api": True, "output_version": "v0"}, {}, id="responses-v0-streamed"
    ),
]


@pytest.mark.parametrize(("model", "run"), CHECKED)
def test_a_number_no_float_holds_is_refused_with_the_real_chat_openai(
    rig: Rig, model: dict[str, Any], run: dict[str, Any]
) -> None:
    (answer,) = rig.run(INEXACT, **run, **model)
    assert rig.ran == []  # until R84: [500.0], decided against amount<=500 as 500.0
    assert answer.status == "error"
    assert "argument 'amount' is 500.00000000000000001, a number no float holds as written" in str(
        answer.content
    )
    assert any("argument 'amount'" in r and "no float holds as written" in r for r in rig.denied())


@pytest.mark.parametrize(("model", "run"), CHECKED)
def test_a_number_a_float_holds_runs_with_the_real_chat_openai(
    rig: Rig, model: dict[str, Any], run: dict[str, Any]
) -> None:
    (answer,) = rig.run(EXACT, **run, **model)
    assert rig.ran == [499.5] and answer.status == "success"


def test_chat_completions_not_streamed_keeps_no_text_and_is_not_checked(rig: Rig) -> None:
    # What docs/langgraph.md says of this path: langchain-openai parses the arguments and keeps
    # no text of them anywhere in the answer, so the call is decided on the float it read.
    (answer,) = rig.run(INEXACT)
    assert rig.ran == [500.0] and answer.status == "success"
