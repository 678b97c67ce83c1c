"""Review R88b: the Responses API's output limit, ``max_output_tokens``, is read as the other
limits a request sends besides its ``max_tokens`` are (tests/test_langgraph_r88_extra_limits.py),
and the largest decides. Until then only ``max_tokens`` and ``max_completion_tokens`` were read,
so ``ChatOpenAI(use_responses_api=True, extra_body={"max_output_tokens": 100000})`` under a grant
of ``max_tokens<=256`` was decided at the middleware's 200 and the endpoint was sent 100000. With
the Responses API langchain-openai sends the decided ``max_tokens`` as ``max_output_tokens``."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _langgraph_openai_rig import Loopback, QuietHandler, response
from test_langgraph_r88_extra_limits import _converse as converse_chat_openai
from test_langgraph_r88_extra_limits import _decided, _WithKwargs, gate_and_endpoint

from agentgate.gate import AgentIdentity, Gate
from agentgate.integrations.langgraph import ScriptedChatModel


class _Endpoint(Loopback):
    """A loopback Responses API endpoint answering ``done``; ``bodies`` what it was sent."""

    def __init__(self) -> None:
        self.bodies: list[dict[str, Any]] = []
        bodies = self.bodies

        class Handler(QuietHandler):
            def do_POST(self) -> None:
                bodies.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
                text = {"type": "output_text", "text": "done", "annotations": []}
                message = {"type": "message", "id": "m1", "role": "assistant", "status": "completed"}
                whole = json.dumps(response(1, [{**message, "content": [text]}])).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(whole)))
                self.end_headers()
                self.wfile.write(whole)

        super().__init__(Handler)


@pytest.fixture
def setup(tmp_path: Path) -> Iterator[tuple[Gate, AgentIdentity, _Endpoint]]:
    yield from gate_and_endpoint(tmp_path, _Endpoint)


def _converse(setup: tuple[Gate, AgentIdentity, _Endpoint], **model: Any) -> list[tuple[str, Any]]:
    """The model call's audit entries (kind, args) of one turn of a gated ``ChatOpenAI`` on the
    Responses API whose middleware's own limit is 200."""
    return converse_chat_openai(setup, use_responses_api=True, **model)


def test_an_extra_body_max_output_tokens_beyond_the_grant_is_refused_and_nothing_is_sent(
    setup: tuple[Gate, AgentIdentity, _Endpoint],
) -> None:
    assert _converse(setup, extra_body={"max_output_tokens": 100000}) == [("deny", {"max_tokens": 100000})]
    assert setup[2].bodies == []


def test_an_extra_body_max_output_tokens_within_the_grant_is_the_limit_decided_and_sent(
    setup: tuple[Gate, AgentIdentity, _Endpoint],
) -> None:
    assert _converse(setup, extra_body={"max_output_tokens": 250}) == [("allow", {"max_tokens": 250})]
    [body] = setup[2].bodies
    assert body["max_output_tokens"] == 250


def test_the_decided_limit_reaches_the_responses_api_as_max_output_tokens(
    setup: tuple[Gate, AgentIdentity, _Endpoint],
) -> None:
    assert _converse(setup) == [("allow", {"max_tokens": 200})]
    [body] = setup[2].bodies
    assert body["max_output_tokens"] == 200
    assert "max_tokens" not in body


def test_a_max_output_tokens_of_model_kwargs_or_the_request_counts_too(
    setup: tuple[Gate, AgentIdentity, _Endpoint],
) -> None:
    gate = setup[0]
    assert _decided(gate, _WithKwargs(turns=[], model_kwargs={"max_output_tokens": 5000})) == {
        "max_tokens": 5000
    }
    assert _decided(gate, ScriptedChatModel(turns=[]), max_output_tokens=3000) == {"max_tokens": 3000}
    assert _decided(gate, ScriptedChatModel(turns=[]), extra_body={"max_output_tokens": 4000}) == {
        "max_tokens": 4000
    }
