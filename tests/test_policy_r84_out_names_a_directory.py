"""Review R84: ``agentgate policy schema --out newdir/`` wrote the schema to a regular file named
``newdir`` (``Path`` drops the trailing separator), replacing a file there, and said ``wrote
newdir/``. A name that ends in a separator names a directory, as the shell reads it: every
``--out`` of the command line refuses it (exit 2, one line naming it), writing nothing. The test
walks the real parser, so that an ``--out`` added later is held to it too."""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from pathlib import Path

import pytest
from _cli import cli

from agentgate.cli.main import build_parser
from agentgate.policy import json_schema_text


def _verbs(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _out_flags() -> Iterator[list[str]]:
    """``[group, verb, --out]`` for each verb that writes a file at ``--out`` (and its aliases)."""
    for group, parser in _verbs(build_parser()).items():
        for verb, verb_parser in (_verbs(parser) or {"": parser}).items():
            for action in verb_parser._actions:
                if action.dest == "out":
                    for flag in action.option_strings:
                        yield [group, *([verb] if verb else []), flag]


OUT_FLAGS = list(_out_flags())


def test_the_walk_finds_every_out_flag() -> None:
    assert ["policy", "schema", "-o"] in OUT_FLAGS and ["audit", "prove", "--out"] in OUT_FLAGS
    assert ["grant", "delegate", "--out"] in OUT_FLAGS and ["approval", "sign", "--out"] in OUT_FLAGS


@pytest.mark.parametrize("argv", OUT_FLAGS, ids=" ".join)
def test_an_out_that_ends_in_a_separator_is_refused_naming_it(
    argv: list[str], capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    code, out, err = cli(capsys, *argv, "newdir/")
    assert code == 2 and out == "", (code, out, err)
    assert err.splitlines()[-1].endswith(
        "newdir/ ends in '/': that names a directory; name the file to write in it"
    ), err
    assert list(tmp_path.iterdir()) == []


def test_schema_out_leaves_a_file_of_that_name_as_it_was(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """Review R84: the file ``newdir`` was replaced by the schema."""
    kept = tmp_path / "newdir"
    kept.write_text("mine\n", encoding="utf-8")
    code, _, err = cli(capsys, "policy", "schema", "--out", f"{kept}/")
    assert code == 2 and "names a directory" in err, err
    assert kept.read_text(encoding="utf-8") == "mine\n"


def test_schema_out_into_a_directory_by_the_files_name_still_writes(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    (tmp_path / "newdir").mkdir()
    target = tmp_path / "newdir" / "policy.schema.json"
    assert cli(capsys, "policy", "schema", "--out", str(target)) == (0, f"wrote {target}\n", "")
    assert target.read_text(encoding="utf-8") == json_schema_text()
