"""Review R85: ``benchmarks/dispatch.py --plot`` was used only after every replay, so a path it
could not write (a place no file can be made, an extension matplotlib does not write) ended the
run with a traceback and no JSON line, its figures lost; and ``--plot DIR`` was written as
``DIR.png`` but printed as ``plot: DIR``. The path is now checked before anything is read or
replayed (argparse's one line, status 2), and the run prints the file it wrote."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_benchmarks_r57_contract import _load

MOONCAKE = (
    Path(__file__).resolve().parents[2] / "shared" / "data" / "traces" / "mooncake_conversation_trace.jsonl"
)


def _refused(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    with pytest.raises(SystemExit) as ended:
        _load("dispatch").main(argv)
    assert ended.value.code == 2
    out, err = capsys.readouterr()
    assert not out and "Traceback" not in err
    return err.splitlines()[-1]


@pytest.mark.parametrize(
    ("name", "says"),
    [
        ("p.svgx", "matplotlib writes no '.svgx' file; name one of .eps"),
        ("a-file/p.png", "is not a directory"),
        ("a-dir.png", "a-dir.png' is a directory"),
    ],
)
def test_a_plot_path_it_cannot_write_is_refused_before_any_replay(
    name: str, says: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "a-file").write_text("kept\n")
    (tmp_path / "a-dir.png").mkdir()
    plot = tmp_path / name
    # a trace that is not there: a run that got past --plot would say so instead
    line = _refused(["--trace", str(tmp_path / "missing.jsonl"), "--plot", str(plot)], capsys)
    assert "error: argument --plot: " in line, line
    assert says in line, line
    assert (tmp_path / "a-file").read_text() == "kept\n"


def test_a_plot_path_under_a_place_no_file_can_be_made_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    line = _refused(["--trace", "/proc/agentgate-r85/t.jsonl", "--plot", "/proc/agentgate-r85/p.png"], capsys)
    assert "error: argument --plot: cannot write '/proc/agentgate-r85/p.png' (" in line, line


def test_a_plot_path_without_an_extension_is_written_as_png_and_printed_as_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    plot = tmp_path / "pdir"
    plot.mkdir()
    argv = [
        "--trace",
        str(MOONCAKE),
        "--limit",
        "20",
        "--load",
        "0.9",
        "--backends",
        "1",
        "--plot",
        str(plot),
    ]
    assert _load("dispatch").main(argv) == 0
    out = capsys.readouterr().out.splitlines()
    assert f"plot: {tmp_path / 'pdir.png'}" in out
    assert (tmp_path / "pdir.png").stat().st_size > 0 and not list(plot.iterdir())
    assert json.loads(out[-1])["benchmark"] == "dispatch"
