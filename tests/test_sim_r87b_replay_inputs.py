"""Review R87b: review R87's checks of a replay's requests (``_check_request``) refused what
replays had taken before: ``hashes`` as a list, an ``slo_ttft_s`` of ``inf`` (no SLO), and a
negative prompt, which the engine refuses as it refuses an empty one, a rejected outcome
(docs/simulation.md), not the whole replay. They are taken again; the rest of R87's checks
stand."""

from __future__ import annotations

import dataclasses
import math

import pytest
from test_sim_r87_request_fields import _GOOD, _SendAllBounded
from test_sim_r87c_trace_token_bound import _INVENTORY

from agentgate.dispatch.router import Router
from agentgate.errors import InputError
from agentgate.sim import LLAMA_8B_H100, Engine, EngineConfig, replay
from agentgate.sim.routing import PolicyDispatcher
from agentgate.sim.traces import TraceRequest, chain_hashes


@pytest.mark.parametrize("prompt", [0, -1, -(10**30)])
def test_a_prompt_under_one_token_is_a_rejected_outcome_not_a_refused_replay(prompt: int) -> None:
    bad = dataclasses.replace(_GOOD, id="bad", prompt_tokens=prompt)
    good, rejected = replay([_GOOD, bad], {"b": Engine(LLAMA_8B_H100)}, _SendAllBounded())  # type: ignore[arg-type]
    assert good.rejected is None and good.finished_at is not None
    assert rejected.rejected is not None and "an empty prompt cannot be served" in rejected.rejected


def test_hashes_as_a_list_are_read_as_the_tuple() -> None:
    hashes = chain_hashes(range(6))
    engines = {"b": Engine(LLAMA_8B_H100)}
    first = TraceRequest("a", 0.0, 100, 4, hashes=hashes, block_tokens=16)
    second = TraceRequest("b", 1.0, 100, 4, hashes=list(hashes), block_tokens=16)  # type: ignore[arg-type]
    outcomes = replay([first, second], engines, _SendAllBounded())  # type: ignore[arg-type]
    assert [o.rejected for o in outcomes] == [None, None]
    assert outcomes[1].cached_tokens == 96  # the list's blocks were the tuple's


def test_an_slo_of_infinity_is_no_slo_for_the_router() -> None:
    trace = [dataclasses.replace(_GOOD, id=str(i), arrival=i / 10, slo_ttft_s=math.inf) for i in range(3)]
    engines = {"b": Engine(LLAMA_8B_H100, EngineConfig(block_tokens=16))}
    outcomes = replay(trace, engines, PolicyDispatcher(Router(_INVENTORY, block_tokens=16), "m"))
    assert [o.rejected for o in outcomes] == [None, None, None]


@pytest.mark.parametrize(
    ("slo", "shown"), [(-math.inf, "-inf"), (10**400, "an integer of 1329 bits")], ids=["-inf", "10**400"]
)
def test_an_slo_below_zero_or_past_a_float_is_still_refused(slo: object, shown: str) -> None:
    bad = dataclasses.replace(_GOOD, slo_ttft_s=slo)
    with pytest.raises(InputError) as refused:
        replay([bad], {"b": Engine(LLAMA_8B_H100)}, _SendAllBounded())  # type: ignore[arg-type]
    assert str(refused.value) == (
        f"request 'ok': slo_ttft_s must be a positive number of seconds (inf: none), not {shown}"
    )
