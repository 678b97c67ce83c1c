"""Review R83: a verb whose work is committed exits as the work went when its line cannot be
written (standard output closed, a full disk), as a verb's ``wrote FILE`` line did (docs/cli.md,
Conventions): until R83 ``tasks settle`` exited 2 once its settlement was committed, and a
script retrying on 2 was refused, exit 1 (not unsettled); ``budget settle`` the same, and
``audit accept-repair`` and ``keys new`` (whose retries are refused: accepted already, the key
files exist), ``grant revoke``, ``store init`` and ``store prune`` exited 2 having done their
work. A verb whose output is what it makes (a token, an approval, a checkpoint) still exits 2."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from test_audit_r60_accept_repair_refused import _repaired
from test_gate_once import PAY, RUN
from test_gate_once import _gate as _once_gate
from test_gate_once import _new as _once_new

from agentgate.capabilities import Call
from agentgate.cli.main import main
from agentgate.store import SQLiteStore
from agentgate.store.once import OnceCalls


def _on_a_full_disk(argv: list[str]) -> int:
    """``main(argv)``'s exit code, its standard output on a full disk: every write that reaches it
    fails with ``ENOSPC`` (set in the test's body: pytest puts its capture back between phases)."""
    with open("/dev/full", "w", encoding="utf-8") as full, pytest.MonkeyPatch.context() as patch:
        patch.setattr(sys, "stdout", full)
        return main(argv)


def _allowed(tmp_path: Path, call: Call) -> tuple[Path, str, str]:
    """A store holding one call allowed whose outcome was never recorded (its process died): the
    store, the call's reservation and its grant."""
    keys, path, agent = _once_new(tmp_path)
    with _once_gate(path, keys) as gate:
        auth = gate.authorize(agent, call, call_id="c1", run_id=RUN)
        assert auth.allowed
        gate.flush()
    return path, auth.reservations[0][0], agent.grant_id


def test_tasks_settle_committed_exits_0_when_its_line_cannot_be_written(tmp_path: Path) -> None:
    path, _, _ = _allowed(tmp_path, PAY)
    with SQLiteStore(path) as store:
        ((key,),) = store.query("SELECT key FROM agentgate_once")
    argv = ["tasks", "settle", key, "--ran", "--older-than", "0", "--store", str(path)]
    assert _on_a_full_disk(argv) == 0
    with SQLiteStore(path) as store:
        assert OnceCalls(store).unsettled() == []
    assert main(argv) == 1  # settled: a retry is refused, as after any exit 0


def test_budget_settle_committed_exits_0_when_its_line_cannot_be_written(tmp_path: Path) -> None:
    path, reservation, _ = _allowed(tmp_path, Call.tool("lookup", {"id": "o-1"}))
    argv = ["budget", "settle", reservation, "--not-run", "--by", "ops", "--older-than", "0"]
    assert _on_a_full_disk([*argv, "--store", str(path)]) == 0
    assert main([*argv, "--store", str(path)]) == 1  # settled already


def test_keys_new_exits_0_when_its_line_cannot_be_written(tmp_path: Path) -> None:
    assert _on_a_full_disk(["keys", "new", "ops", "--dir", str(tmp_path)]) == 0
    assert (tmp_path / "ops.key").is_file() and (tmp_path / "ops.pub").is_file()


@pytest.mark.parametrize("json_flag", [[], ["--json"]], ids=["text", "json"])
def test_grant_revoke_exits_0_when_its_output_cannot_be_written(tmp_path: Path, json_flag: list[str]) -> None:
    path, _, grant_id = _allowed(tmp_path, PAY)
    assert _on_a_full_disk(["grant", "revoke", grant_id, *json_flag, "--store", str(path)]) == 0
    with SQLiteStore(path) as store:
        assert store.query("SELECT grant_id FROM agentgate_revocations") == [(grant_id,)]


@pytest.mark.parametrize("json_flag", [[], ["--json"]], ids=["text", "json"])
def test_store_prune_exits_0_when_its_output_cannot_be_written(tmp_path: Path, json_flag: list[str]) -> None:
    path, _, _ = _allowed(tmp_path, PAY)
    assert _on_a_full_disk(["store", "prune", "--older-than", "1d", *json_flag, "--store", str(path)]) == 0


def test_grant_revoke_holder_exits_0_when_its_lines_cannot_be_written(tmp_path: Path) -> None:
    path, _, grant_id = _allowed(tmp_path, PAY)
    with SQLiteStore(path) as store:
        ((holder,),) = store.query("SELECT audience FROM agentgate_grants WHERE id = ?", (grant_id,))
    assert _on_a_full_disk(["grant", "revoke", "--holder", holder, "--store", str(path)]) == 0
    with SQLiteStore(path) as store:
        assert store.query("SELECT grant_id FROM agentgate_revocations") == [(grant_id,)]


def test_store_init_exits_0_when_its_lines_cannot_be_written(tmp_path: Path) -> None:
    assert _on_a_full_disk(["store", "init", "--store", str(tmp_path / "new.db")]) == 0


def test_audit_accept_repair_exits_0_when_its_line_cannot_be_written(tmp_path: Path) -> None:
    db = tmp_path / "agentgate.db"
    _repaired(db)
    argv = ["audit", "accept-repair", "1", "--by", "Ana", "--reason", "checked", "--store", str(db)]
    assert _on_a_full_disk(argv) == 0
    assert main(argv) == 1  # accepted already
