"""Review R87: the engine and the replay took a request's fields unchecked. ``Engine.add`` refused
a prompt under one token, but NaN is not under one: it was queued, its steps took NaN seconds,
and a replay of it never returned. A prompt of 2.5 tokens failed the engine's first step with a
bare ``TypeError`` (a slice index), and an arrival of ``10**400`` was a bare ``OverflowError``
from ``math.isfinite``. Each is now an ``InputError`` naming the request and the field, and the
replay replays nothing."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping

import pytest

from agentgate.errors import InputError
from agentgate.sim import LLAMA_8B_H100, Engine, SimRequest, replay
from agentgate.sim._des import Send
from agentgate.sim.traces import TraceRequest

_MOST_SCRAPES = 1000


class _SendAllBounded:
    """Sends every request to ``b``; fails past a thousand scrapes instead of waiting for a replay
    that does not return."""

    def __init__(self) -> None:
        self.scrapes = 0
        self.routed: list[str] = []

    def route(self, request: TraceRequest, now: float) -> Send:
        self.routed.append(request.id)
        return Send("b")

    def first_token(self, backend: str, request: TraceRequest, now: float) -> None: ...
    def finished(self, backend: str, request: TraceRequest, now: float) -> None: ...

    def observe(self, backend: str, metrics: Mapping[str, float], now: float) -> None:
        self.scrapes += 1
        assert self.scrapes < _MOST_SCRAPES, "the replay does not return"


@pytest.mark.parametrize("prompt", [math.nan, 2.5, True, "100"])
def test_the_engine_refuses_a_prompt_length_that_is_no_integer(prompt: object) -> None:
    engine = Engine(LLAMA_8B_H100)
    with pytest.raises(InputError, match=r"request 'a': prompt_tokens must be an integer"):
        engine.add(SimRequest("a", prompt, 4))  # type: ignore[arg-type]
    assert not engine.has_work()


def test_the_engine_refuses_an_output_length_that_is_no_integer() -> None:
    engine = Engine(LLAMA_8B_H100)
    with pytest.raises(InputError, match=r"request 'a': output_tokens must be an integer, not nan"):
        engine.add(SimRequest("a", 100, math.nan))  # type: ignore[arg-type]
    assert not engine.has_work()


def test_a_huge_prompt_length_is_refused_by_its_size() -> None:
    """A count Python cannot write (past 4,300 digits) is quoted by its size, not a ValueError."""
    with pytest.raises(
        InputError, match=r"a prompt of a number of tokens \d+ bits long and an output of 4 tokens"
    ):
        Engine(LLAMA_8B_H100).add(SimRequest("a", 10**5000, 4))


_GOOD = TraceRequest("ok", 0.0, 100, 4)


@pytest.mark.parametrize(
    ("field", "value", "named"),
    [
        ("prompt_tokens", math.nan, "prompt_tokens must be an integer, not nan"),
        ("prompt_tokens", 2.5, "prompt_tokens must be an integer, not 2.5"),
        ("output_tokens", True, "output_tokens must be an integer of 0 or more, not True"),
        ("arrival", 10**400, "arrival must be a finite number of seconds, not an integer of 1329 bits"),
        ("arrival", "0", "arrival must be a finite number of seconds, not a str"),
        ("block_tokens", 0, "block_tokens must be an integer of 1 or more, not 0"),
        ("priority", 1.5, "priority must be an integer of 0 or more, not 1.5"),
        ("hashes", "12", "hashes must be a sequence of integers"),
        ("hashes", (1, "x"), "hashes must be a sequence of integers"),
        ("tenant", None, "tenant must be text, not None"),
        ("session", 7, "session must be text or None, not 7"),
        ("slo_ttft_s", math.nan, "slo_ttft_s must be a positive number of seconds (inf: none), not nan"),
        ("slo_ttft_s", 0, "slo_ttft_s must be a positive number of seconds (inf: none), not 0"),
    ],
)
def test_the_replay_refuses_a_malformed_request_and_replays_nothing(
    field: str, value: object, named: str
) -> None:
    bad = dataclasses.replace(TraceRequest("bad", 1.0, 100, 4), **{field: value})
    router = _SendAllBounded()
    with pytest.raises(InputError) as refused:
        replay([_GOOD, bad], {"b": Engine(LLAMA_8B_H100)}, router)  # type: ignore[arg-type]
    message = str(refused.value)
    assert message.startswith("request 'bad': ") and named in message
    assert router.routed == [] and router.scrapes == 0


def test_the_replay_refuses_a_request_of_another_type_or_id() -> None:
    router = _SendAllBounded()
    with pytest.raises(InputError, match=r"requests\[1\] must be a TraceRequest, not a dict"):
        replay([_GOOD, {"id": "x"}], {"b": Engine(LLAMA_8B_H100)}, router)  # type: ignore[list-item]
    with pytest.raises(InputError, match=r"requests\[0\]: id must be text, not 5"):
        replay([dataclasses.replace(_GOOD, id=5)], {"b": Engine(LLAMA_8B_H100)}, router)  # type: ignore[arg-type]
    assert router.routed == []


def test_a_well_formed_trace_is_still_served() -> None:
    """The checks take every field the loaders and ``benchmarks/dispatch.py`` give."""
    trace = [_GOOD, TraceRequest("next", 0.5, 10, 0, (1, 2), 16, "s1", "t0", 0, 0.25)]
    outcomes = replay(trace, {"b": Engine(LLAMA_8B_H100)}, _SendAllBounded())  # type: ignore[arg-type]
    assert [o.rejected for o in outcomes] == [None, None]
    assert all(o.finished_at is not None for o in outcomes)
