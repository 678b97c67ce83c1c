"""Review R88: a model call is decided at the largest output limit its request sends, not only at
its ``max_tokens``: a chat model's ``extra_body`` (which langchain-openai merges over the request
body last), its ``model_kwargs``, and the request's ``max_completion_tokens`` may each set one, and
a backend may honour it in place of ``max_tokens``. Until then ``ChatOpenAI(extra_body=
{"max_completion_tokens": 100000})`` under a grant of ``max_tokens<=256`` was decided at the
middleware's 200, the endpoint was sent 100000 and no other limit, and the 5,000 tokens it
generated were charged 200."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
from _langgraph_openai_rig import Loopback, QuietHandler, chat_openai
from langchain.agents.middleware import ModelRequest
from langchain_core.messages import HumanMessage
from pydantic import Field

from agentgate.errors import InputError
from agentgate.gate import AgentIdentity, Gate
from agentgate.integrations.langgraph import GateMiddleware, ScriptedChatModel, create_gated_agent
from agentgate.keys import SigningKey
from agentgate.policy import parse_policy
from agentgate.store import SQLiteStore

POLICY = """
version: 1
trust_anchors: {{root: {{did: "{root}"}}}}
principals:
  boss: {{kind: agent, did: "{boss}", roles: [boss]}}
models:
  scripted: {{cost_per_mtok: {{input: 1, output: 1}}}}
roles:
  boss:
    kind: agent
    capabilities:
      - resource: model:scripted
        constraints: {{max_tokens: {{le: 256}}}}
    budget: {{limit: 1000000, unit: tokens}}
    ttl_s: 3600
"""

ANSWER = {
    "id": "c1",
    "object": "chat.completion",
    "created": 0,
    "model": "scripted",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "done"}, "finish_reason": "stop"}],
    "usage": {"prompt_tokens": 10, "completion_tokens": 1, "total_tokens": 11},
}


class _Endpoint(Loopback):
    """A loopback Chat Completions endpoint answering ``done``; ``bodies`` what it was sent."""

    def __init__(self) -> None:
        self.bodies: list[dict[str, Any]] = []
        bodies = self.bodies

        class Handler(QuietHandler):
            def do_POST(self) -> None:
                bodies.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
                whole = json.dumps(ANSWER).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(whole)))
                self.end_headers()
                self.wfile.write(whole)

        super().__init__(Handler)


EndpointT = TypeVar("EndpointT", bound=Loopback)


def gate_and_endpoint(
    tmp_path: Path, endpoint: Callable[[], EndpointT]
) -> Iterator[tuple[Gate, AgentIdentity, EndpointT]]:
    """A Gate on ``POLICY`` in ``tmp_path``, its agent ``boss`` and a new ``endpoint()``; both
    closed when resumed."""
    keys = {n: SigningKey.generate() for n in ("root", "boss")}
    policy = parse_policy(POLICY.format(**{n: k.did for n, k in keys.items()}), source="p.yaml")
    gate = Gate(policy, SQLiteStore(tmp_path / "agentgate.db"))
    opened = endpoint()
    yield gate, gate.issue(keys["root"], name="boss", key=keys["boss"], role="boss"), opened
    opened.close()
    gate.close()


@pytest.fixture
def setup(tmp_path: Path) -> Iterator[tuple[Gate, AgentIdentity, _Endpoint]]:
    yield from gate_and_endpoint(tmp_path, _Endpoint)


def _converse(setup: tuple[Gate, AgentIdentity, Loopback], **model: Any) -> list[tuple[str, Any]]:
    """The model call's audit entries (kind, args) of one turn of a gated ``ChatOpenAI`` whose
    middleware's own limit is 200."""
    gate, boss, endpoint = setup
    agent = create_gated_agent(
        gate, name="boss", model=chat_openai(endpoint.url, **model), tools=[], max_tokens=200
    )
    agent.invoke({"messages": [{"role": "user", "content": "hi"}]}, context=boss)
    gate.flush()
    return [
        (e.kind, e.args)
        for e in gate.audit.entries()
        if e.resource == "model:scripted" and e.kind != "outcome"
    ]


@pytest.mark.parametrize("key", ["max_completion_tokens", "max_tokens"])
def test_an_extra_body_limit_beyond_the_grant_is_refused_and_nothing_is_sent(
    setup: tuple[Gate, AgentIdentity, _Endpoint], key: str
) -> None:
    assert _converse(setup, extra_body={key: 100000}) == [("deny", {"max_tokens": 100000})]
    assert setup[2].bodies == []


def test_an_extra_body_limit_within_the_grant_is_the_one_decided(
    setup: tuple[Gate, AgentIdentity, _Endpoint],
) -> None:
    """Decided at 250, above the middleware's 200: every limit sent is at most the one decided."""
    assert _converse(setup, extra_body={"max_completion_tokens": 250}) == [("allow", {"max_tokens": 250})]
    [body] = setup[2].bodies
    assert body["max_completion_tokens"] == 250


def test_a_smaller_extra_body_limit_leaves_the_decided_one(
    setup: tuple[Gate, AgentIdentity, _Endpoint],
) -> None:
    assert _converse(setup, extra_body={"max_tokens": 50}) == [("allow", {"max_tokens": 200})]
    [body] = setup[2].bodies
    assert (body["max_tokens"], body["max_completion_tokens"]) == (50, 200)


class _WithKwargs(ScriptedChatModel):
    """A chat model that merges ``model_kwargs`` into its request body, as many LangChain ones do."""

    model_kwargs: dict[str, Any] = Field(default_factory=dict)


def _decided(gate: Gate, model: Any, **settings: Any) -> dict[str, Any]:
    """The call a middleware whose own limit is 1024 decides for ``model`` asked with ``settings``."""
    request = ModelRequest(model=model, messages=[HumanMessage("hi")], model_settings=settings)
    return dict(GateMiddleware(gate, agent="a", model="m")._model_call(request).args)


def test_the_limits_of_model_kwargs_and_the_request_count_too(
    setup: tuple[Gate, AgentIdentity, _Endpoint],
) -> None:
    gate = setup[0]
    assert _decided(gate, _WithKwargs(turns=[], model_kwargs={"max_completion_tokens": 5000})) == {
        "max_tokens": 5000
    }
    assert _decided(gate, ScriptedChatModel(turns=[]), max_completion_tokens=3000) == {"max_tokens": 3000}
    # The request's own extra_body is the one sent, in place of the chat model's.
    model = chat_openai("http://127.0.0.1:9/v1", extra_body={"max_tokens": 90000})
    assert _decided(gate, model, extra_body={"max_tokens": 4000}) == {"max_tokens": 4000}
    assert _decided(gate, model, extra_body={"max_tokens": None}) == {"max_tokens": 1024}


@pytest.mark.parametrize("limit", ["lots", 0, 1.5, True])
def test_an_extra_body_limit_that_is_no_whole_number_is_an_input_error(
    setup: tuple[Gate, AgentIdentity, _Endpoint], limit: object
) -> None:
    gate = setup[0]
    model = chat_openai("http://127.0.0.1:9/v1", extra_body={"max_completion_tokens": limit})
    with pytest.raises(InputError, match=r"the chat model's extra_body\['max_completion_tokens'\] must be"):
        _decided(gate, model)
