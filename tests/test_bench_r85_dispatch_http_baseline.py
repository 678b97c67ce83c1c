"""Review R85: ``benchmarks/dispatch_http.py --baseline TREE`` took any path, and a tree that was
not there ended the run with a FileNotFoundError traceback (``Popen(cwd=TREE)``) once the
simulated backend and both gateways had started. A TREE holding no ``agentgate/cli/main.py`` now
ends it before anything starts, with argparse's one line and status 2."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from test_benchmarks_r57_contract import ROOT, _load


@pytest.mark.parametrize("tree", ["missing", "empty", "a file", "too long"])
def test_a_baseline_that_is_no_source_tree_ends_with_one_line_before_anything_starts(
    tree: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    path = {
        "missing": tmp_path / "missing",
        "empty": tmp_path,
        "a file": tmp_path / "a-file",
        "too long": tmp_path / ("d" * 300),
    }[tree]
    (tmp_path / "a-file").write_text("")
    monkeypatch.setattr(sys, "argv", ["dispatch_http.py", "--rounds", "1", "--baseline", str(path)])
    with pytest.raises(SystemExit) as ended:
        _load("dispatch_http").main()
    assert ended.value.code == 2
    out, err = capsys.readouterr()
    assert not out and "Traceback" not in err
    assert err.splitlines()[-1].endswith(
        f"error: argument --baseline: not a source tree of agentgate (no agentgate/cli/main.py in it): {str(path)!r}"
    )


def test_a_checkout_is_a_source_tree() -> None:
    assert _load("dispatch_http")._source_tree(str(ROOT)) == ROOT.resolve()
