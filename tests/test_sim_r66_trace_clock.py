"""Review R66 of the Azure trace loader: arrival times read in the machine's time zone.

An Azure trace's ``TIMESTAMP`` is a wall-clock time with no zone (``2023-11-16 18:15:46.68``).
``load_azure`` turned it into seconds with ``datetime.timestamp()``, which reads a naive time in
the local zone of the machine that loads it: on a machine whose zone changes its clocks during the
trace (daylight saving), the arrivals on either side of the change were an hour closer or further
apart than the trace says, so the same trace replayed with the same seed gave other outcomes on
another machine, and rows in the repeated hour of a change could not be told apart.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentgate.sim import load_trace

_HEADER = "TIMESTAMP,ContextTokens,GeneratedTokens\n"


@pytest.fixture
def zone(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The process's local time zone set to New York (whose clocks went forward an hour at
    02:00 on 2023-03-12 and back at 02:00 on 2023-11-05), and restored after."""
    monkeypatch.setenv("TZ", "America/New_York")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


@pytest.mark.parametrize(
    ("first", "second", "apart"),
    [
        ("2023-03-12 01:59:59.000000", "2023-03-12 03:00:01.000000", 3602.0),
        ("2023-11-05 01:30:00.000000", "2023-11-05 02:30:00.000000", 3600.0),
    ],
    ids=["spring-forward", "fall-back"],
)
def test_arrivals_are_the_traces_wall_clock_apart_in_any_local_zone(
    tmp_path: Path, zone: None, first: str, second: str, apart: float
) -> None:
    """Review R66: in New York's zone, two rows 3,602 s apart on the trace's clock (01:59:59 and
    03:00:01 on the night the clocks go forward) arrived 2 s apart, and two rows an hour apart on
    the night they go back arrived two hours apart; the replay's outcomes depended on the zone of
    the machine. Arrivals are now the trace's own clock differences, in every zone."""
    path = tmp_path / "azure.csv"
    path.write_text(f"{_HEADER}{first},100,10\n{second},100,10\n")
    a, b = load_trace(path)
    assert b.arrival - a.arrival == pytest.approx(apart)
