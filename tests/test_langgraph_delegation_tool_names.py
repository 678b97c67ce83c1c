"""What a sub-agent's name may be when ``delegation_tool`` exposes it as the tool ``ask_NAME``: a
name model APIs take for a tool (OpenAI's ``^[a-zA-Z0-9_-]{1,64}$``), so 1 to 60 ASCII letters,
digits, ``_`` or ``-``. Any other name (a space, a dot, a letter beyond ASCII, 61 characters) is an
``InputError`` when the tool is made; until review R56 the tool was made, and the supervisor's
model API refused the request that listed it at the run's first turn."""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

import pytest
import test_observability
from langchain_core.messages import AIMessage, ToolMessage
from langchain_core.utils.function_calling import convert_to_openai_tool
from test_observability import Sweep, _calls

from agentgate.errors import InputError
from agentgate.integrations.langgraph import ScriptedChatModel, create_gated_agent, delegation_tool

sweep = test_observability.sweep  # the fixture, shared

OPENAI_TOOL_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")


class ToolNamesAsOpenAI(ScriptedChatModel):
    """A scripted model whose ``bind_tools`` checks each tool's name as OpenAI's API checks it
    (``'Google Search' does not match '^[a-zA-Z0-9_-]{1,64}$' - 'tools.0.function.name'``)."""

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> ToolNamesAsOpenAI:  # type: ignore[override]
        for at, tool in enumerate(tools):
            name = convert_to_openai_tool(tool)["function"]["name"]
            if not OPENAI_TOOL_NAME.match(name):
                raise ValueError(
                    f"{name!r} does not match {OPENAI_TOOL_NAME.pattern!r} - 'tools.{at}.function.name'"
                )
        return self


def _supervise(sweep: Sweep, name: str) -> dict[str, Any]:
    """A supervisor whose model asks ``ask_{name}`` once, run to its end."""
    helper = create_gated_agent(
        sweep.gate,
        name=name,
        model=ToolNamesAsOpenAI(turns=[AIMessage(content="helped")]),
        tools=[],
    )
    ask = delegation_tool(
        sweep.gate,
        name=name,
        agent=helper,
        key=sweep.keys["helper"],
        capabilities=["tool:lookup", "model:scripted"],
        ttl=timedelta(minutes=5),
    )
    model = ToolNamesAsOpenAI(turns=[_calls((f"ask_{name}", {"task": "help"})), AIMessage(content="done")])
    boss = create_gated_agent(sweep.gate, name="boss", model=model, tools=[*sweep.tools(), ask])
    result: dict[str, Any] = boss.invoke(
        {"messages": [{"role": "user", "content": "go"}]}, context=sweep.boss
    )
    return result


@pytest.mark.parametrize(
    "name",
    ["research team", "research.team", "Forscher-für-Räume", "r" * 61],
    ids=["space", "dot", "non-ascii", "61-chars"],
)
def test_a_sub_agent_name_no_model_api_takes_as_a_tool_is_refused_when_the_tool_is_made(
    sweep: Sweep, name: str
) -> None:
    """Review R56: delegation_tool made ask_NAME from a name model APIs refuse as a tool name; the supervisor's run failed."""
    with pytest.raises(InputError) as refused:
        _supervise(sweep, name)
    message = str(refused.value)
    assert "1 to 60 ASCII letters, digits, '_' or '-'" in message
    assert "[A-Za-z0-9_-]{1,64}" in message
    assert repr(name[:80]) in message


def test_a_sub_agent_name_of_60_tool_name_characters_is_asked_end_to_end(sweep: Sweep) -> None:
    name = "Helper_team-2" + "x" * 47
    result = _supervise(sweep, name)
    (answer,) = [m for m in result["messages"] if isinstance(m, ToolMessage)]
    assert answer.name == f"ask_{name}" and answer.status == "success"
    assert answer.content == "helped"
    assert result["messages"][-1].content == "done"
