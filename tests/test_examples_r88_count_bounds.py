"""Review R88: ``audit.py --entries`` and ``tasks.py --calls`` and ``--opcodes`` took any whole
number, however many digits: a run as long as the number said, every entry or call in memory. They
now take 1 to 10,000,000 entries, 8 to 1,000,000 calls and 0 to 100,000 opcode-counted calls, and
refuse another with argparse's one line, the number cut at 60 characters, and status 2."""

from __future__ import annotations

import sys

import pytest
from test_benchmarks_r57_contract import _load

HUGE = "9" * 400


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (
            ["--calls", HUGE],
            "argument --calls: must be 8 or more and 1,000,000 or less (calls held in memory at once)",
        ),
        (["--calls", "1000001"], "argument --calls: must be 8 or more and 1,000,000 or less"),
        (["--calls", "3"], "argument --calls: must be 8 or more and 1,000,000 or less"),
        (["--opcodes", HUGE], "argument --opcodes: must be 0 or more and 100,000 or less"),
    ],
)
def test_tasks_refuses_a_count_past_its_bound(
    args: list[str], says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as ended:
        _load("tasks").main(["--quick", "--json", *args])
    assert ended.value.code == 2
    out, err = capsys.readouterr()
    last = err.splitlines()[-1]
    assert not out and says in last and len(last) < 250, last


@pytest.mark.parametrize("entries", [HUGE, "10000001"])
def test_audit_refuses_an_entry_count_past_its_bound(
    entries: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(sys, "argv", ["audit.py", "--quick", "--json", "--entries", entries])
    with pytest.raises(SystemExit) as ended:
        _load("audit").main()
    assert ended.value.code == 2
    out, err = capsys.readouterr()
    last = err.splitlines()[-1]
    assert not out and len(last) < 250, last
    assert (
        "argument --entries: must be 1 or more and 10,000,000 or less (entries held in memory at once)"
        in last
    )


def test_the_bounds_themselves_are_taken() -> None:
    tasks, audit = _load("tasks"), _load("audit")
    assert tasks.MAX_CALLS == 1_000_000 and tasks.MAX_OPCODE_CALLS == 100_000
    assert audit.MAX_ENTRIES == 10_000_000
