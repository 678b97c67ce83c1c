"""Review R88: ``LatencyModel.step_time`` and ``prefill_time`` took counts below 0 and returned
less than ``base_s`` (a step of negative time for a large one), though each promises never less.
A negative count is now refused with ``InputError`` naming the profile, the method and the count."""

from __future__ import annotations

import pytest

from agentgate.errors import InputError
from agentgate.sim import LLAMA_8B_H100


@pytest.mark.parametrize(
    ("counts", "says"),
    [
        ((-1, 0, 0, 0), "step_time's n_decode must be 0 or more, not -1"),
        ((0, -5, 0, 0), "step_time's decode_context must be 0 or more, not -5"),
        ((0, 0, -(10**6), 0), "step_time's prefill_tokens must be 0 or more, not -1000000"),
        ((0, 0, 0, -(10**5000)), "step_time's prefill_pairs must be 0 or more, not an integer of"),
    ],
)
def test_a_step_of_a_negative_count_is_refused(counts: tuple[int, int, int, int], says: str) -> None:
    with pytest.raises(InputError) as refused:
        LLAMA_8B_H100.step_time(*counts)
    assert str(refused.value).startswith(f"latency profile 'llama-3.1-8b@h100': {says}")


@pytest.mark.parametrize(("uncached", "cached", "name"), [(-10, 0, "uncached"), (10, -3, "cached")])
def test_a_prefill_of_a_negative_count_is_refused(uncached: int, cached: int, name: str) -> None:
    with pytest.raises(InputError) as refused:
        LLAMA_8B_H100.prefill_time(uncached, cached)
    assert f"prefill_time's {name} must be 0 or more" in str(refused.value)


def test_no_step_is_shorter_than_the_weight_read() -> None:
    assert LLAMA_8B_H100.step_time(0, 0, 0, 0) == LLAMA_8B_H100.base_s
    assert LLAMA_8B_H100.prefill_time(0) == LLAMA_8B_H100.base_s
    assert LLAMA_8B_H100.prefill_time(100, 50) > LLAMA_8B_H100.base_s
