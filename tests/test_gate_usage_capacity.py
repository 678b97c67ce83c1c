"""What a model call is charged when its backend reports more completion tokens than
the ``max_tokens`` it was sent, on every path that charges one (the Gate's API, the gateway's JSON
and streamed answers over real HTTP, the LangGraph middleware); and how a data-parallel vLLM
server's per-engine metrics are read.

A backend that reports more output than the limit it was sent is broken or hostile: charged as
reported, one call could drain a grant's budget. The completion tokens charged are capped at the
output reserved (the call's ``max_tokens``); the prompt tokens stay as reported (the reservation's
prompt is only an estimate); the answer is still returned, and the ``outcome`` entry says what the
backend reported.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage
from test_gate import POLICY, Setup
from test_gateway_http10 import REASONING, _event
from test_gateway_http10 import _Backend as _StreamBackend
from test_gateway_sloppy_clients import ANSWER, BACKEND_NAME, Env, serve
from test_gateway_sloppy_clients import _Backend as _JSONBackend
from test_gateway_sloppy_clients import _body as _json_body
from test_langgraph import _make_team

from agentgate.capabilities import Call
from agentgate.dispatch.metrics import load_from_text
from agentgate.gate import Gate
from agentgate.integrations.langgraph import ScriptedChatModel, create_gated_agent
from agentgate.keys import SigningKey
from agentgate.policy import parse_policy
from agentgate.store import SQLiteStore

REPORTED = 1_000_000
"""The completion tokens a hostile backend reports, far over any call's ``max_tokens``."""


def _over_limit(reasons: list[str]) -> list[str]:
    return [r for r in reasons if "over the call's max_tokens" in r]


# --- the Gate's API -----------------------------------------------------------------------------


@pytest.fixture
def setup(tmp_path: Path) -> Iterator[Setup]:
    made = Setup(tmp_path, budget=10_000_000)
    yield made
    made.gate.close()


def test_completion_tokens_over_max_tokens_are_charged_at_max_tokens(
    setup: Setup, caplog: pytest.LogCaptureFixture
) -> None:
    # ``small`` costs 1 micro-dollar a prompt token and 2 an output token (test_gate.POLICY).
    auth = setup.gate.authorize(setup.agent, Call.model("small", {"max_tokens": 100}), tokens=(50, 100))
    with caplog.at_level(logging.WARNING, logger="agentgate.gate"):
        answer = setup.gate.run(auth, lambda: "the answer", spent=lambda _: (60, REPORTED))
    assert answer == "the answer"  # the call still succeeds
    charged = 60 + 2 * 100  # the prompt as reported, the output at the reserved 100
    assert setup.gate.budget_usage(setup.agent)[setup.agent.chain.root.id][0] == charged
    outcome = setup.entries()[-1]
    assert outcome.kind == "outcome" and outcome.status == "ok" and outcome.budget_delta == charged
    (reason,) = _over_limit(outcome.reasons)
    assert f"reported {REPORTED} completion tokens" in reason and "max_tokens of 100" in reason
    assert any(str(REPORTED) in r.getMessage() for r in caplog.records)


def test_completion_tokens_within_max_tokens_are_charged_as_reported(setup: Setup) -> None:
    auth = setup.gate.authorize(setup.agent, Call.model("small", {"max_tokens": 100}), tokens=(50, 100))
    setup.gate.run(auth, lambda: "x", spent=lambda _: (70, 100))  # exactly the limit
    outcome = setup.entries()[-1]
    assert outcome.budget_delta == 70 + 2 * 100 and _over_limit(outcome.reasons) == []


def test_the_cap_is_the_output_reserved_on_a_tokens_budget_too(tmp_path: Path) -> None:
    keys = {n: SigningKey.generate() for n in ("root", "agent", "lead", "helper")}
    text = POLICY.format(budget=10_000, **{n: k.did for n, k in keys.items()})
    policy = parse_policy(text.replace("unit: usd_micros", "unit: tokens"), source="gate.yaml")
    gate = Gate(policy, SQLiteStore(tmp_path / "agentgate.db"))
    try:
        agent = gate.issue(keys["root"], name="agent", key=keys["agent"], role="worker")
        auth = gate.authorize(agent, Call.model("small"), tokens=(30, 40))  # no max_tokens argument
        gate.run(auth, lambda: "x", spent=lambda _: (35, REPORTED))
        gate.flush()
        assert gate.budget_usage(agent)[agent.chain.root.id][0] == 35 + 40
    finally:
        gate.close()


async def test_an_async_call_is_capped_the_same_way(setup: Setup) -> None:
    auth = setup.gate.authorize(setup.agent, Call.model("small", {"max_tokens": 10}), tokens=(5, 10))

    async def call() -> str:
        return "x"

    assert await setup.gate.arun(auth, call, spent=lambda _: (5, REPORTED)) == "x"
    assert setup.entries()[-1].budget_delta == 5 + 2 * 10


# --- the gateway, over real HTTP ----------------------------------------------------------------


@pytest.fixture(scope="module")
def json_backend() -> Iterator[_JSONBackend]:
    made = _JSONBackend()
    yield made
    made.stop()


@pytest.fixture
def json_env(tmp_path: Path, json_backend: _JSONBackend) -> Iterator[Env]:
    answer = {**ANSWER, "usage": {"prompt_tokens": 5, "completion_tokens": REPORTED}}
    json_backend.status, json_backend.body = 200, json.dumps(answer).encode()
    yield from serve(tmp_path, json_backend, BACKEND_NAME, Env)


def _outcome(env: Env) -> Any:
    env.gate.flush()
    return [e for e in env.gate.audit.entries() if e.kind == "outcome"][-1]


def test_a_gateway_json_answer_over_max_tokens_is_charged_at_max_tokens(json_env: Env) -> None:
    received = json_env.exchange(json_env.request(_json_body()))  # max_tokens 8
    head, _, body = received.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200")
    # The answer passed on, with the usage charged (since review R67: until then the backend's
    # report, which the caller could not square with its budget).
    answered = json.loads(body)
    assert answered["choices"] == ANSWER["choices"]
    assert answered["usage"] == {"prompt_tokens": 5, "completion_tokens": 8, "total_tokens": 13}
    # One micro-dollar a token in and out (test_gateway's policy): 5 prompt tokens, 8 output.
    assert json_env.spent() == 5 + 8
    outcome = _outcome(json_env)
    assert outcome.status == "ok" and outcome.budget_delta == 5 + 8
    (reason,) = _over_limit(outcome.reasons)
    assert f"reported {REPORTED} completion tokens" in reason and "max_tokens of 8" in reason


@pytest.fixture(scope="module")
def stream_backend() -> Iterator[_StreamBackend]:
    made = _StreamBackend()
    yield made
    made.stop()


@pytest.fixture
def stream_env(tmp_path: Path, stream_backend: _StreamBackend) -> Iterator[Env]:
    usage = {"prompt_tokens": 5, "completion_tokens": REPORTED, "total_tokens": 5 + REPORTED}
    stream_backend.stream = (
        b"".join(_event([choice]) for choice in REASONING) + _event([], usage) + b"data: [DONE]\n\n"
    )
    yield from serve(tmp_path, stream_backend, "engine", Env)


def test_a_gateway_stream_over_max_tokens_is_charged_at_max_tokens(stream_env: Env) -> None:
    received = stream_env.exchange(stream_env.request(_json_body(stream=True)))
    assert received.startswith(b"HTTP/1.1 200") and b"[DONE]" in received
    assert stream_env.spent() == 5 + 8
    outcome = _outcome(stream_env)
    assert outcome.status == "ok" and outcome.budget_delta == 5 + 8
    assert len(_over_limit(outcome.reasons)) == 1


# --- the LangGraph middleware -------------------------------------------------------------------


class _Overreporting(ScriptedChatModel):
    """A chat model whose answers report far more output tokens than any limit."""

    def _generate(self, messages: Any, stop: Any = None, run_manager: Any = None, **kwargs: Any) -> Any:
        result = super()._generate(messages, stop, run_manager, **kwargs)
        message = result.generations[0].message
        assert isinstance(message, AIMessage)
        message.usage_metadata = {"input_tokens": 7, "output_tokens": REPORTED, "total_tokens": 7 + REPORTED}
        return result


def test_a_langgraph_model_call_over_max_tokens_is_charged_at_max_tokens(tmp_path: Path) -> None:
    team = _make_team(tmp_path)
    try:
        agent = create_gated_agent(team.gate, name="supervisor", model=_Overreporting(turns=[]), tools=[])
        result = agent.invoke({"messages": [{"role": "user", "content": "go"}]}, context=team.supervisor)
        assert result["messages"][-1].content == "Done."
        team.gate.flush()
        (outcome,) = [e for e in team.gate.audit.entries() if e.kind == "outcome"]
        # The middleware decides a model call with max_tokens 1024 (its default); one
        # micro-dollar a token in and out (test_langgraph's policy).
        assert outcome.status == "ok" and outcome.budget_delta == 7 + 1024
        assert len(_over_limit(outcome.reasons)) == 1
    finally:
        team.gate.close()


# --- a data-parallel vLLM server's metrics ------------------------------------------------------

DATA_PARALLEL = """\
vllm:num_requests_running{engine="0",model_name="m"} 3.0
vllm:num_requests_running{engine="1",model_name="m"} 2.0
vllm:num_requests_waiting{engine="0",model_name="m"} 4.0
vllm:num_requests_waiting{engine="1",model_name="m"} 1.0
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.5
vllm:kv_cache_usage_perc{engine="1",model_name="m"} 0.25
vllm:cache_config_info{block_size="16",engine="0",num_gpu_blocks="55000"} 1.0
vllm:cache_config_info{block_size="16",engine="1",num_gpu_blocks="55000"} 1.0
"""
"""A vLLM server with two data-parallel engines of 27,500 blocks each, as vLLM (0.9 and later)
publishes it: per-engine load gauges, and one ``cache_config_info`` sample per engine, each with
the front end's ``num_gpu_blocks``, which vLLM sums over the engines' own counts at their start
handshake (``wait_for_engine_startup``, vLLM PR 17600)."""


def test_a_data_parallel_vllm_servers_capacity_is_its_published_total_not_a_sum_of_copies() -> None:
    load = load_from_text(DATA_PARALLEL, "vllm")
    assert load.kv_capacity_tokens == 16 * 55000  # the server's whole cache, once
    assert (load.running, load.waiting) == (5.0, 5.0)  # summed over the engines
    # The mean of the engines' fractions: their caches are equal, so it is the server's fraction
    # of its whole cache in use (the router multiplies it by that whole capacity).
    assert load.kv_usage == pytest.approx(0.375)
