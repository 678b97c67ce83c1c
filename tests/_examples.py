"""Running an example the way ``python examples/NAME.py`` runs it, inside the test's own process
(the imports of langgraph and langchain are made once per worker, not once per run)."""

from __future__ import annotations

import runpy
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def run_example(path: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    """Run the example at ``path`` as ``__main__``: its exit status as the shell would see it, and
    what it printed to stdout and stderr. ``sys.path`` is restored afterwards (the example puts
    examples/ on it); an exception the example lets out, which a person would see as a traceback,
    fails the test."""
    path_before = list(sys.path)
    capsys.readouterr()
    try:
        runpy.run_path(str(path), run_name="__main__")
        status = 0
    except SystemExit as exit:
        if isinstance(exit.code, str):  # sys.exit(message) prints it and ends with 1
            print(exit.code, file=sys.stderr)
        status = 0 if exit.code is None else exit.code if isinstance(exit.code, int) else 1
    finally:
        sys.path[:] = path_before
    printed = capsys.readouterr()
    return status, printed.out, printed.err
