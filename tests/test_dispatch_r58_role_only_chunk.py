"""A stream whose backend fails after a first chunk that carries only the role is failed over, as
one that fails before any chunk is: on the dispatcher, in process (``DispatchedChatModel``) and
through the gateway (review R58).

Real HTTP on 127.0.0.1: a raw backend (``Hostile``, tests/test_gateway_hostile_backends.py)
listed under several names, which opens its first streamed answers with the role alone and cuts
them there, then answers as a healthy backend does.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from langchain_core.messages import HumanMessage
from test_dispatched_streaming import POLICY, _added_up
from test_gateway_end_to_end import _body
from test_gateway_hostile_backends import _SSE, Env, Hostile, _settled
from test_gateway_r57_charges import BACKENDS, _all_in_service, _three_names

from agentgate.dispatch import inventory_from_mapping
from agentgate.dispatch.dispatcher import MAX_HELD_CHUNKS, Dispatcher
from agentgate.dispatch.router import Router
from agentgate.errors import BackendFailed
from agentgate.gate import Gate
from agentgate.integrations.langgraph import DispatchedChatModel

OPENINGS = {
    "role_alone": {"role": "assistant"},
    "role_and_empty_content": {"role": "assistant", "content": ""},  # vLLM's first chunk
}
PAYLOAD = {"model": "m", "messages": [{"role": "user", "content": "hello"}], "max_tokens": 8}


def _opening(delta: dict[str, str]) -> bytes:
    event = {"id": "c", "choices": [{"index": 0, "delta": delta, "finish_reason": None}]}
    return b"data: " + json.dumps(event).encode() + b"\n\n"


class OpensThenCuts(Hostile):
    """A backend whose first ``cuts`` streamed answers are ``opening`` then the end of the
    connection (no ``[DONE]``: a stream that broke); later ones are healthy (``Hostile``'s ``ok``:
    ``hi``, a usage of 5 and 1 tokens, ``[DONE]``). ``streams`` counts the streamed calls."""

    def __init__(self) -> None:
        super().__init__()
        self.opening = b""
        self.cuts = 0
        self.streams = 0

    async def _answer(self, w: asyncio.StreamWriter, r: asyncio.StreamReader, stream: bool) -> bool:
        if not stream:
            return await super()._answer(w, r, stream)
        self.streams += 1
        if self.streams > self.cuts:
            return await super()._answer(w, r, stream)
        w.write(_SSE + self.opening)
        await w.drain()
        return False


@pytest.fixture
def backend() -> Iterator[OpensThenCuts]:
    made = OpensThenCuts()
    yield made
    made.close()


def _dispatcher(url: str, names: tuple[str, ...], model: str = "m") -> Dispatcher:
    inventory = inventory_from_mapping(
        {"backends": [{"name": name, "url": url, "engine": "vllm", "models": [model]} for name in names]}
    )
    return Dispatcher(inventory, Router(inventory))


@pytest.mark.parametrize("opening", sorted(OPENINGS))
async def test_a_stream_that_breaks_after_the_role_alone_fails_over(
    backend: OpensThenCuts, opening: str
) -> None:
    """Review R58, Dispatcher.stream took a first chunk of the role alone for delivered output.

    A backend that sent ``{"role": "assistant"}`` (vLLM: with ``"content": ""``) and then broke
    ended the call with ``BackendFailed`` ("broke after output") instead of failing it over:
    nothing the caller can use had been delivered. The call now goes to the next backend, and
    the caller sees that backend's chunks only (no role chunk of the one that broke)."""
    backend.opening, backend.cuts = _opening(OPENINGS[opening]), 1
    async with _dispatcher(backend.url, ("first", "second")) as dispatcher:
        chunks = [chunk async for chunk in dispatcher.stream(PAYLOAD)]
        assert backend.streams == 2
        assert "".join(c.content for c in chunks) == "hi"
        served = {c.backend for c in chunks}
        assert len(served) == 1 and dispatcher.is_down(({"first", "second"} - served).pop())
        assert [c.usage.completion_tokens for c in chunks if c.usage is not None] == [1]


async def test_the_role_is_passed_on_with_the_first_output(backend: OpensThenCuts) -> None:
    """The rule's other side: a healthy stream's chunks without output are held back, not
    dropped: the opening role comes first, with the first output, in the backend's order."""
    content = b'data: {"choices":[{"index":0,"delta":{"content":"a"}}]}\n\n'
    backend.opening = _opening(OPENINGS["role_alone"]) + content + b"data: [DONE]\n\n"
    backend.cuts = 1
    async with _dispatcher(backend.url, ("only",)) as dispatcher:
        chunks = [chunk async for chunk in dispatcher.stream(PAYLOAD)]
    assert [c.event["choices"][0]["delta"].get("role") for c in chunks] == ["assistant", None]
    assert [c.content for c in chunks] == ["", "a"]


async def test_a_stream_of_chunks_without_output_is_not_held_without_bound(backend: OpensThenCuts) -> None:
    """Chunks without output are held back at most ``MAX_HELD_CHUNKS`` at a time: past that, the
    stream counts as delivered (a backend that chatters without output holds no more), and a
    failure after it is no longer failed over."""
    backend.opening, backend.cuts = _opening(OPENINGS["role_alone"]) * MAX_HELD_CHUNKS, 1
    async with _dispatcher(backend.url, ("first", "second")) as dispatcher:
        got = []
        with pytest.raises(BackendFailed, match="broke after output"):
            async for chunk in dispatcher.stream(PAYLOAD):
                got.append(chunk)
        assert backend.streams == 1 and len(got) == MAX_HELD_CHUNKS


@pytest.mark.parametrize("how", ["sync", "async"])
def test_a_dispatched_chat_model_stream_fails_over_after_the_role_alone(
    tmp_path: Path, backend: OpensThenCuts, how: str
) -> None:
    """Review R58, the same in process: ``DispatchedChatModel`` (``Gate.dispatch_stream``) raised
    ``BackendFailed`` for a stream that broke after the role alone; it now gets the answer of
    the backend failed over to, named on its first chunk."""
    backend.opening, backend.cuts = _opening(OPENINGS["role_alone"]), 1
    (tmp_path / "policy.yaml").write_text(POLICY)
    with Gate.open(tmp_path / "policy.yaml", store=str(tmp_path / "gate.db")) as gate:
        dispatcher = _dispatcher(backend.url, ("first", "second"), "llama-3.1-8b")
        gate.attach_dispatcher(dispatcher)
        model = DispatchedChatModel(gate=gate, model_name="llama-3.1-8b", max_tokens=8)
        if how == "sync":
            chunks = list(model.stream([HumanMessage("hi")]))
        else:

            async def collect() -> list[object]:
                return [chunk async for chunk in model.astream([HumanMessage("hi")])]

            chunks = asyncio.run(collect())
        whole = _added_up(chunks)
        named = whole.response_metadata["backend"]
        assert not dispatcher.is_down(named) and dispatcher.is_down(({"first", "second"} - {named}).pop())
    assert whole.content == "hi"
    assert backend.streams == 2
    assert whole.usage_metadata == {"input_tokens": 5, "output_tokens": 1, "total_tokens": 6}


@pytest.fixture(scope="module")
def gateway_backend() -> Iterator[OpensThenCuts]:
    made = OpensThenCuts()
    yield made
    made.close()


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory, gateway_backend: OpensThenCuts) -> Iterator[Env]:
    with _three_names(tmp_path_factory.mktemp("r58-role"), gateway_backend) as made:
        yield made


def test_the_gateway_fails_a_stream_over_after_the_role_alone(
    env: Env, gateway_backend: OpensThenCuts
) -> None:
    """Review R58, the gateway answered 200, passed on the role, then ended the stream with an
    error event (the call released) when the backend broke after the role alone; it now fails
    the call over and streams the next backend's answer, charged its reported usage."""
    _all_in_service(env)
    gateway_backend.opening = _opening(OPENINGS["role_and_empty_content"])
    gateway_backend.cuts, gateway_backend.streams = 1, 0
    spent, count = env.spent(), len(env.outcomes())
    answer = env.post(_body(stream=True))
    assert answer.status_code == 200, answer.text
    assert '"error"' not in answer.text, answer.text
    assert answer.text.count('"role":"assistant"') == 1 and '"content":"hi"' in answer.text
    assert gateway_backend.streams == 2
    assert sum(env.server.gateway.dispatcher.is_down(name) for name in BACKENDS) == 1
    outcome = _settled(env, count + 1)[-1]
    assert outcome.status == "ok", outcome
    assert env.spent() == spent + 5 + 1  # the usage reported: 5 prompt and 1 completion tokens
