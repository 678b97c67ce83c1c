"""Review R60 of the Mooncake trace loader (agentgate/sim/traces.py): a row with more block ids
than its prompt has blocks.

Every row of the published trace has one ``hash_ids`` entry per 512-token block of its
``input_length`` (the last partial). A row with more was loaded, each id hashed although the
engine reads none past the prompt: five million ids for a 10-token prompt (a 15 MB line) took
15 s and 430 MB. Such a row is now refused, naming the file and line, before any id is hashed.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agentgate.errors import InputError
from agentgate.sim.traces import load_trace


def _trace(tmp_path: Path, *rows: dict[str, object]) -> Path:
    path = tmp_path / "trace.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def _row(input_length: int, ids: int) -> dict[str, object]:
    return {"timestamp": 0, "input_length": input_length, "output_length": 4, "hash_ids": list(range(ids))}


@pytest.mark.parametrize(("input_length", "ids"), [(10, 2), (512, 2), (1025, 4), (0, 1), (10, 100_000)])
def test_a_row_with_more_block_ids_than_its_prompt_has_blocks_is_refused(
    tmp_path: Path, input_length: int, ids: int
) -> None:
    """Review R60: a Mooncake row's hash_ids were hashed whatever their number, beyond the
    prompt's blocks (a 10-token prompt with five million ids: 15 s, 430 MB)."""
    path = _trace(tmp_path, _row(512, 1), _row(input_length, ids))
    blocks = -(-input_length // 512)
    with pytest.raises(InputError) as refused:
        load_trace(path)
    assert str(refused.value) == (
        f"{path}:2: malformed trace row: hash_ids has {ids} block ids, but an input_length of "
        f"{input_length} tokens has {blocks} blocks of 512"
    )


@pytest.mark.parametrize(("input_length", "ids"), [(10, 1), (512, 1), (513, 2), (1025, 3), (1025, 1), (0, 0)])
def test_a_row_with_at_most_one_id_per_block_loads(tmp_path: Path, input_length: int, ids: int) -> None:
    """As the published trace's rows (exactly one id per block), or fewer."""
    (request,) = load_trace(_trace(tmp_path, _row(input_length, ids)))
    assert request.prompt_tokens == input_length and len(request.hashes) == ids
