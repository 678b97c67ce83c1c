"""``audit show --since`` takes a prefix of the entry time format only when some time begins with
it (review R88): before, only its shape was checked, and month 13, February 31 or hour 99 were
compared with the entries' times as text, exit 0."""

from __future__ import annotations

from pathlib import Path

import pytest
from _cli import cli


@pytest.fixture
def store(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> str:
    path = str(tmp_path / "s.db")
    code, _, err = cli(capsys, "store", "init", "--store", path)
    assert code == 0, err
    code, _, err = cli(capsys, "audit", "checkpoint", "--store", path)  # the log's key, beside it
    assert code == 0, err
    return path


@pytest.mark.parametrize(
    "since",
    ["2026-13-45", "2026-02-31", "2027-02-29", "2026-12-07T99:99", "2099-99", "2026-2", "2026-02-3", "0000"],
)
def test_a_prefix_no_time_begins_with_is_refused(
    since: str, store: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = cli(capsys, "audit", "show", "--store", store, "--since", since)
    assert code == 2
    assert out == ""
    assert f"argument --since: no time begins with {since!r}" in err


@pytest.mark.parametrize(
    "since", ["2", "2026", "2026-1", "2026-04-3", "2028-02-29", "2026-12-07T2", "2026-12-07T23:59:59.1234"]
)
def test_a_prefix_of_a_time_is_read(since: str, store: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = cli(capsys, "audit", "show", "--store", store, "--since", since)
    assert code == 0, err
