"""A tool call's arguments are decided as the model wrote them: a number no float holds as
written is refused, as the command line refuses it in ``--args`` (``agentgate._json``)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from langchain_core.tools import StructuredTool

from agentgate.gate import Gate
from agentgate.integrations.langgraph import DispatchedChatModel, ScriptedChatModel, create_gated_agent
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
    args: {{amount: {{type: number, required: true}}}}
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


class _AsWritten(ScriptedChatModel):
    """A scripted model whose answers keep the calls as the backend wrote them
    (``additional_kwargs``), as ``DispatchedChatModel`` answers (langchain-openai's ``ChatOpenAI``
    keeps no such text: tests/test_langgraph_r84_inexact_chatopenai.py)."""

    def _answer(self, messages: list[BaseMessage]) -> tuple[AIMessage, dict[str, Any]]:
        message, payload = super()._answer(messages)
        n = sum(1 for m in messages if isinstance(m, AIMessage))
        if n < len(self.turns):
            message.additional_kwargs = dict(self.turns[n].additional_kwargs)
        return message, payload


def _backend_answer(arguments: str) -> AIMessage:
    """The answer ``DispatchedChatModel`` makes of a backend's call of ``pay`` with ``arguments``."""
    body = {"id": "c1", "type": "function", "function": {"name": "pay", "arguments": arguments}}
    served = SimpleNamespace(
        body={"choices": [{"message": {"content": "", "tool_calls": [body]}}]},
        content="",
        usage=SimpleNamespace(prompt_tokens=10, completion_tokens=5),
        backend="b",
        finish_reason="tool_calls",
    )
    message = DispatchedChatModel._result(served).generations[0].message
    assert isinstance(message, AIMessage)
    return message


@pytest.fixture
def paying(tmp_path: Path) -> Iterator[tuple[Gate, Any, list[object]]]:
    keys = {n: SigningKey.generate() for n in ("root", "boss")}
    gate = Gate(
        parse_policy(POLICY.format(**{n: k.did for n, k in keys.items()}), source="p.yaml"),
        SQLiteStore(tmp_path / "agentgate.db"),
    )
    boss = gate.issue(keys["root"], name="boss", key=keys["boss"], role="boss")
    paid: list[object] = []

    def pay(amount: float) -> str:
        paid.append(amount)
        return "paid"

    tool = StructuredTool.from_function(func=pay, name="pay", description="pay")

    def run(arguments: str) -> list[ToolMessage]:
        model = _AsWritten(turns=[_backend_answer(arguments), AIMessage(content="done")])
        agent = create_gated_agent(gate, name="boss", model=model, tools=[tool])
        result = agent.invoke({"messages": [{"role": "user", "content": "pay"}]}, context=boss)
        return [m for m in result["messages"] if isinstance(m, ToolMessage)]

    try:
        yield gate, run, paid
    finally:
        gate.close()


def test_an_argument_no_float_holds_as_written_is_refused_not_rounded(
    paying: tuple[Gate, Any, list[object]],
) -> None:
    """Review R54: a tool call's arguments were read with plain JSON, so ``100.00000000000000001``
    became ``100.0`` before the decision and ``amount<=100`` allowed a payment above the bound.
    The call is now refused, recorded as a ``deny``, and the model told which argument."""
    gate, run, paid = paying
    (answer,) = run('{"amount": 100.00000000000000001}')
    assert paid == []
    assert answer.status == "error"
    assert "argument 'amount' is 100.00000000000000001, a number no float holds" in str(answer.content)
    (refusal,) = [e for e in gate.audit.entries() if e.resource == "tool:pay"]
    assert refusal.kind == "deny" and any("no float holds" in r for r in refusal.reasons)
    (nested,) = run('{"amount": 5, "split": [{"amount": 1e-400}]}')
    assert paid == [] and "argument 'split'[0]'amount' is 1e-400" in str(nested.content)


def test_a_number_a_float_holds_as_written_is_decided_as_usual(
    paying: tuple[Gate, Any, list[object]],
) -> None:
    """``0.1`` and ``99.5`` are what their floats hold (their shortest form): decided and run."""
    _gate, run, paid = paying
    assert [m.status for m in run('{"amount": 99.5}')] == ["success"]
    assert [m.status for m in run('{"amount": 0.1}')] == ["success"]
    assert paid == [99.5, 0.1]


def test_a_streamed_answer_keeps_the_calls_as_written() -> None:
    """The last chunk of a streamed answer keeps the calls as the backend wrote them, as a whole
    answer does: the middleware reads them there."""
    from agentgate.integrations.langgraph._models import _Pieces

    pieces = _Pieces()
    for part in ('{"amount": 100.0000', "0000000000001}"):
        pieces._add({"index": 0, "id": "c1", "function": {"name": "pay", "arguments": part}})
    last = pieces.tool_calls().message
    (written,) = last.additional_kwargs["tool_calls"]
    assert written["id"] == "c1" and written["function"]["arguments"] == '{"amount": 100.00000000000000001}'


def test_arguments_are_read_as_langchain_reads_them() -> None:
    """A control character inside a string (which LangChain's OpenAI model accepts, reading with
    ``strict=False``) does not hide an inexact number; arguments changed since they were read
    from the text (another middleware's edit) are not judged by it."""
    from agentgate._json import inexact_argument

    text = '{"a": "x\\ty", "b": 1.00000000000000000001}'.replace("\\t", "\t")
    assert inexact_argument(text, {"a": "x\ty", "b": 1.0}) == ("b", "'b'", "1.00000000000000000001")
    assert inexact_argument(text, {"a": "x\ty", "b": 2}) is None
    assert inexact_argument('{"b": 1.5}', {"b": 1.5}) is None
