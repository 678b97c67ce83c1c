"""Review R92 of benchmarks/audit.py's append table: the latency the audit log adds per entry is
printed with its own sign ("-1197 us/entry", never "+-1197"), and the rounds alternate which
contender of each pair is timed first (the bare INSERT always was)."""

from __future__ import annotations

from benchmarks.audit import per_entry, round_order


def test_added_latency_is_printed_with_its_own_sign() -> None:
    assert per_entry(-1197.4) == "-1197 us/entry"
    assert per_entry(120.0) == "+120 us/entry"
    assert per_entry(0.0) == "+0 us/entry"


def test_each_round_times_every_contender_once() -> None:
    for index in range(4):
        assert sorted(round_order(index)) == ["append", "append_group", "bare", "bare_group"]


def test_the_side_timed_first_alternates_between_rounds() -> None:
    even, odd = round_order(0), round_order(1)
    assert even.index("bare") < even.index("append") and odd.index("append") < odd.index("bare")
    assert even.index("bare_group") < even.index("append_group")
    assert odd.index("append_group") < odd.index("bare_group")
    assert round_order(2) == even and round_order(3) == odd
