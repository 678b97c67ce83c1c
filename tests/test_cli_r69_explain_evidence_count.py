"""``agentgate audit explain`` of an entry with no related entry, on a log without a checkpoint,
counts what it showed in agreement (review R69): it said ``(1 entries shown; ...)``, the slip
review R68 fixed in ``verify``'s lines (``_counted``)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from _cli import cli
from test_observability import Sweep

from agentgate.capabilities import Call


@pytest.fixture
def sweep(tmp_path: Path) -> Iterator[Sweep]:
    made = Sweep(tmp_path)
    yield made
    made.gate.close()


def test_one_entry_shown_is_counted_as_one_entry(
    sweep: Sweep, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R69: an allow without an outcome yet, explained before any checkpoint, ended
    ``evidence: not proven: the log has no checkpoint yet (1 entries shown; ...)``."""
    sweep.gate.authorize(sweep.boss, Call.tool("lookup", {"id": "1"}), call_id="c1")
    sweep.gate.flush()
    code, out, err = cli(capsys, "audit", "explain", "1", "--store", str(tmp_path / "agentgate.db"))
    assert (code, err) == (0, "")
    assert out.endswith(
        "└── evidence: not proven: the log has no checkpoint yet (1 entry shown; run audit checkpoint)\n"
    )
