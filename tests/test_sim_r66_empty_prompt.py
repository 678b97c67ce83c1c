"""Review R66 of the engine: a request with an empty prompt.

``Engine.add`` refused a negative prompt length but took a prompt of 0 tokens. Its prefill was a
chunk of 0 tokens, which took nothing from the step's token budget: any number of such requests
(up to ``max_num_seqs``) were admitted in one step and each had its first token from it, a
forward pass over none of their tokens, whatever ``max_num_batched_tokens`` said. vLLM refuses an
empty prompt at its API ("The decoder prompt cannot be empty"); a trace row of 0 input tokens
(which the loaders read as data) is now refused by the engine, and the replay records it as
rejected, as it does a request past the KV capacity.
"""

from __future__ import annotations

import pytest
from test_sim_trace_loaders import _SendAll

from agentgate.errors import InputError
from agentgate.sim import LLAMA_8B_H100, Engine, EngineConfig, SimRequest, replay
from agentgate.sim.traces import TraceRequest


def test_an_empty_prompt_is_refused_when_added() -> None:
    """Review R66: 50 requests of 0 prompt tokens on an engine with a budget of 4 tokens a step
    were all admitted in its first step and all had their first token from it."""
    engine = Engine(LLAMA_8B_H100, EngineConfig(max_num_batched_tokens=4, max_num_seqs=64))
    with pytest.raises(InputError, match="'empty': a prompt of 0 tokens"):
        engine.add(SimRequest("empty", 0, 2))
    assert not engine.has_work()


def test_a_trace_row_with_an_empty_prompt_is_rejected_by_the_replay() -> None:
    """Review R66: the replay served it (a first token for no work); now it is rejected and the
    request after it is served."""
    trace = [TraceRequest("empty", 0.0, 0, 5), TraceRequest("next", 0.1, 10, 2)]
    empty, served = replay(trace, {"b": Engine(LLAMA_8B_H100)}, _SendAll())  # type: ignore[arg-type]
    assert empty.rejected is not None and "0 tokens" in empty.rejected and empty.first_token_at is None
    assert served.rejected is None and served.finished_at is not None
