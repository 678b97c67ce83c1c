"""Review R84: the refusal of a call whose argument the policy does not mark loggable holds, nested
inside it, an integer beyond 64 bits or a number no float holds as written names that argument
alone in the audit log, never the keys inside its value (docs/langgraph.md: a non-loggable
argument's value is never written in clear, not even inside a reason; a key is part of the
value). Until R84 the ``deny`` entry's reason named the key path (``argument
'note''sk-live-...' is an integer beyond ...``), and ``redact_reasons`` replaces top-level names
only. The model is still told where, as it wrote it. Real ``create_agent`` graphs over SQLite."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _langgraph_openai_rig import GO, GatedRig
from langchain_core.messages import AIMessage, ToolMessage
from langchain_core.tools import StructuredTool
from langgraph.checkpoint.memory import InMemorySaver
from test_langgraph_exact_numbers import _AsWritten

from agentgate.integrations.langgraph import create_gated_agent

SECRET = "sk-live-7c1f00ddeadbeef42"


class _Rig(GatedRig):
    """``GatedRig`` with ``refund`` and ``search`` tools that record their names."""

    def __init__(self, tmp_path: Path) -> None:
        super().__init__(tmp_path)

        def refund(amount: float, note: Any = "") -> str:
            self.ran.append("refund")
            return "refunded"

        def search(query: Any) -> str:
            self.ran.append("search")
            return "found"

        self.tools = [
            StructuredTool.from_function(func=f, name=f.__name__, description=f.__name__)
            for f in (refund, search)
        ]

    def run(self, name: str, args: dict[str, Any], written: str | None, *, checkpointed: bool) -> str:
        kept = (
            {
                "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"name": name, "arguments": written}}
                ]
            }
            if written is not None
            else {}
        )
        answer = AIMessage(
            content="", tool_calls=[{"name": name, "args": args, "id": "c1"}], additional_kwargs=kept
        )
        agent = create_gated_agent(
            self.gate,
            name="boss",
            model=_AsWritten(turns=[answer]),
            tools=self.tools,
            checkpointer=InMemorySaver() if checkpointed else None,
        )
        result = agent.invoke(GO, {"configurable": {"thread_id": "t"}}, context=self.boss)
        (told,) = [str(m.content) for m in result["messages"] if isinstance(m, ToolMessage)]
        return told

    def log_text(self) -> str:
        self.gate.flush()
        return "\n".join(e.model_dump_json() for e in self.gate.audit.entries())


@pytest.fixture
def rig(tmp_path: Path) -> Iterator[_Rig]:
    made = _Rig(tmp_path)
    yield made
    made.gate.close()


HUGE = 10**30
INEXACT_TEXT = '{"amount": 5, "note": {' + json.dumps(SECRET) + ": [1, 100.00000000000000001]}}"


@pytest.mark.parametrize("checkpointed", [False, True], ids=["no-checkpointer", "checkpointer"])
def test_an_integer_out_of_range_under_a_non_loggable_argument_is_recorded_by_its_name(
    rig: _Rig, checkpointed: bool
) -> None:
    told = rig.run("refund", {"amount": 5, "note": {SECRET: [1, HUGE]}}, None, checkpointed=checkpointed)
    assert rig.ran == []
    assert f"argument 'note''{SECRET}'[1] is {HUGE}" in told  # the model is told where, as it wrote it
    (deny,) = rig.denials()
    assert deny.reasons[0].startswith("argument 'note' is an integer beyond the range")
    assert SECRET not in rig.log_text()  # until R84: "argument 'note''sk-live-...'[1] is ..."


def test_an_inexact_number_under_a_non_loggable_argument_is_recorded_by_its_name(rig: _Rig) -> None:
    args = json.loads(INEXACT_TEXT)
    told = rig.run("refund", args, INEXACT_TEXT, checkpointed=True)
    assert rig.ran == []
    assert f"argument 'note''{SECRET}'[1] is 100.00000000000000001" in told
    (deny,) = rig.denials()
    assert deny.reasons[0] == (
        "argument 'note' is a number no float holds as written; give it with fewer digits, or as text"
    )
    assert SECRET not in rig.log_text()


def test_under_a_loggable_argument_the_reason_keeps_the_path_and_the_value(rig: _Rig) -> None:
    # ``search.query`` is loggable: its value, keys included, is written in clear anyway.
    rig.run("search", {"query": {"k": HUGE}}, None, checkpointed=False)
    (deny,) = rig.denials()
    assert deny.reasons[0].startswith(f"argument 'query''k' is {HUGE}, an integer beyond the range")
