"""``agentgate policy schema`` writes a file with ``--out`` as every other verb does (review R69):
until then its flag was ``--output``/``-o`` (``--out`` worked only as argparse's abbreviation of
it, named in neither ``--help`` nor docs/cli.md), and it wrote the file without a word where the
other verbs that write one say so."""

from __future__ import annotations

from pathlib import Path

import pytest
from _cli import cli

from agentgate.policy import json_schema_text


def test_out_writes_the_schema_and_says_so(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """Review R69: the schema was written without a word. It prints ``wrote FILE`` on stdout,
    as ``audit report --out`` does (stderr stays empty: a script reads it for errors)."""
    target = tmp_path / "policy.schema.json"
    code, out, err = cli(capsys, "policy", "schema", "--out", str(target))
    assert (code, err) == (0, "")
    assert target.read_text(encoding="utf-8") == json_schema_text()
    assert out == f"wrote {target}\n"


@pytest.mark.parametrize("flag", ["--output", "-o"])
def test_the_old_spellings_still_write_the_schema(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, flag: str
) -> None:
    """Review R69: ``--output`` and ``-o`` stay (scripts use them), and print the same line."""
    target = tmp_path / "s.json"
    code, out, err = cli(capsys, "policy", "schema", flag, str(target))
    assert (code, out, err) == (0, f"wrote {target}\n", "")
    assert target.read_text(encoding="utf-8") == json_schema_text()


def test_without_out_the_schema_alone_goes_to_stdout(capsys: pytest.CaptureFixture[str]) -> None:
    """Standard output holds the schema and nothing else, for ``> FILE``."""
    assert cli(capsys, "policy", "schema") == (0, json_schema_text(), "")


def test_help_names_out_first(capsys: pytest.CaptureFixture[str]) -> None:
    """Review R69: ``--help`` showed only ``--output FILE, -o FILE``."""
    code, out, _ = cli(capsys, "policy", "schema", "--help")
    assert code == 0 and "--out FILE" in out
