"""``agentgate budget settle`` takes a reservation id of 32 lower-case hexadecimal digits, as the
store makes them and ``budget held`` lists them, and docs/cli.md says so (review R87: it said
"32 hexadecimal digits", and the same id in upper case is refused, exit 2)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from _cli import cli

ROOT = Path(__file__).resolve().parents[1]


def test_an_upper_case_reservation_id_is_refused_naming_lower_case(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = str(tmp_path / "agentgate.db")
    assert cli(capsys, "store", "init", "--store", store)[0] == 0
    assert cli(capsys, "audit", "checkpoint", "--store", store)[0] == 0  # the log key settle signs with
    code, out, err = cli(capsys, "budget", "settle", "ABCDEF0123456789" * 2, "--ran", "--store", store)
    assert (code, out) == (2, ""), (code, out, err)
    assert "a reservation id is 32 lower-case hexadecimal digits" in err


def test_the_cli_reference_says_the_settled_id_is_lower_case() -> None:
    page = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    settle = page[page.index("- `agentgate budget settle ID") :]
    settle = settle[: settle.index("\n- `")]
    said = re.findall(r"2 for an ID that is\s+not (32 [\w-]+ hexadecimal digits)", settle)
    assert said == ["32 lower-case hexadecimal digits"]
