"""Review R83 of the trace loaders: a file that opens with a UTF-8 byte order mark.

Excel and PowerShell save a CSV as UTF-8 with a byte order mark. The loaders decoded each line as
plain UTF-8, so the mark stayed in the first column's name (``\\ufeffTIMESTAMP``) and an Azure
trace so saved was refused as "malformed trace row: 'TIMESTAMP'" (a Mooncake JSONL one as a JSON
error). The mark is now dropped from the first line, as ``utf-8-sig`` reads it; one anywhere else
is data, as before.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from agentgate.errors import InputError
from agentgate.sim import load_trace

BOM = b"\xef\xbb\xbf"
AZURE = (
    b"TIMESTAMP,ContextTokens,GeneratedTokens\n"
    b"2023-11-16 18:15:46.6805900,374,44\n"
    b"2023-11-16 18:15:50.9951690,396,109\n"
)
MOONCAKE = (
    b'{"timestamp": 0, "input_length": 600, "output_length": 5, "hash_ids": [1, 2]}\n'
    b'{"timestamp": 250, "input_length": 10, "output_length": 2, "hash_ids": [3]}\n'
)


@pytest.mark.parametrize(("name", "body"), [("t.csv", AZURE), ("t.jsonl", MOONCAKE)])
def test_a_trace_saved_with_a_byte_order_mark_reads_as_without(
    tmp_path: Path, name: str, body: bytes
) -> None:
    """Review R83: the Azure CSV was refused as "malformed trace row: 'TIMESTAMP'"."""
    plain, marked = tmp_path / f"plain-{name}", tmp_path / f"marked-{name}"
    plain.write_bytes(body)
    marked.write_bytes(BOM + body)
    assert load_trace(marked) == load_trace(plain)
    assert [r.prompt_tokens for r in load_trace(marked)] == [r.prompt_tokens for r in load_trace(plain)] != []


def test_a_byte_order_mark_past_the_first_line_is_still_data(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    first, second = MOONCAKE.splitlines(keepends=True)
    path.write_bytes(first + BOM + second)
    with pytest.raises(InputError, match=f"{path}:2: malformed trace row"):
        load_trace(path)
