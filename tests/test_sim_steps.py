"""Fixes to the simulated backend.

A request preempted by a full KV cache is recomputed: the step that finishes its prompt again
samples its next token, but that step reported it neither as a first token nor as decoded, so the
HTTP server's runner, which hands each request's token count to its handler from those lists, did
not pass the token on. When that token was the request's last, the stream ended one content chunk
short of the ``completion_tokens`` its usage reported; otherwise the token left a step late.

The Mooncake loader refused a timestamp of ``Infinity`` naming its line, but an integer timestamp
too large for a float escaped as an ``OverflowError`` traceback.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from agentgate.errors import InputError
from agentgate.sim import LLAMA_8B_H100, Engine, EngineConfig, SimRequest, load_trace


def test_a_step_reports_every_token_it_gives_also_after_a_recompute() -> None:
    # 64 tokens of KV: two 20-token prompts decoding side by side fill it; the newer is preempted
    # with 13 of its 14 tokens, and the step that recomputes its prompt samples its last token.
    engine = Engine(LLAMA_8B_H100, EngineConfig(kv_capacity_tokens=64))
    first, second = SimRequest("a", 20, 14), SimRequest("b", 20, 14)
    engine.add(first)
    engine.add(second)
    reported = {"a": 0, "b": 0}
    finished: dict[str, int] = {}
    now = 0.0
    while engine.has_work():
        result = engine.step(now)
        now += result.duration
        for request in (*result.first_token, *result.decoded):
            reported[request.id] = request.generated
        for request in result.finished:
            finished[request.id] = request.generated
    assert second.preemptions == 1
    assert finished == {"a": 14, "b": 14}
    assert reported == finished


def test_a_mooncake_timestamp_too_large_for_a_float_is_refused_naming_its_line(tmp_path: Path) -> None:
    """An integer timestamp beyond any float (float() raises OverflowError) was a traceback."""
    path = tmp_path / "t.jsonl"
    row = b'{"timestamp": 1' + b"0" * 400 + b', "input_length": 5, "output_length": 1, "hash_ids": [0]}\n'
    path.write_bytes(b'{"timestamp": 0, "input_length": 5, "output_length": 1, "hash_ids": [0]}\n' + row)
    with pytest.raises(InputError, match=r"t\.jsonl:2: malformed trace row: timestamp must be a finite"):
        load_trace(path)
