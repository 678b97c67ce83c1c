"""``tasks settle`` and ``budget settle`` refuse alike: exit 1, ``REFUSED: ...`` on standard
output, nothing written; exit 2 stays for input the command cannot use (docs/cli.md)."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_gate_once import PAY, RUN, _gate, _new

from agentgate.cli.main import main
from agentgate.store import SQLiteStore


def _log_size(path: Path) -> int:
    with SQLiteStore(path) as store:
        return int(store.query("SELECT COUNT(*) FROM audit_log")[0][0])


@pytest.fixture(scope="module")
def calls(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, str]:
    """A store with a call that ran (settled already) and one allowed moments ago (no outcome):
    the store's path and the two calls' keys. Shared: no test here writes to it."""
    keys, path, agent = _new(tmp_path_factory.mktemp("settle"))
    with _gate(path, keys) as gate:
        done = gate.authorize(agent, PAY, call_id="c1", run_id=RUN)
        gate.run(done, lambda: "paid", call_id="c1", run_id=RUN)
        assert gate.authorize(agent, PAY, call_id="c2", run_id=RUN).allowed
        gate.flush()
        rows = dict(gate.store.query("SELECT state, key FROM agentgate_once"))
    return path, rows["ok"], rows["started"]


@pytest.mark.parametrize("which", ["unknown", "settled", "recent"])
def test_a_tasks_settle_refusal_is_exit_1_as_budget_settles_is(
    calls: tuple[Path, str, str], capsys: pytest.CaptureFixture[str], which: str
) -> None:
    """Review R59: tasks settle refused with exit 2 what budget settle refuses with exit 1."""
    path, settled, recent = calls
    key = {"unknown": "f" * 64, "settled": settled, "recent": recent}[which]
    before = _log_size(path)
    capsys.readouterr()
    assert main(["tasks", "settle", key, "--not-run", "--store", str(path)]) == 1
    out, err = capsys.readouterr()
    said = {
        "unknown": "no call that must run once",
        "settled": "is ok, not unsettled",
        "recent": "may still be running",
    }
    assert out.startswith("REFUSED: ") and out.count("\n") == 1 and said[which] in out, out
    assert err == ""
    assert _log_size(path) == before  # nothing written


def test_budget_settle_refuses_with_the_same_exit_code(
    calls: tuple[Path, str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R59: the rule both settle verbs keep: a reservation no one holds is exit 1, REFUSED."""
    path, _, _ = calls
    capsys.readouterr()
    assert main(["budget", "settle", "0" * 32, "--ran", "--store", str(path)]) == 1
    assert capsys.readouterr().out.startswith("REFUSED: ")


def test_a_blank_by_is_input_not_a_refusal(
    calls: tuple[Path, str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R59: a --by of white space only names no one: exit 2 (bad input), as for budget settle."""
    path, _, recent = calls
    for verb, key in (("tasks", recent), ("budget", "0" * 32)):
        capsys.readouterr()
        assert (
            main([verb, "settle", key, "--ran", "--older-than", "0", "--by", " ", "--store", str(path)]) == 2
        )
        out, err = capsys.readouterr()
        assert out == "" and err.count("\n") == 1 and "say who settles" in err, (verb, err)
