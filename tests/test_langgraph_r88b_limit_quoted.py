"""Review R88b: a model call's output limit that is no whole number above 0 is refused with an
``InputError`` quoting it as ``quoted`` does (at most 80 characters, an integer past 128 bits by
its size). Until then the refusal wrote its whole ``repr``: ``-10**5000`` (in the request's
``max_completion_tokens`` or ``max_tokens``, or the chat model's ``model_kwargs``) was a bare
``ValueError`` out of ``repr``, and a text of 1 MB in ``extra_body`` a 1 MB message."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from langchain.agents.middleware import ModelRequest
from langchain_core.messages import HumanMessage
from pydantic import Field

from agentgate.errors import InputError
from agentgate.gate import Gate
from agentgate.integrations.langgraph import GateMiddleware, ScriptedChatModel
from agentgate.keys import SigningKey
from agentgate.policy import parse_policy
from agentgate.store import SQLiteStore

HUGE = -(10**5000)


class _WithKwargs(ScriptedChatModel):
    """A chat model that merges ``model_kwargs`` into its request body, as many LangChain ones do."""

    model_kwargs: dict[str, Any] = Field(default_factory=dict)


@pytest.fixture
def gate(tmp_path: Path) -> Iterator[Gate]:
    root = SigningKey.generate()
    policy = parse_policy(f'version: 1\ntrust_anchors: {{root: {{did: "{root.did}"}}}}\n', source="p.yaml")
    gate = Gate(policy, SQLiteStore(tmp_path / "agentgate.db"))
    yield gate
    gate.close()


def _refusal(gate: Gate, model: ScriptedChatModel, **settings: Any) -> str:
    request = ModelRequest(model=model, messages=[HumanMessage("hi")], model_settings=settings)
    with pytest.raises(InputError) as refused:
        GateMiddleware(gate, agent="a", model="m")._model_call(request)
    return str(refused.value)


@pytest.mark.parametrize(
    ("model", "settings", "where"),
    [
        (ScriptedChatModel(turns=[]), {"max_tokens": HUGE}, "max_tokens"),
        (
            ScriptedChatModel(turns=[]),
            {"max_completion_tokens": HUGE},
            "model_settings['max_completion_tokens']",
        ),
        (
            _WithKwargs(turns=[], model_kwargs={"max_completion_tokens": HUGE}),
            {},
            "the chat model's model_kwargs['max_completion_tokens']",
        ),
    ],
)
def test_a_limit_of_an_integer_too_long_to_write_is_refused_by_its_size(
    gate: Gate, model: ScriptedChatModel, settings: dict[str, Any], where: str
) -> None:
    assert _refusal(gate, model, **settings) == (
        f"agentgate[a]: {where} must be a whole number > 0, got an integer of {HUGE.bit_length()} bits"
    )


def test_a_limit_of_a_long_text_is_refused_with_its_start_only(gate: Gate) -> None:
    said = _refusal(gate, ScriptedChatModel(turns=[]), extra_body={"max_tokens": "x" * 1_000_000})
    assert said.startswith(
        "agentgate[a]: model_settings['extra_body']['max_tokens'] must be a whole number > 0, got 'xxx"
    )
    assert said.endswith("...")
    assert len(said) < 200
