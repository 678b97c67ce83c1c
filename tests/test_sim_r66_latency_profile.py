"""Review R66 of ``LatencyModel``: a profile whose coefficients are no step time.

A ``LatencyModel`` took any coefficients. One that is NaN or infinite made every step's duration
NaN or infinite, and ``replay`` never returned (its event queue ordered by NaN times); a
negative one made steps take negative time, and requests had their first token before they
arrived (``step_time`` promises "never less than ``base_s``", which only holds for coefficients
of 0 or more). A KV capacity of 0 was a bare ``ValueError`` from the cache, when the engine was made.
"""

from __future__ import annotations

import dataclasses
import threading
from typing import Any

import pytest
from test_sim_trace_loaders import _SendAll

from agentgate.errors import InputError
from agentgate.sim import LLAMA_8B_H100, PROFILES, Engine, replay
from agentgate.sim.traces import TraceRequest

_BAD = [
    ("base_s", float("nan")),
    ("prefill_token_s", float("inf")),
    ("base_s", -1.0),
    ("attention_pair_s", -1e-9),
    ("decode_seq_s", "0.1"),
    ("kv_read_s", True),
    ("kv_capacity_tokens", 0),
    ("kv_capacity_tokens", 1000.5),
]


@pytest.mark.parametrize(("field", "value"), _BAD, ids=[f"{f}={v!r}" for f, v in _BAD])
def test_a_profile_whose_coefficients_are_no_step_time_is_refused_naming_it(field: str, value: Any) -> None:
    """Review R66: ``LatencyModel(base_s=nan)`` (or an infinite coefficient) was taken and a replay
    on it never returned; ``base_s=-1`` gave first tokens a second before their requests arrived;
    text, a bool and a fractional or zero KV capacity were taken too (0 failed later, as a bare
    ``ValueError``). Each is now an ``InputError`` naming the profile and the field."""
    with pytest.raises(InputError, match=rf"'llama-3.1-8b@h100'.*{field}"):
        dataclasses.replace(LLAMA_8B_H100, **{field: value})


def test_a_profile_with_coefficients_of_zero_replays() -> None:
    """Review R66 (checked, right already): 0 is a step time (the bound is 0 or more, not more
    than 0): a replay on a profile with no base returns, every first token after its arrival."""
    model = dataclasses.replace(LLAMA_8B_H100, base_s=0.0)  # 0 is a step time: no hang, no time travel
    done: dict[str, Any] = {}

    def run() -> None:
        trace = [TraceRequest("a", 0.0, 100, 5), TraceRequest("c", 0.01, 100, 5)]
        done["out"] = replay(trace, {"b": Engine(model)}, _SendAll())  # type: ignore[arg-type]

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(30)
    assert "out" in done
    assert all(o.first_token_at is not None and o.first_token_at >= o.request.arrival for o in done["out"])


def test_every_built_in_profile_is_valid() -> None:
    """Review R66 (checked, right already): the shipped profiles pass the new check."""
    for model in PROFILES.values():
        assert dataclasses.replace(model) == model
