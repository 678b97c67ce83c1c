"""Review R73, fuzzing what a backend answers, through the dispatcher, over real HTTP on 127.0.0.1.

The earlier hostile-backend tests (test_dispatch_r61_backend_garbage.py, r62_hostile_answers,
r68_usage_garbage) send hand-picked garbage. Here hypothesis draws it: a valid OpenAI answer (whole,
or a stream of SSE events) with a value anywhere in it replaced by another JSON value (wrong types,
huge integers, text beyond ASCII, deep nesting) or its key removed, its bytes cut short or changed,
its line ends mixed. Property: ``Dispatcher.chat`` and ``Dispatcher.stream`` answer what they can
read as OpenAI's shape, or raise a ``DispatchError`` naming the backend, on one line, bounded;
never another exception, never a stream taken as whole without its ``[DONE]``, and the router
holds nothing in flight after.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from test_dispatch_r61_backend_garbage import NAME, PAYLOAD, Garbage, dispatcher_of
from test_gateway_hostile_backends import _SSE, _json

from agentgate.dispatch._answers import MAX_FINISH_REASON_CHARS, ChatChunk, ChatResult, Usage
from agentgate.errors import DispatchError

pytest_plugins = ["test_dispatch_r61_backend_garbage"]  # its ``garbage`` fixture

_FUZZ = settings(
    max_examples=25,
    derandomize=True,
    deadline=None,
    database=None,
    suppress_health_check=[
        HealthCheck.function_scoped_fixture,
        HealthCheck.too_slow,
        HealthCheck.filter_too_much,
        HealthCheck.data_too_large,
    ],
)

_WHOLE: dict[str, Any] = {
    "id": "c",
    "object": "chat.completion",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}],
    "usage": {"prompt_tokens": 5, "completion_tokens": 2, "prompt_tokens_details": {"cached_tokens": 1}},
}


def _event(text: str, reason: str | None = None) -> dict[str, Any]:
    return {"id": "c", "choices": [{"index": 0, "delta": {"content": text}, "finish_reason": reason}]}


_STREAM: list[Any] = [
    {"id": "c", "choices": [{"index": 0, "delta": {"role": "assistant"}, "finish_reason": None}]},
    _event("hel"),
    _event("lo", "stop"),
    {"id": "c", "choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 2}},
]

_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.sampled_from([0, -1, 2**53 + 1, 2**63, 2**64, 10**30, 1_000_000_001]),
    st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from([0.5, -0.0, 1e300, 5e-324, 3.0]),
    st.text(max_size=12),
    st.sampled_from(["stop", "length", "x" * 65, "stop\x1b[2J", "\u202eevil", "\ud800", "[DONE]", "1e999"]),
)
_VALUES = st.recursive(
    _SCALARS,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=8,
)


def _paths(value: object, path: tuple[object, ...] = ()) -> Iterator[tuple[object, ...]]:
    """Every path to a value inside ``value`` (the root included)."""
    yield path
    if isinstance(value, dict):
        for key, inner in value.items():
            yield from _paths(inner, (*path, key))
    elif isinstance(value, list):
        for index, inner in enumerate(value):
            yield from _paths(inner, (*path, index))


def _replaced(value: Any, path: tuple[object, ...], new: object, remove: bool) -> Any:
    """``value`` with what ``path`` leads to replaced by ``new`` (or removed, where it can be)."""
    if not path:
        return new
    head, rest = path[0], path[1:]
    if isinstance(value, dict):
        copy = dict(value)
        if remove and not rest:
            copy.pop(head, None)
        else:
            copy[head] = _replaced(value[head], rest, new, remove)
        return copy
    copy_list = list(value)
    assert isinstance(head, int)
    if remove and not rest:
        del copy_list[head]
    else:
        copy_list[head] = _replaced(value[head], rest, new, remove)
    return copy_list


@st.composite
def _mutated(draw: st.DrawFn, value: object, values: st.SearchStrategy[object] = _VALUES) -> object:
    """``value`` with up to three of its values replaced by one of ``values`` (JSON values), or
    removed."""
    for _ in range(draw(st.integers(0, 3))):
        path = draw(st.sampled_from(list(_paths(value))))
        value = _replaced(value, path, draw(values), draw(st.booleans()))
    return value


def _dumped(value: object) -> bytes:
    """``value`` as JSON; a lone surrogate as its escape (JSON allows it, UTF-8 cannot hold it)."""
    return json.dumps(value, ensure_ascii=False).encode("utf-8", "backslashreplace")


@st.composite
def _bytes_changed(draw: st.DrawFn, body: bytes) -> bytes:
    """``body`` as it is, cut short, with bytes overwritten, or with bytes put in."""
    how = draw(st.sampled_from(["as_is", "as_is", "cut", "overwrite", "insert"]))
    if how == "as_is" or not body:
        return body
    at = draw(st.integers(0, len(body) - 1))
    if how == "cut":
        return body[:at]
    piece = draw(st.binary(min_size=1, max_size=4))
    if how == "overwrite":
        return body[:at] + piece + body[at + len(piece) :]
    return body[:at] + piece + body[at:]


def _refused_as_typed(caught: BaseException) -> None:
    """A refusal is a ``DispatchError`` naming the backend, on one line, bounded."""
    assert isinstance(caught, DispatchError), repr(caught)
    text = str(caught)
    assert f"{NAME}: " in text, text
    assert len(text) < 2000 and "\n" not in text, text


def _well_formed_result(result: ChatResult) -> None:
    assert result.backend == NAME and isinstance(result.content, str)
    assert isinstance(result.usage, Usage)
    reason = result.finish_reason
    assert reason is None or (isinstance(reason, str) and len(reason) <= MAX_FINISH_REASON_CHARS)
    assert reason is None or reason.isprintable()


def _well_formed_chunk(chunk: ChatChunk) -> None:
    assert chunk.backend == NAME and isinstance(chunk.content, str)
    assert chunk.usage is None or isinstance(chunk.usage, Usage)
    assert all(isinstance(call, dict) for call in chunk.tool_calls)
    reason = chunk.finish_reason
    assert reason is None or (isinstance(reason, str) and len(reason) <= MAX_FINISH_REASON_CHARS)


async def _chat(garbage: Garbage) -> ChatResult | BaseException:
    async with dispatcher_of(garbage.url) as (dispatcher, router):
        try:
            result: ChatResult | BaseException = await dispatcher.chat(PAYLOAD)
        except Exception as exc:  # the property judges what it is
            result = exc
        assert router.states[NAME].in_flight == 0
    return result


async def _stream(garbage: Garbage) -> tuple[list[ChatChunk], BaseException | None]:
    chunks: list[ChatChunk] = []
    async with dispatcher_of(garbage.url) as (dispatcher, router):
        try:
            async for chunk in dispatcher.stream({**PAYLOAD, "stream": True}):
                chunks.append(chunk)
            failure: BaseException | None = None
        except Exception as exc:  # the property judges what it is
            failure = exc
        assert router.states[NAME].in_flight == 0
    return chunks, failure


@_FUZZ
@given(data=st.data())
def test_a_whole_answer_changed_is_read_as_openai_shaped_or_refused_naming_the_backend(
    garbage: Garbage, data: st.DataObject
) -> None:
    """Review R73: a non-streamed answer with values replaced or removed, its bytes cut or changed,
    is a ``ChatResult`` of OpenAI's shape (text content, a usage of counts, a short printable
    finish reason) or a ``DispatchError`` naming the backend on one line: never another exception."""
    body = data.draw(_bytes_changed(_dumped(data.draw(_mutated(_WHOLE)))))
    garbage.reply = _json(body)
    outcome = asyncio.run(_chat(garbage))
    event(f"outcome: {type(outcome).__name__}")
    if isinstance(outcome, ChatResult):
        _well_formed_result(outcome)
    else:
        _refused_as_typed(outcome)


@st.composite
def _streamed(draw: st.DrawFn) -> tuple[bytes, bool]:
    """An SSE stream of OpenAI's events, some changed, with comments, mixed line ends, maybe its
    ``[DONE]`` left out and its bytes cut; and whether it holds a ``data: [DONE]`` line."""
    events = [draw(_mutated(event)) if draw(st.booleans()) else event for event in _STREAM]
    lines = [b"data: " + _dumped(event) for event in events]
    if draw(st.booleans()):
        lines.insert(
            draw(st.integers(0, len(lines))), draw(st.sampled_from([b": ping", b"event: x", b"id: 7"]))
        )
    if draw(st.booleans()):
        lines.insert(draw(st.integers(0, len(lines))), draw(st.binary(max_size=20)))
    if draw(st.booleans()):
        lines.append(b"data: [DONE]")
    end = draw(st.sampled_from([b"\n\n", b"\r\n\r\n", b"\r\r", b"\n"]))
    body = draw(_bytes_changed(b"".join(line + end for line in lines)))
    done = any(line.strip() == b"data: [DONE]" for line in body.replace(b"\r", b"\n").split(b"\n"))
    return body, done


@_FUZZ
@given(stream=_streamed())
def test_a_stream_changed_is_read_as_openai_chunks_or_refused_naming_the_backend(
    garbage: Garbage, stream: tuple[bytes, bool]
) -> None:
    """Review R73: a streamed answer with events changed, lines of garbage, mixed line ends, its
    ``[DONE]`` left out or its bytes cut, yields chunks of OpenAI's shape and then ends, only if
    it held ``[DONE]``, or raises a ``DispatchError`` naming the backend on one line."""
    body, done = stream
    garbage.reply = _SSE + body
    chunks, failure = asyncio.run(_stream(garbage))
    event(f"outcome: {type(failure).__name__}, {'some' if chunks else 'no'} chunks")
    for chunk in chunks:
        _well_formed_chunk(chunk)
    if failure is None:
        assert done, body
    else:
        _refused_as_typed(failure)
