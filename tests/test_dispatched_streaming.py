"""Streaming through the dispatcher: ``Gate.dispatch_stream`` / ``adispatch_stream`` and the
middleware's ``DispatchedChatModel`` streaming its answer (docs/langgraph.md, Streaming).

Real backends on loopback: an ``agentgate.sim`` server (a real HTTP server with the calibrated
latency model) and ``EvilBackend`` (tests/test_dispatch_usage.py), which answers a stream of
whatever SSE events a test sets, for tool call fragments and garbage.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessageChunk, HumanMessage
from test_dispatch_usage import EvilBackend
from test_langgraph import _make_team, _tools

from agentgate.dispatch import inventory_from_mapping
from agentgate.dispatch.dispatcher import Dispatcher
from agentgate.dispatch.router import Router
from agentgate.errors import AgentGateError
from agentgate.gate import Gate
from agentgate.integrations.langgraph import DispatchedChatModel, create_gated_agent
from agentgate.sim import SimServer

POLICY = """
version: 1
tools:
  search.web: {}
"""

PAYLOAD = {"model": "llama-3.1-8b", "messages": [{"role": "user", "content": "hello"}], "max_tokens": 12}


def _gate(tmp_path: Path, url: str, *, metrics: bool = True) -> Gate:
    backend: dict[str, Any] = {"name": "b0", "url": url, "engine": "vllm", "models": ["llama-3.1-8b"]}
    if metrics:
        backend["metrics_url"] = url + "/metrics"
    inventory = inventory_from_mapping({"backends": [backend]})
    (tmp_path / "policy.yaml").write_text(POLICY)
    gate = Gate.open(tmp_path / "policy.yaml", store=str(tmp_path / "gate.db"))
    gate.attach_dispatcher(Dispatcher(inventory, Router(inventory)))
    return gate


def _until(condition: Callable[[], bool], what: str, seconds: float = 10.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"not within {seconds}s: {what}")
        time.sleep(0.01)


@pytest.fixture
def sim() -> Iterator[SimServer]:
    server = SimServer(time_scale=0.05).start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def evil() -> Iterator[EvilBackend]:
    made = EvilBackend()
    yield made
    made.stop()


def _live(server: SimServer) -> int:
    runner = server._runner
    return len(runner.live) if runner is not None else 0


def test_the_chunks_arrive_one_by_one_and_add_up_to_the_answer(tmp_path: Path, sim: SimServer) -> None:
    with _gate(tmp_path, sim.url) as gate:
        chunks = list(gate.dispatch_stream(PAYLOAD))
        whole = gate.dispatch(PAYLOAD)
    texts = [c for c in chunks if c.content]
    assert len(texts) == 12  # one event per generated token
    assert {c.backend for c in chunks} == {"b0"}
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 12
    # (the simulator ends each streamed token with a space, and joins them in a whole answer)
    assert "".join(c.content for c in chunks).strip() == whole.content.strip()


def test_leaving_a_stream_early_cancels_the_generation_on_the_backend(tmp_path: Path) -> None:
    server = SimServer(time_scale=1.0).start()  # real time: 2,000 tokens take seconds
    try:
        with _gate(tmp_path, server.url) as gate:
            stream = gate.dispatch_stream({**PAYLOAD, "max_tokens": 2000})
            assert next(stream).backend == "b0"
            assert _live(server) == 1
            stream.close()
            _until(lambda: _live(server) == 0, "the backend dropped the request")
            # The dispatcher's slot is free again: the next call is served at once.
            assert gate.dispatch(PAYLOAD).usage.completion_tokens == 12
    finally:
        server.stop()


def test_an_async_reader_that_stops_early_cancels_the_generation(tmp_path: Path) -> None:
    server = SimServer(time_scale=1.0).start()
    try:
        with _gate(tmp_path, server.url) as gate:

            async def read_two() -> list[str]:
                got: list[str] = []
                stream = gate.adispatch_stream({**PAYLOAD, "max_tokens": 2000})
                async for chunk in stream:
                    got.append(chunk.content)
                    if len(got) == 2:
                        break
                await stream.aclose()
                return got

            assert len(asyncio.run(read_two())) == 2
            _until(lambda: _live(server) == 0, "the backend dropped the request")
    finally:
        server.stop()


def test_a_cancelled_async_reader_cancels_the_generation(tmp_path: Path) -> None:
    server = SimServer(time_scale=1.0).start()
    try:
        with _gate(tmp_path, server.url) as gate:

            async def read_all() -> None:
                async for _ in gate.adispatch_stream({**PAYLOAD, "max_tokens": 2000}):
                    pass

            async def main() -> None:
                task = asyncio.create_task(read_all())
                await asyncio.sleep(0.3)
                task.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await task

            asyncio.run(main())
            _until(lambda: _live(server) == 0, "the backend dropped the request")
    finally:
        server.stop()


def test_closing_the_gate_ends_a_stream_being_read_with_a_typed_error(tmp_path: Path) -> None:
    server = SimServer(time_scale=1.0).start()
    try:
        gate = _gate(tmp_path, server.url)
        started = threading.Event()
        ended: list[BaseException | None] = []

        def read() -> None:
            try:
                for _ in gate.dispatch_stream({**PAYLOAD, "max_tokens": 2000}):
                    started.set()
                ended.append(None)
            except BaseException as exc:
                ended.append(exc)

        reader = threading.Thread(target=read)
        reader.start()
        assert started.wait(10)
        gate.close()
        reader.join(10)
        assert not reader.is_alive()
        assert len(ended) == 1 and isinstance(ended[0], AgentGateError), ended
        with pytest.raises(AgentGateError, match="closed"):
            next(gate.dispatch_stream(PAYLOAD))
    finally:
        server.stop()


def _event(delta: dict[str, Any], finish: str | None = None) -> str:
    return json.dumps({"id": "c1", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})


USAGE_EVENT = json.dumps({"id": "c1", "choices": [], "usage": {"prompt_tokens": 9, "completion_tokens": 4}})


def _model(gate: Gate) -> DispatchedChatModel:
    return DispatchedChatModel(gate=gate, model_name="llama-3.1-8b", max_tokens=32)


def _added_up(chunks: list[AIMessageChunk]) -> AIMessageChunk:
    whole = chunks[0]
    for chunk in chunks[1:]:
        whole = whole + chunk
    return whole


def test_streamed_tool_call_fragments_add_up_to_the_tool_calls(tmp_path: Path, evil: EvilBackend) -> None:
    with _gate(tmp_path, evil.url, metrics=False) as gate:
        evil.answer = [
            _event({"role": "assistant", "content": ""}),
            _event({"tool_calls": [{"index": 0, "id": "call-1", "function": {"name": "search_web"}}]}),
            _event({"tool_calls": [{"index": 0, "function": {"arguments": '{"query": '}}]}),
            _event({"tool_calls": [{"index": 0, "function": {"arguments": '"gpus"}'}}]}),
            _event(
                {"tool_calls": [{"index": 1, "id": "call-2", "function": {"name": "x", "arguments": "{"}}]}
            ),
            _event({}, finish="tool_calls"),
            USAGE_EVENT,
            "[DONE]",
        ]
        chunks = list(_model(gate).stream([HumanMessage("find")]))
    whole = _added_up(chunks)
    assert whole.tool_calls == [
        {"name": "search_web", "args": {"query": "gpus"}, "id": "call-1", "type": "tool_call"}
    ]
    # "{" is no JSON object: not a call with no arguments, as LangChain's partial parse would have it
    assert [(c["id"], c["name"], json.loads(c["args"] or "")) for c in whole.invalid_tool_calls] == [
        ("call-2", "x", "{")
    ]
    assert whole.usage_metadata == {"input_tokens": 9, "output_tokens": 4, "total_tokens": 13}
    assert whole.response_metadata["backend"] == "b0"  # named once, not once per chunk
    assert whole.response_metadata["finish_reason"] == "tool_calls"


def _usage_event(prompt: int, completion: int, delta: dict[str, Any] | None = None) -> str:
    choices = [] if delta is None else [{"index": 0, "delta": delta, "finish_reason": None}]
    usage = {"prompt_tokens": prompt, "completion_tokens": completion}
    return json.dumps({"id": "c1", "choices": choices, "usage": usage})


@pytest.mark.parametrize(
    "answer",
    [
        pytest.param(
            [
                _event({"content": "a"}),
                _usage_event(9, 1),
                _event({"content": "b"}, "stop"),
                _usage_event(9, 2),
            ],
            id="usage-said-twice",
        ),
        pytest.param(
            [_usage_event(9, 1, {"content": "a"}), _usage_event(9, 2, {"content": "b"}), _event({}, "stop")],
            id="usage-on-every-chunk",  # vLLM's continuous_usage_stats: each chunk the running total
        ),
    ],
)
def test_a_usage_reported_more_than_once_is_counted_once(
    tmp_path: Path, evil: EvilBackend, answer: list[str]
) -> None:
    """Review R54: each usage a backend reported was put on its chunk, and LangChain adds up the
    chunks' usage_metadata, so a usage said twice (or cumulative on every chunk) was counted twice.

    Rule: the added-up answer carries the last usage reported, the one the call is charged."""
    with _gate(tmp_path, evil.url, metrics=False) as gate:
        evil.answer = [*answer, "[DONE]"]
        chunks = list(_model(gate).stream([HumanMessage("hi")]))
    assert _added_up(chunks).content == "ab"
    assert _added_up(chunks).usage_metadata == {"input_tokens": 9, "output_tokens": 2, "total_tokens": 11}
    assert sum(chunk.usage_metadata is not None for chunk in chunks) == 1


@pytest.mark.parametrize(
    "fragment",
    [
        "call",
        {"index": "0", "function": "search"},
        {"index": True, "id": 5, "function": {"name": 3, "arguments": ["a"]}},
        {"index": 0, "function": None},
    ],
)
def test_garbage_tool_call_fragments_are_no_exception_and_no_tool_call(
    tmp_path: Path, evil: EvilBackend, fragment: Any
) -> None:
    with _gate(tmp_path, evil.url, metrics=False) as gate:
        evil.answer = [_event({"tool_calls": [fragment]}), _event({"content": "done"}, "stop"), "[DONE]"]
        try:
            chunks = list(_model(gate).stream([HumanMessage("find")]))
        except AgentGateError:
            return  # refused by the backend client as a malformed event: fine, typed
    whole = _added_up(chunks)
    assert whole.tool_calls == []
    assert whole.content == "done"


def test_the_async_model_stream_matches_the_sync_one(tmp_path: Path, sim: SimServer) -> None:
    with _gate(tmp_path, sim.url) as gate:
        model = _model(gate)
        sync = _added_up(list(model.stream([HumanMessage("hello")])))

        async def read() -> list[AIMessageChunk]:
            return [c async for c in model.astream([HumanMessage("hello")])]

        chunks = asyncio.run(read())
    assert len(chunks) > 2
    whole = _added_up(chunks)
    assert whole.content == sync.content
    assert whole.usage_metadata == sync.usage_metadata
    assert whole.response_metadata["backend"] == "b0"


def test_a_cut_off_tool_call_is_not_run_on_its_partial_arguments(tmp_path: Path, evil: EvilBackend) -> None:
    with _gate(tmp_path, evil.url, metrics=False) as gate:
        evil.answer = [
            _event(
                {"tool_calls": [{"index": 0, "id": "c", "function": {"name": "refund", "arguments": ""}}]}
            ),
            _event({"tool_calls": [{"index": 0, "function": {"arguments": '{"amount": 50'}}]}),
            _event({}, finish="length"),  # stopped at max_tokens: the amount may have been 5000
            "[DONE]",
        ]
        streamed = _added_up(list(_model(gate).stream([HumanMessage("refund")])))
        evil.answer = {
            "choices": [
                {
                    "message": {
                        "role": "assistant",
                        "content": None,
                        "tool_calls": [
                            {"id": "c", "function": {"name": "refund", "arguments": '{"amount": 50'}}
                        ],
                    },
                    "finish_reason": "length",
                }
            ]
        }
        whole = _model(gate).invoke([HumanMessage("refund")])
    assert streamed.tool_calls == whole.tool_calls == []
    assert (
        [c["id"] for c in streamed.invalid_tool_calls] == [c["id"] for c in whole.invalid_tool_calls] == ["c"]
    )


class ScriptedBackend(EvilBackend):
    """``EvilBackend`` answering each request with the next of ``turns`` (the last again once the
    others are used): a list of SSE data lines, or a JSON answer."""

    turns: list[Any]

    @property  # type: ignore[override]
    def answer(self) -> Any:
        return self.turns.pop(0) if len(self.turns) > 1 else self.turns[0]

    @answer.setter
    def answer(self, value: Any) -> None:
        self.turns = [value]


@pytest.fixture
def scripted() -> Iterator[ScriptedBackend]:
    made = ScriptedBackend()
    yield made
    made.stop()


def _answer(**message: Any) -> dict[str, Any]:
    return {
        "choices": [{"message": {"role": "assistant", "content": None, **message}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 7, "completion_tokens": 3},
    }


def _agent_run(
    tmp_path: Path, evil: ScriptedBackend, *, stream: bool, usages: int = 1
) -> tuple[list[str], list[tuple[int, int]], int]:
    usage = json.dumps({"choices": [], "usage": {"prompt_tokens": 7, "completion_tokens": 3}})
    call = {
        "id": "s-1",
        "type": "function",
        "function": {"name": "search", "arguments": '{"query": "kv cache"}'},
    }
    if stream:
        evil.turns = [
            [
                _event({"tool_calls": [{"index": 0, **call, "function": {"name": "search"}}]}),
                _event({"tool_calls": [{"index": 0, "function": {"arguments": '{"query": "kv'}}]}),
                _event({"tool_calls": [{"index": 0, "function": {"arguments": ' cache"}'}}]}),
                _event({}, finish="tool_calls"),
                *[usage] * usages,
                "[DONE]",
            ],
            [
                _event({"content": "the kv "}),
                _event({"content": "cache holds it"}, "stop"),
                *[usage] * usages,
                "[DONE]",
            ],
        ]
    else:
        evil.turns = [_answer(tool_calls=[call]), _answer(content="the kv cache holds it")]
    team = _make_team(tmp_path)
    try:
        backend = {"name": "evil", "url": evil.url, "engine": "vllm", "models": ["scripted"]}
        inventory = inventory_from_mapping({"backends": [backend]})
        team.gate.attach_dispatcher(Dispatcher(inventory, Router(inventory)))
        agent = create_gated_agent(
            team.gate,
            name="supervisor",
            model=GenericFakeChatModel(messages=iter([])),  # raises if called: the dispatcher serves
            tools=_tools(team),
            model_name="scripted",
            max_tokens=16,
        )
        request = {"messages": [{"role": "user", "content": "go"}]}
        if stream:
            pieces = [m for m, _ in agent.stream(request, context=team.supervisor, stream_mode="messages")]
            answer = [
                p.content for p in pieces if getattr(p, "response_metadata", {}).get("backend") == "evil"
            ]
            assert answer, "the model's chunks reached the consumer"
        else:
            agent.invoke(request, context=team.supervisor)
        # The last model call's outcome is committed by the background writer within linger_s
        # (docs/architecture.md): counted unflushed it was there or not by timing (7 or 6).
        team.gate.flush()
        entries = [e for e in team.gate.audit.entries() if e.kind in ("allow", "outcome")]
        assert team.gate.verify().first_bad_index is None
        return team.ran, sorted(team.gate.budget_usage(team.supervisor).values()), len(entries)
    finally:
        team.gate.close()


def test_an_agent_streamed_through_the_dispatcher_runs_and_spends_as_under_invoke(
    tmp_path: Path, scripted: ScriptedBackend
) -> None:
    streamed = _agent_run(tmp_path / "stream", scripted, stream=True)
    invoked = _agent_run(tmp_path / "invoke", scripted, stream=False)
    assert streamed[0] == ["search:kv cache"]
    assert streamed[1] == [(20, 1_000_000)]  # two model calls at their reported 10 tokens each
    assert streamed[2] == 7  # the allow, and an allow and an outcome for each of 3 calls
    assert streamed == invoked


def test_an_agent_streaming_a_usage_said_twice_is_charged_it_once(
    tmp_path: Path, scripted: ScriptedBackend
) -> None:
    """Review R54: the middleware charged a streamed call the sum of its chunks' usage, and each
    usage event a backend repeated was on a chunk of its own: charged twice.

    Rule: a streamed call is charged the usage reported, however often the backend said it."""
    streamed = _agent_run(tmp_path / "stream", scripted, stream=True, usages=2)
    assert streamed[1] == [(20, 1_000_000)]  # two model calls at their reported 10 tokens each


def test_a_stream_carries_the_callers_trace_to_the_backend(tmp_path: Path, sim: SimServer) -> None:
    from opentelemetry.sdk.trace import TracerProvider

    tracer = TracerProvider().get_tracer("test")
    with _gate(tmp_path, sim.url) as gate:
        with tracer.start_as_current_span("app") as span:
            list(gate.dispatch_stream(PAYLOAD))

        async def read() -> None:
            with tracer.start_as_current_span("app-async"):
                async for _ in gate.adispatch_stream(PAYLOAD):
                    pass

        asyncio.run(read())
    trace_id = format(span.get_span_context().trace_id, "032x")
    sent = [h.get("traceparent", "") for h in sim.trace_headers]
    assert len(sent) == 2 and sent[0].split("-")[1] == trace_id
    assert sent[1] and sent[1].split("-")[1] != trace_id  # the async reader's own trace


def test_arguments_sent_a_character_at_a_time_add_up(tmp_path: Path, evil: EvilBackend) -> None:
    arguments = json.dumps({"query": "x" * 3000, "note": "é\\n\u2028"})
    with _gate(tmp_path, evil.url, metrics=False) as gate:
        evil.answer = [
            _event({"tool_calls": [{"index": 7, "id": "c7", "function": {"name": "search_web"}}]}),
            *(_event({"tool_calls": [{"index": 7, "function": {"arguments": c}}]}) for c in arguments),
            _event({}, finish="tool_calls"),
            "[DONE]",
        ]
        whole = _added_up(list(_model(gate).stream([HumanMessage("find")])))
    assert whole.tool_calls == [
        {"name": "search_web", "args": json.loads(arguments), "id": "c7", "type": "tool_call"}
    ]
