"""Review R84 (regression): the fix that refused an ``--out`` ending in a separator
(``newdir/``) left ``--out newdir/.``, which ``Path`` reads as ``newdir`` too: ``policy schema``
still replaced a file named ``newdir`` with the schema (exit 0). Every ``--out`` whose last part
is empty, ``.`` or ``..`` names a directory and is now refused (exit 2, one line naming it),
writing nothing."""

from __future__ import annotations

from pathlib import Path

import pytest
from _cli import cli
from test_policy_r84_out_names_a_directory import OUT_FLAGS

DIRECTORY_NAMES = ["newdir/.", "newdir/..", ".", "..", "newdir/./."]


@pytest.mark.parametrize("name", DIRECTORY_NAMES)
@pytest.mark.parametrize("argv", OUT_FLAGS, ids=" ".join)
def test_an_out_whose_last_part_is_a_dot_is_refused_naming_it(
    argv: list[str],
    name: str,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "newdir").write_text("mine\n", encoding="utf-8")
    code, out, err = cli(capsys, *argv, name)
    last = name.rpartition("/")[2]
    assert code == 2 and out == "", (code, out, err)
    assert err.splitlines()[-1].endswith(
        f"{name} has {last!r} as its last part: that names a directory; name the file to write in it"
    ), err
    assert [p.name for p in tmp_path.iterdir()] == ["newdir"]
    assert (tmp_path / "newdir").read_text(encoding="utf-8") == "mine\n"


def test_a_name_that_only_starts_with_a_dot_is_still_written(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    for name in (".schema.json", "..schema"):
        assert cli(capsys, "policy", "schema", "--out", name) == (0, f"wrote {name}\n", "")
        assert (tmp_path / name).is_file()
