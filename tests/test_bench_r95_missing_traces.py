"""Review R95: `make bench` in a checkout without the project's shared folder beside it (a clone
from GitHub): benchmarks/dispatch.py's default traces (../shared/data/traces/) are not there, so it
ended with status 2, and the recipe's ``|| exit 1`` stopped every benchmark after it. Now dispatch.py
is skipped with a line naming it, the missing files and where they come from, the others run, and
the command ends with status 0; a benchmark that fails (traces that are there but unusable
included) fails the command, at the end, naming it. Run in a scratch checkout: the Makefile, the
real dispatch.py, and two stand-in benchmarks around it in the loop's order."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from test_examples_r59_make_demo import _installed

ROOT = Path(__file__).resolve().parents[1]
TRACES = ("mooncake_conversation_trace.jsonl", "AzureLLMInferenceTrace_conv.csv")

if shutil.which("make") is None:
    pytest.skip("make is not installed", allow_module_level=True)


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    """A checkout in ``tmp_path/checkout``, installed as `make test` leaves it, with nothing beside
    it: its ``../shared`` is ``tmp_path/shared``. Its python is this one."""
    repo = tmp_path / "checkout"
    (repo / "benchmarks").mkdir(parents=True)
    for name in ("Makefile", "pyproject.toml"):
        shutil.copy(ROOT / name, repo / name)
        os.utime(repo / name, (0, os.path.getmtime(repo / name) - 3600))
    _installed(repo, ".installed", ".installed-demo")
    python = repo / ".venv" / "bin" / "python"
    python.write_text(f'#!/bin/sh\nexec {sys.executable} "$@"\n')
    python.chmod(0o755)
    for name in ("dispatch.py", "_args.py"):
        shutil.copy(ROOT / "benchmarks" / name, repo / "benchmarks" / name)
    return repo


def _benchmark(checkout: Path, name: str, status: int) -> None:
    (checkout / "benchmarks" / name).write_text(
        f"import sys\nprint('{name} ran with', *sys.argv[1:])\nsys.exit({status})\n"
    )


def _make_bench(checkout: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}  # agentgate, for dispatch.py
    return subprocess.run(
        ["make", "--no-print-directory", "bench"],
        cwd=checkout,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_missing_traces_skip_dispatch_with_a_line_and_the_others_still_run(checkout: Path) -> None:
    _benchmark(checkout, "a_first.py", 0)
    _benchmark(checkout, "z_last.py", 0)
    done = _make_bench(checkout)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "a_first.py ran with --json" in done.stdout and "z_last.py ran with --json" in done.stdout
    assert "dispatch.py ran" not in done.stdout and "Traceback" not in done.stderr
    [skipped] = [
        line for line in done.stderr.splitlines() if line.startswith("make bench: skipped benchmarks/")
    ]
    assert skipped.startswith("make bench: skipped benchmarks/dispatch.py: its traces are missing (")
    for name in TRACES:
        assert str(checkout.parent / "shared" / "data" / "traces" / name) in skipped
    assert "../shared/data/traces/" in skipped and 'docs/dispatch.md, "Benchmark"' in skipped
    assert done.stderr.splitlines()[-1] == "make bench: skipped (traces missing): benchmarks/dispatch.py"


def test_a_failing_benchmark_fails_make_bench_once_the_others_have_run(checkout: Path) -> None:
    _benchmark(checkout, "a_first.py", 3)
    _benchmark(checkout, "z_last.py", 0)
    done = _make_bench(checkout)
    assert done.returncode != 0
    assert "z_last.py ran with --json" in done.stdout
    assert "make bench: failed: benchmarks/a_first.py" in done.stderr.splitlines()


def test_traces_that_are_there_are_replayed_and_their_failure_fails_make_bench(checkout: Path) -> None:
    """dispatch.py is skipped only where a trace is missing: with both there it runs (here a
    stand-in that reads the same paths and fails as the real one does on an unusable trace, since
    the real replay takes seconds), and its failure is a failure, not a skip."""
    traces = checkout.parent / "shared" / "data" / "traces"
    traces.mkdir(parents=True)
    for name in TRACES:
        (traces / name).write_text("")
    (checkout / "benchmarks" / "dispatch.py").write_text(
        "import sys\nfrom pathlib import Path\n"
        "TRACES = Path(__file__).resolve().parents[2] / 'shared' / 'data' / 'traces'\n"
        f"DEFAULT_TRACES = [TRACES / name for name in {TRACES!r}]\n"
        "if __name__ == '__main__':\n"
        "    print('dispatch.py ran with', *sys.argv[1:])\n"
        "    sys.exit('dispatch: no requests to replay')\n"
    )
    _benchmark(checkout, "z_last.py", 0)
    done = _make_bench(checkout)
    assert done.returncode != 0
    assert "dispatch.py ran with --json" in done.stdout and "z_last.py ran with --json" in done.stdout
    assert "skipped" not in done.stderr
    assert "make bench: failed: benchmarks/dispatch.py" in done.stderr.splitlines()


def test_readme_and_the_benchmarks_page_say_where_the_traces_and_vectors_come_from() -> None:
    """Review R95: no page said that the traces and the RFC 6962 vectors are read from
    ``../shared`` beside the checkout (``grep -rln shared/data README.md docs/`` found none)."""
    readme = " ".join((ROOT / "README.md").read_text().split("## Using it", 1)[0].split())
    assert "`../shared/data/traces/`" in readme and "`../shared/vectors/rfc6962/`" in readme
    page = (ROOT / "docs" / "dispatch.md").read_text().split("## Benchmark\n", 1)[1].split("\n### ", 1)[0]
    for name in TRACES:
        assert f"`../shared/data/traces/{name}`" in page
    assert "`make bench`" in page and "skips this benchmark" in page
