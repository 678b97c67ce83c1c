"""`agentgate tasks` (agentgate/cli/tasks.py): listing and settling once-only calls from the
command line."""

from __future__ import annotations

from pathlib import Path

from test_gate_once import PAY, RUN, _cli
from test_gate_once import _gate as _once_gate
from test_gate_once import _new as _once_new


def test_the_command_refuses_to_settle_a_call_allowed_moments_ago(tmp_path: Path) -> None:
    # `agentgate tasks settle` without --older-than: a call allowed moments ago may still run.
    keys, path, agent = _once_new(tmp_path)
    with _once_gate(path, keys) as gate:
        assert gate.authorize(agent, PAY, call_id="c1", run_id=RUN).allowed
        gate.flush()
        ((key,),) = gate.store.query("SELECT key FROM agentgate_once")
    code, _ = _cli("tasks", "settle", key, "--not-run", "--store", str(path))
    assert code == 2
    code, _ = _cli("tasks", "settle", key, "--not-run", "--older-than", "0", "--store", str(path))
    assert code == 0
