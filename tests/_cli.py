"""Running the ``agentgate`` command line in the test's own process."""

from __future__ import annotations

import pytest

from agentgate.cli.main import main


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """``agentgate ARGV`` in this process (the environment as the test set it): its exit status,
    and what it printed since the output was last read. argparse's refusals (usage, then one
    error line) exit through ``SystemExit``, read as their status."""
    try:
        code = main(list(argv))
    except SystemExit as exc:
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    return code, out, err
