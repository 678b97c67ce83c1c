"""``agentgate audit explain`` of an allowed call says how the call ended (review R69): until then
its ``outcome status`` line read the allow entry's own ``status`` field, which an allow never has,
so it said ``-`` beside a ``related entry N: outcome ok`` line. Real components: a Gate over a
SQLite file writes the log (entry 0 is the boss's grant), the command line reads it."""

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


def _explain(capsys: pytest.CaptureFixture[str], tmp_path: Path, index: int, kind: str) -> str:
    """What ``audit explain INDEX`` prints, checked to be an entry of ``kind``."""
    code, out, err = cli(capsys, "audit", "explain", str(index), "--store", str(tmp_path / "agentgate.db"))
    assert (code, err) == (0, ""), err
    assert out.startswith(f"entry {index}: {kind} at "), out
    return out


def _explode() -> str:
    raise RuntimeError("the tool failed")


def test_an_allowed_calls_outcome_status_is_its_outcomes(
    sweep: Sweep, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R69: the allow of a call that ended ``ok`` said ``outcome status: -``; it says the
    status of its outcome entry and which entry that is. The outcome's own line is unchanged."""
    auth = sweep.gate.authorize(sweep.boss, Call.tool("lookup", {"id": "1"}), call_id="c1")
    assert sweep.gate.run(auth, lambda: "found", call_id="c1") == "found"
    sweep.gate.flush()
    allow = _explain(capsys, tmp_path, 1, "allow")
    assert "├── related entry 2: outcome ok " in allow
    assert "├── outcome status: ok (entry 2)\n" in allow
    assert "├── outcome status: ok\n" in _explain(capsys, tmp_path, 2, "outcome")


def test_a_failed_calls_allow_shows_the_failure(
    sweep: Sweep, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R69: a call that raised showed ``-`` on its allow too, as if nothing were known."""
    auth = sweep.gate.authorize(sweep.boss, Call.tool("explode", {"password": "x"}), call_id="c1")
    with pytest.raises(RuntimeError):
        sweep.gate.run(auth, _explode, call_id="c1")
    sweep.gate.flush()
    outcome = _explain(capsys, tmp_path, 2, "outcome")
    status = outcome.split("├── outcome status: ", 1)[1].split("\n", 1)[0]
    assert status not in ("-", "ok")
    assert f"├── outcome status: {status} (entry 2)\n" in _explain(capsys, tmp_path, 1, "allow")


def test_an_allow_without_an_outcome_says_none_is_recorded_yet(
    sweep: Sweep, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R69: an allow whose call has not ended said ``outcome status: -``, the same as one
    that ended; it says no outcome is recorded yet."""
    sweep.gate.authorize(sweep.boss, Call.tool("lookup", {"id": "1"}), call_id="c1")
    sweep.gate.flush()
    allow = _explain(capsys, tmp_path, 1, "allow")
    assert "├── outcome status: no outcome recorded yet\n" in allow
