"""Review R84 (regression): docs/langgraph.md's list of the paths on which a number no float holds
as written is not checked named the OpenAI Responses API not streamed with ``output_version="v0"``
alone; with ``"v1"`` (LangChain's standard content blocks) the answer keeps no ``function_call``
block either: each becomes a ``tool_call`` block holding the arguments already parsed, whose
``extras`` keep the item's id and status only, so the text is nowhere to read and
``500.00000000000000001`` is decided as ``500.0``. The docs now say so; streamed, ``"v1"`` is
checked (the fragments). The real ``ChatOpenAI`` against a loopback Responses API server."""

from __future__ import annotations

import re
from pathlib import Path

from _langgraph_openai_rig import INEXACT, OpenAIServer, Rig, chat_openai
from _langgraph_openai_rig import rig as rig  # the fixture
from langchain_core.messages import HumanMessage

DOCS = Path(__file__).resolve().parents[1] / "docs" / "langgraph.md"


def test_a_v1_answer_not_streamed_keeps_no_text_of_the_arguments() -> None:
    # A pin of docs/langgraph.md's "Not checked" (passing before R84 too): should langchain-openai
    # start keeping the text there, this fails and the docs and the check are to follow it.
    server = OpenAIServer(INEXACT)
    try:
        chat = chat_openai(server.url, use_responses_api=True, output_version="v1")
        answer = chat.invoke([HumanMessage("go")])
    finally:
        server.close()
    assert [block["type"] for block in answer.content if isinstance(block, dict)] == ["tool_call"]
    assert "500.00000000000000001" not in repr(answer)  # no block, field or metadata keeps it


def test_so_it_is_not_checked_and_the_docs_say_so(rig: Rig) -> None:
    (answer,) = rig.run(INEXACT, use_responses_api=True, output_version="v1")
    assert rig.ran == [500.0] and answer.status == "success"
    text = " ".join(DOCS.read_text().split())
    not_checked = re.search(r"\*\*Not checked\*\*: (.*?)## ", text)
    assert not_checked is not None
    assert 'Responses API with `output_version="v0"` or `"v1"` **not streamed**' in not_checked.group(1)


def test_streamed_a_v1_answer_is_checked(rig: Rig) -> None:
    (answer,) = rig.run(INEXACT, use_responses_api=True, output_version="v1", streaming=True)
    assert rig.ran == [] and answer.status == "error"
    assert "500.00000000000000001, a number no float holds as written" in str(answer.content)
