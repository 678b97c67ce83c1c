"""benchmarks/router_line.py measures the line full and the line empty in turns (so neither is
only measured in a colder process; until a second regression review of R91 the empty line went
first, and the ratio, 0.87x, came from that order), and times slots taken by waiters of the line,
which leave it (until then only calls of class 0 from outside the line took the freed slots)."""

from __future__ import annotations

import json

import pytest

from benchmarks import router_line


def test_the_short_and_long_lines_are_measured_in_turns_and_the_median_kept() -> None:
    order: list[int] = []

    def measure(waiting: int, calls: int) -> float:
        order.append(waiting)
        return float(waiting + len(order))

    short, long = router_line._paired(measure, 0, 10, 1, 4)
    assert order == [0, 10, 10, 0, 0, 10, 10, 0]
    assert (short, long) == (4.5, 14.5)  # medians of (1, 4, 5, 8) and (12, 13, 16, 17)


def test_waiters_of_the_line_take_the_freed_slots_and_the_line_keeps_its_length() -> None:
    assert router_line.per_taken_s(64, 40) > 0  # raises SystemExit if a named waiter was not dispatched


def test_the_json_line_names_the_goal_of_slots_taken_from_the_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    router_line.main(["--waiting", "20", "--calls", "8", "--repeat", "1", "--json"])
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["benchmark"] == "router_line"
    assert set(result["goals"]) == {
        "waiting_over_empty",
        "allowed_sets_over_empty",
        "taken_from_line_over_short",
        "declined_over_one",
    }
    assert result["figures"]["taken_from_line_short"] == router_line.SHORT
