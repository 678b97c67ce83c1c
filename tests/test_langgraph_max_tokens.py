"""A middleware's output limit that is not a whole number is a typed error, not a crash."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from langchain.agents.middleware import ModelRequest
from langchain_core.messages import HumanMessage

from agentgate.errors import InputError
from agentgate.gate import Gate
from agentgate.integrations.langgraph import GateMiddleware, ScriptedChatModel
from agentgate.policy import parse_policy
from agentgate.store import SQLiteStore

POLICY = """
version: 1
roles:
  agent:
    capabilities:
      - {resource: "model:*"}
"""


@pytest.fixture()
def gate(tmp_path: Path) -> Gate:
    gate = Gate(parse_policy(POLICY, source="p.yaml"), SQLiteStore(tmp_path / "agentgate.db"))
    yield gate
    gate.close()


@pytest.mark.parametrize("limit", [math.inf, math.nan, 0.5, -3, "512", True, 0, 0.0])
def test_a_model_settings_max_tokens_that_is_no_whole_number_is_an_input_error(
    gate: Gate, limit: object
) -> None:
    middleware = GateMiddleware(gate, agent="agent", model="m")
    request = ModelRequest(
        model=ScriptedChatModel(turns=[]), messages=[HumanMessage("hi")], model_settings={"max_tokens": limit}
    )
    with pytest.raises(InputError, match="max_tokens must be a whole number > 0"):
        middleware._model_call(request)


def test_a_whole_float_max_tokens_is_read_as_its_integer(gate: Gate) -> None:
    middleware = GateMiddleware(gate, agent="agent", model="m")
    request = ModelRequest(
        model=ScriptedChatModel(turns=[]), messages=[HumanMessage("hi")], model_settings={"max_tokens": 512.0}
    )
    assert middleware._model_call(request).args == {"max_tokens": 512}


@pytest.mark.parametrize("limit", [math.inf, 0, 1.5])
def test_a_middleware_max_tokens_that_is_no_whole_number_is_refused_when_made(
    gate: Gate, limit: object
) -> None:
    with pytest.raises(InputError, match="max_tokens must be a whole number > 0"):
        GateMiddleware(gate, agent="agent", max_tokens=limit)  # type: ignore[arg-type]


def test_a_middleware_max_tokens_given_as_a_whole_float_is_read_as_its_integer(gate: Gate) -> None:
    """Review R81: docs/langgraph.md reads a whole float such as ``512.0`` as 512; the middleware
    refused it when made (``create_gated_agent`` too), and read it only in ``model_settings``."""
    middleware = GateMiddleware(gate, agent="agent", model="m", max_tokens=512.0)  # type: ignore[arg-type]
    assert middleware.max_tokens == 512 and type(middleware.max_tokens) is int
    request = ModelRequest(
        model=ScriptedChatModel(turns=[]), messages=[HumanMessage("hi")], model_settings={}
    )
    assert middleware._model_call(request).args == {"max_tokens": 512}


def test_the_chat_models_own_limit_as_a_whole_float_is_its_limit(gate: Gate) -> None:
    """Review R81: a chat model's own ``max_tokens`` of ``4096.0`` was passed over (the call was
    decided and run at the middleware's 1024); read as 4096, as ``model_settings``' is."""
    middleware = GateMiddleware(gate, agent="agent", model="m")
    model = ScriptedChatModel(turns=[])
    object.__setattr__(model, "max_tokens", 4096.0)  # a chat class that keeps its limit as a float
    request = ModelRequest(model=model, messages=[HumanMessage("hi")], model_settings={})
    assert middleware._model_call(request).args == {"max_tokens": 4096}
