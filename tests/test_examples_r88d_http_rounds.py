"""Review R88d: ``benchmarks/dispatch_http.py --rounds`` and ``--warmup`` took any whole number
(``positive_int``, ``non_negative_int``), so one of many digits ran ``range(warmup + rounds)``
without end. They take 1 to ``MAX_ROUNDS`` and 0 to ``MAX_WARMUP`` now (``whole_up_to``, as the
other benchmarks' counts; docs/gateway.md) and refuse another with argparse's one line, the number
cut at 60 characters, and status 2, before anything starts."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import pytest
from test_benchmarks_r57_contract import _load

DOCS = Path(__file__).resolve().parents[1] / "docs"
HTTP = _load("dispatch_http")


def _refusal(argv: list[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> str:
    monkeypatch.setattr(sys, "argv", ["dispatch_http.py", *argv])
    parse = argparse.ArgumentParser.parse_args

    def parse_only(parser: argparse.ArgumentParser, *args: Any, **kwargs: Any) -> argparse.Namespace:
        # Taken, the run would start (and one of 4,000 digits never end): the test ends it.
        raise AssertionError(f"taken: {parse(parser, *args, **kwargs)}")

    monkeypatch.setattr(argparse.ArgumentParser, "parse_args", parse_only)
    with pytest.raises(SystemExit) as ended:
        HTTP.main()
    assert ended.value.code == 2
    out, err = capsys.readouterr()
    assert not out and "Traceback" not in err
    return err.splitlines()[-1]


@pytest.mark.parametrize("value", ["9" * 4000, "100001", "0", "-1"])
def test_rounds_past_the_cap_end_with_one_line(
    value: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    last = _refusal(["--rounds", value], monkeypatch, capsys)
    says = "error: argument --rounds: must be 1 or more and 100,000 or less (measured rounds, "
    assert says in last and len(last) < 250, last


@pytest.mark.parametrize("value", ["9" * 4000, "10001", "-1"])
def test_warmup_past_the_cap_ends_with_one_line(
    value: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    last = _refusal(["--warmup", value], monkeypatch, capsys)
    assert "error: argument --warmup: must be 0 or more and 10,000 or less (unmeasured rounds): " in last
    assert len(last) < 250, last


def test_the_caps_are_documented() -> None:
    assert (HTTP.MAX_ROUNDS, HTTP.MAX_WARMUP) == (100_000, 10_000)
    text = " ".join((DOCS / "gateway.md").read_text().split())
    assert "`--rounds` 1 to 100,000" in text and "`--warmup` 0 to 10,000" in text
