"""Review R90: agentgate's notes on an answer's tool calls (``agentgate_unstorable``,
``agentgate_out_of_range``, ``agentgate_out_of_range_at``, ``agentgate_written_args``) are maps
keyed by call id, and msgpack stores a lone surrogate in a value (as ``?``) but not in a key. A
call id holding one made the whole note unstorable: with a call whose arguments the checkpointer
cannot store, the checkpointed run ended in ``InputError``; with integers beyond 64 bits, the
notes were left out for every call, and a call beside it, its integer kept as text, was decided
on that text and ran. Now only the entries that cannot be stored move (under the id as the
checkpointer stores it, which the answer read back from a checkpoint holds), the call with such
an id is refused by its id, and the calls beside it as their own notes say."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage, ToolMessage
from langchain_core.tools import StructuredTool
from langgraph.checkpoint.memory import InMemorySaver

from agentgate.gate import Gate
from agentgate.integrations.langgraph import ScriptedChatModel, create_gated_agent
from agentgate.integrations.langgraph._tool_calls import (
    _storable_answer,
    _unstorable_arguments,
    _with_written_args,
    _written_arguments,
)
from agentgate.keys import SigningKey
from agentgate.policy import parse_policy
from agentgate.store import SQLiteStore

POLICY = """
version: 1
trust_anchors: {{root: {{did: "{root}"}}}}
principals:
  boss: {{kind: agent, did: "{boss}", roles: [boss]}}
tools:
  pay:
    args: {{amount: {{type: number, required: true}}, memo: {{type: string}}}}
    loggable: [amount]
    idempotent: true
models:
  scripted: {{cost_per_mtok: {{input: 1, output: 1}}}}
roles:
  boss:
    kind: agent
    capabilities:
      - resource: tool:pay
        constraints: {{amount: {{le: 100}}}}
      - resource: model:scripted
    ttl_s: 3600
"""

SURROGATE_ID = "a\ud800"
BIG = 2**70
UNSTORABLE_SAID = "the tool call's arguments hold what the run's checkpointer cannot store"
OUT_OF_RANGE_SAID = "argument 'memo' is 1180591620717411303424"
ID_SAID = "call_id must be valid Unicode text"


@pytest.fixture
def paying(tmp_path: Path) -> Iterator[Any]:
    keys = {n: SigningKey.generate() for n in ("root", "boss")}
    gate = Gate(
        parse_policy(POLICY.format(**{n: k.did for n, k in keys.items()}), source="p.yaml"),
        SQLiteStore(tmp_path / "agentgate.db"),
    )
    boss = gate.issue(keys["root"], name="boss", key=keys["boss"], role="boss")
    paid: list[object] = []

    def pay(amount: float, memo: str = "") -> str:
        paid.append(memo or amount)
        return "paid"

    tool = StructuredTool.from_function(func=pay, name="pay", description="pay")

    def run(calls: list[dict[str, Any]]) -> tuple[dict[str, ToolMessage], list[object]]:
        model = ScriptedChatModel(turns=[AIMessage(content="", tool_calls=calls), AIMessage(content="done")])
        agent = create_gated_agent(gate, name="boss", model=model, tools=[tool], checkpointer=InMemorySaver())
        result = agent.invoke(
            {"messages": [{"role": "user", "content": "pay"}]},
            {"configurable": {"thread_id": "t"}},
            context=boss,
        )
        assert result["messages"][-1].content == "done"
        return {m.tool_call_id: m for m in result["messages"] if isinstance(m, ToolMessage)}, paid

    try:
        yield run
    finally:
        gate.close()


def test_unstorable_arguments_under_such_an_id_are_refused_and_the_run_goes_on(paying: Any) -> None:
    told, paid = paying(
        [
            {"name": "pay", "args": {"amount": 1, "\ud800": 1}, "id": SURROGATE_ID},
            {"name": "pay", "args": {"amount": 2}, "id": "b"},
        ]
    )  # until the fix: InputError, the run ended
    assert paid == [2]
    assert told[SURROGATE_ID].status == "error"
    assert ID_SAID in str(told[SURROGATE_ID].content)
    assert told["b"].status == "success"


def test_the_out_of_range_note_of_a_call_beside_such_an_id_is_kept(paying: Any) -> None:
    told, paid = paying(
        [
            {"name": "pay", "args": {"amount": 1, "memo": BIG}, "id": SURROGATE_ID},
            {"name": "pay", "args": {"amount": 1, "memo": BIG}, "id": "b"},
        ]
    )
    assert paid == []  # until the fix: ["1180591620717411303424"], b run on the text
    assert told["b"].status == "error"
    assert OUT_OF_RANGE_SAID in str(told["b"].content)
    assert told[SURROGATE_ID].status == "error"


def _reloaded(answer: AIMessage) -> AIMessage:
    """``answer`` as a checkpoint keeps it and gives it back."""
    serde = InMemorySaver().serde
    back = serde.loads_typed(serde.dumps_typed(answer))
    assert isinstance(back, AIMessage)
    return back


def test_the_written_text_of_a_call_beside_such_an_id_is_kept() -> None:
    # The streamed text the model hook keeps (ChatOpenAI on Chat Completions keeps none itself).
    answer = AIMessage(
        content="",
        tool_calls=[
            {"name": "pay", "args": {"amount": 1.0}, "id": SURROGATE_ID},
            {"name": "pay", "args": {"amount": 100.0}, "id": "b"},
        ],
    )
    written = {SURROGATE_ID: '{"amount": 1}', "b": '{"amount": 100.00000000000000001}'}
    kept = _reloaded(_storable_answer(_with_written_args(answer, written), InMemorySaver().serde))
    assert _written_arguments(kept, "b") == written["b"]  # until the fix: None, left out
    assert _written_arguments(kept, "a?") == written[SURROGATE_ID]  # its id as kept


def test_the_notes_of_such_an_id_follow_it_into_a_checkpoint() -> None:
    # Read back from a checkpoint, the call's id is ``a?``: its notes are found under it, so a
    # resumed run refuses it as the first did (its arguments left out, or its integer as text).
    answer = AIMessage(
        content="",
        tool_calls=[
            {"name": "pay", "args": {"amount": 1, "\ud800": 1}, "id": SURROGATE_ID},
            {"name": "pay", "args": {"amount": 1, "memo": BIG}, "id": "x\ud800"},
        ],
    )
    kept = _reloaded(_storable_answer(answer, InMemorySaver().serde))
    assert [c["id"] for c in kept.tool_calls] == ["a?", "x?"]
    assert kept.tool_calls[0]["args"] == {}
    refused = _unstorable_arguments(kept, "a?")
    assert refused is not None and UNSTORABLE_SAID in str(refused)
    assert kept.tool_calls[1]["args"]["memo"] == str(BIG)
    assert OUT_OF_RANGE_SAID in kept.response_metadata["agentgate_out_of_range"]["x?"]
    assert kept.response_metadata["agentgate_out_of_range_at"]["x?"] == [["memo"]]
