"""Review R93 of the trace loaders' ``limit``: the first ``limit`` requests, an integer of 0 or more.

The loaders checked every row but not ``limit``: ``"2"`` was a bare ``TypeError`` from inside the
read loop, ``-1`` silently read nothing and ``1.5`` read two rows. Such a ``limit`` is now an
``InputError`` naming the argument, before the file is read.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from agentgate.errors import InputError
from agentgate.sim import load_trace

_MOONCAKE = b'{"timestamp": 0, "input_length": 5, "output_length": 1, "hash_ids": [0]}\n' * 3
_AZURE = b"TIMESTAMP,ContextTokens,GeneratedTokens\n" + b"2023-11-16 18:15:46.6805900,374,44\n" * 3


@pytest.fixture(params=[("t.jsonl", _MOONCAKE), ("t.csv", _AZURE)], ids=["mooncake", "azure"])
def trace(request: pytest.FixtureRequest, tmp_path: Path) -> Path:
    name, data = request.param
    path = tmp_path / name
    path.write_bytes(data)
    return path


@pytest.mark.parametrize(("limit", "said"), [(-1, "-1"), ("2", "'2'"), (1.5, "1.5"), (True, "True")])
def test_a_limit_that_is_no_count_of_requests_is_refused(trace: Path, limit: object, said: str) -> None:
    with pytest.raises(InputError, match=f"^limit must be None or an integer of 0 or more, not {said}$"):
        load_trace(trace, limit)  # type: ignore[arg-type]


@pytest.mark.parametrize(("limit", "rows"), [(None, 3), (0, 0), (2, 2), (5, 3)])
def test_a_limit_reads_that_many_requests_at_most(trace: Path, limit: int | None, rows: int) -> None:
    assert len(load_trace(trace, limit)) == rows
