"""Review R60: what the model is told of a refused or failed tool call never quotes a value it did
not write. Arguments LangGraph injects (``InjectedToolArg``, ``InjectedState``, ...) are hidden from
the model; a middleware outside the gate may fill one with a secret (an API key, an account)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Annotated, Any

import pytest
from langchain.agents.middleware import AgentMiddleware
from langchain_core.messages import AIMessage, ToolMessage
from langchain_core.tools import InjectedToolArg, StructuredTool
from langgraph.prebuilt.tool_node import ToolCallRequest
from test_langgraph_exact_numbers import _AsWritten

from agentgate.errors import InputError
from agentgate.gate import Gate
from agentgate.integrations.langgraph import create_gated_agent
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
    {timeout}
    args:
      amount: {{type: integer, required: true}}
models:
  scripted: {{cost_per_mtok: {{input: 1, output: 1}}}}
roles:
  boss:
    kind: agent
    capabilities:
      - resource: tool:pay
        constraints:
          amount: {{le: 500}}
          {extra}
      - resource: model:scripted
    ttl_s: 3600
"""

SECRET = "sk-live-SECRET123"
ACCOUNT = 2**70


class _Injecting(AgentMiddleware[Any, Any, Any]):
    """A middleware outside the gate that fills the tool's injected arguments."""

    def __init__(self, values: dict[str, object]) -> None:
        super().__init__()
        self.values = values

    def wrap_tool_call(self, request: ToolCallRequest, handler: Callable[[ToolCallRequest], Any]) -> Any:
        call = {**request.tool_call, "args": {**request.tool_call["args"], **self.values}}
        return handler(request.override(tool_call=call))  # type: ignore[arg-type]

    async def awrap_tool_call(
        self, request: ToolCallRequest, handler: Callable[[ToolCallRequest], Awaitable[Any]]
    ) -> Any:
        call = {**request.tool_call, "args": {**request.tool_call["args"], **self.values}}
        return await handler(request.override(tool_call=call))  # type: ignore[arg-type]


class _Paying:
    def __init__(self, tmp_path: Path) -> None:
        self.path = tmp_path
        self.ran: list[int] = []
        self.gate: Gate | None = None

    def run(
        self,
        args: dict[str, object],
        injected: dict[str, object],
        *,
        extra: str = "",
        body: Callable[[], None] | None = None,
        mode: str = "sync",
        slow: bool = False,
        granted: str | None = None,
    ) -> str:
        """The text of the one ToolMessage the model receives for a call of ``pay`` with ``args``.
        ``granted``: the grant was issued under the policy with that ``extra`` (the policy changed
        since)."""
        keys = {n: SigningKey.generate() for n in ("root", "boss")}
        timeout = "timeout_s: 0.05" if slow else ""

        def gate(extra: str) -> Gate:
            text = POLICY.format(extra=extra, timeout=timeout, **{n: k.did for n, k in keys.items()})
            return Gate(parse_policy(text, source="p.yaml"), SQLiteStore(self.path / "agentgate.db"))

        issuing = gate(granted if granted is not None else extra)
        boss = issuing.issue(keys["root"], name="boss", key=keys["boss"], role="boss")
        if granted is not None:
            issuing.close()
        self.gate = gate(extra) if granted is not None else issuing

        def pay(
            amount: int,
            api_key: Annotated[str, InjectedToolArg] = "",
            account: Annotated[int, InjectedToolArg] = 0,
        ) -> str:
            if body is not None:
                body()
            self.ran.append(amount)
            return "paid"

        async def apay(amount: int) -> str:
            await asyncio.sleep(5)  # past its deadline: cancelled there
            return "paid"

        made = {"func": pay} if not slow else {"coroutine": apay}
        tool = StructuredTool.from_function(**made, name="pay", description="pay")
        asked = AIMessage(content="", tool_calls=[{"name": "pay", "args": args, "id": "c1"}])
        agent = create_gated_agent(
            self.gate,
            name="boss",
            model=_AsWritten(turns=[asked, AIMessage(content="done")]),
            tools=[tool],
            middleware=[_Injecting(injected)],
        )
        asking = {"messages": [{"role": "user", "content": "pay"}]}
        if mode == "sync":
            result = agent.invoke(asking, context=boss)
        else:
            result = asyncio.run(agent.ainvoke(asking, context=boss))
        [answer] = [m for m in result["messages"] if isinstance(m, ToolMessage)]
        return str(answer.content)


@pytest.fixture
def paying(tmp_path: Path) -> Iterator[_Paying]:
    made = _Paying(tmp_path)
    yield made
    if made.gate is not None:
        made.gate.close()


def test_an_injected_integer_beyond_64_bits_is_neither_quoted_nor_a_refusal(paying: _Paying) -> None:
    """Review R60, an injected argument's integer out of range refused the call and was quoted.

    The call decided holds no injected argument (``_model_args``), so the value reaches no record:
    the model wrote nothing out of range, and its call runs."""
    told = paying.run({"amount": 5}, {"account": ACCOUNT})
    assert str(ACCOUNT) not in told
    assert paying.ran == [5]


@pytest.mark.parametrize(
    ("args", "extra", "rule"),
    [
        ({"amount": 900}, f'api_key: {{eq: "{SECRET}"}}', "api_key="),  # the bound crossed is amount's
        ({"amount": 5}, f'api_key: {{in: ["{SECRET}", "sk-live-OTHER"]}}', "api_key="),
        ({"amount": 5}, 'api_key: {prefix: "sk-live-SEC"}', "api_key^="),
    ],
)
def test_a_grant_constraint_on_an_injected_argument_is_named_not_quoted(
    paying: _Paying, args: dict[str, object], extra: str, rule: str
) -> None:
    """Review R60, the refusal quoted the grant's operand on an injected argument (the key itself).

    The model is told the argument's name and the kind of rule; the refusal is still recorded
    whole."""
    told = paying.run(args, {"api_key": SECRET}, extra=extra)
    assert "sk-live-" not in told
    assert f"{rule}<not shown: an injected argument>" in told
    assert told.startswith("agentgate refused tool:pay") and paying.ran == []


@pytest.mark.parametrize(
    ("extra", "rule"),
    [
        (f'api_key: {{eq: "{SECRET}"}}', "api_key = "),
        (f'api_key: {{in: ["{SECRET}", "sk-live-\\"x y]"]}}', "api_key in "),
        ('api_key: {prefix: "sk-live-SEC"}', "api_key starts with "),
    ],
)
def test_a_policy_rule_on_an_injected_argument_is_named_not_quoted(
    paying: _Paying, extra: str, rule: str
) -> None:
    """Review R60, a policy rule's operand on an injected argument was quoted to the model.

    The grant was issued before the policy constrained the argument, so the grant covers the
    call and the policy refuses it, quoting its rule in words."""
    told = paying.run({"amount": 5}, {"api_key": SECRET}, extra=extra, granted="")
    assert "sk-live-" not in told and "x y" not in told
    assert f"amount <= 500 and {rule}<not shown: an injected argument> (line " in told
    assert paying.ran == []


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_an_agentgate_error_the_tool_raises_is_told_by_its_type_only(paying: _Paying, mode: str) -> None:
    """Review R60, the text of an agentgate error raised by the tool's own code was quoted.

    A tool may raise ``InputError`` of its own (or a model it calls, ``BackendFailed``); its text
    is the tool's, as any exception's, and may carry a secret."""

    def failing() -> None:
        raise InputError(f"the key {SECRET} was refused")

    told = paying.run({"amount": 5}, {}, body=failing, mode=mode)
    assert told == "agentgate: tool pay failed (InputError); the failure is recorded."


def test_the_gates_own_error_is_still_told(paying: _Paying) -> None:
    """An agentgate error the gate raises (a deadline it cut the tool at) is told with its text."""
    told = paying.run({"amount": 5}, {}, mode="async", slow=True)
    assert told == (
        "agentgate: tool pay failed (tool pay: attempt 1 did not finish before its deadline); "
        "the failure is recorded."
    )
