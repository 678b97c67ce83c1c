"""Review R82: ``load_azure`` cut each ``TIMESTAMP`` at 26 characters before reading it, which
dropped a zone (``+01:00``) from a stamp with a fraction of a second and kept it on one without:
two rows half a second apart came out an hour apart. A stamp with a zone is read in it; one
without, on the trace's own clock (review R66), with the published trace's seven-digit fraction."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentgate.sim.traces import load_azure

_HEADER = "TIMESTAMP,ContextTokens,GeneratedTokens\n"


@pytest.mark.parametrize(
    ("first", "second", "apart"),
    [
        ("2023-11-16 18:15:46+01:00", "2023-11-16 18:15:46.500000+01:00", 0.5),
        ("2023-11-16 18:15:46.2500000+01:00", "2023-11-16 17:15:47.2500000+00:00", 1.0),
        ("2023-11-16 18:15:46.6805900", "2023-11-16 18:15:50.9951690", 4.314579),  # the published form
    ],
)
def test_arrivals_keep_each_stamps_zone(tmp_path: Path, first: str, second: str, apart: float) -> None:
    path = tmp_path / "azure.csv"
    path.write_text(f"{_HEADER}{first},100,10\n{second},100,10\n")
    rows = load_azure(path)
    assert [r.arrival for r in rows] == pytest.approx([0.0, apart]), rows
