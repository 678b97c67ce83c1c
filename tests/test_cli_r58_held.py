"""`agentgate budget held` and `agentgate budget settle` (agentgate/cli/budget.py,
agentgate/store/held.py): a budget reservation left held by a worker killed between its decision
and its outcome is listed, with the allow entry that made it, and settled by hand, audited, as
`agentgate tasks settle` settles a once-only call; a reservation too young, settled already (also
meanwhile, by its own process), or a once-only call's is refused (exit 1), never settled twice.

Review R58: until now nothing listed or settled an idempotent tool's held reservation, and a
long-lived grant's budget shrank by one reservation per crash, for good."""

from __future__ import annotations

import contextlib
import io
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from test_gate_once import PAY, RUN, _policy_text
from test_gate_once import _new as _once_new

from agentgate.capabilities import Call
from agentgate.cli.main import main
from agentgate.errors import SettlementRefused
from agentgate.gate import AgentIdentity, Gate
from agentgate.keys import SigningKey, save_key
from agentgate.policy import parse_policy
from agentgate.store import SQLiteStore, Store
from agentgate.store import held as held_module
from agentgate.store.audit import open_log_key
from agentgate.store.ledger import BudgetLedger

LOOKUP = Call.tool("lookup", {"id": "o-1"})
"""A call of the policy's idempotent tool: no once-only record holds its reservation."""


def _cli(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(list(argv))
    return code, out.getvalue()


def _killed_worker(gate: Gate, agent: AgentIdentity, call: Call = LOOKUP, **ids: str) -> int:
    """What a worker killed between decision and outcome leaves: the call decided (its allow and
    reservation committed) and never run; the gate is then dropped. The allow's audit index."""
    auth = gate.authorize(agent, call, **ids)
    assert auth.allowed
    gate.flush()
    return auth.audit_index


def _held(store: str, *flags: str) -> list[dict[str, Any]]:
    code, out = _cli("budget", "held", "--json", "--store", store, *flags)
    assert code == 0
    rows: list[dict[str, Any]] = json.loads(out)
    return rows


@pytest.mark.parametrize("ran", [True, False])
def test_a_reservation_a_killed_worker_left_is_listed_and_settled_by_hand_audited(
    tmp_path: Path, ran: bool
) -> None:
    """Review R58: an idempotent tool's reservation left held by a killed worker could not be
    listed or settled: `agentgate budget` did not exist (exit 2) and the budget stayed short."""
    keys, path, agent = _once_new(tmp_path)
    grant = agent.chain.ids[-1]
    with Gate(parse_policy(_policy_text(keys), source="once.yaml"), SQLiteStore(path)) as gate:
        allow = _killed_worker(gate, agent)
    store = str(path)
    assert _held(store) == []  # made moments ago: its call may still be running
    (row,) = _held(store, "--older-than", "0")
    assert (row["grant_id"], row["amount"], row["allow_index"], row["once_key"]) == (grant, 1, allow, None)
    assert isinstance(row["reserved_at"], float) and abs(row["reserved_at"] - time.time()) < 600
    code, table = _cli("budget", "held", "--older-than", "0", "--store", store)
    assert code == 0 and row["id"] in table and "agentgate budget settle" in table

    said = "--ran" if ran else "--not-run"
    code, out = _cli("budget", "settle", row["id"], said, "--store", store)
    assert code == 1 and out.startswith("REFUSED: ") and "may still be running" in out
    code, out = _cli(
        "budget", "settle", row["id"], said, "--older-than", "0", "--by", "ops-1", "--reason", "worker OOM",
        "--store", store,
    )  # fmt: skip
    assert code == 0, out
    assert f"allowed by audit entry {allow}" in out

    with SQLiteStore(path) as reopened:
        assert BudgetLedger(reopened).usage(grant) == ((1, 0) if ran else (0, 0))
    with Gate(parse_policy(_policy_text(keys), source="once.yaml"), SQLiteStore(path)) as gate:
        outcome = list(gate.audit.entries())[-1]
        assert (outcome.kind, outcome.ref, outcome.status) == ("outcome", allow, "ok" if ran else "not_run")
        assert outcome.budget_delta == (1 if ran else 0) and outcome.resource == "tool:lookup"
        assert "settled by hand by ops-1" in outcome.reasons[0] and "worker OOM" in outcome.reasons[0]
        assert row["id"] in outcome.reasons[0]
        assert gate.verify().ok
    assert _held(store, "--older-than", "0") == []
    code, out = _cli("budget", "settle", row["id"], said, "--older-than", "0", "--store", store)
    assert code == 1 and "not held" in out  # settled once: never twice


def test_a_reservation_its_own_slow_process_settled_meanwhile_is_refused_and_nothing_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Review R58: a reservation settled by its own process (slow, not dead) after the hand
    settlement read it must not be settled twice: the conditional update refuses, a typed error."""
    keys, path, agent = _once_new(tmp_path)
    grant = agent.chain.ids[-1]
    with Gate(parse_policy(_policy_text(keys), source="once.yaml"), SQLiteStore(path)) as gate:
        _killed_worker(gate, agent)
    (row,) = _held(str(path), "--older-than", "0")
    found = held_module._allow_index

    def settled_meanwhile(*args: Any) -> int | None:
        # Between the hand settlement's read and its transaction, the worker's outcome lands.
        with SQLiteStore(path) as other:
            BudgetLedger(other).commit(row["id"], 1)
        return found(*args)

    monkeypatch.setattr(held_module, "_allow_index", settled_meanwhile)
    with SQLiteStore(path) as store:
        size = store.query("SELECT COUNT(*) FROM audit_log")[0][0]
    code, out = _cli("budget", "settle", row["id"], "--not-run", "--older-than", "0", "--store", str(path))
    assert code == 1 and "settled meanwhile" in out, out
    with SQLiteStore(path) as store:
        assert BudgetLedger(store).usage(grant) == (1, 0)  # charged once, by its process; not released
        assert store.query("SELECT COUNT(*) FROM audit_log")[0][0] == size  # no outcome written


def test_each_held_reservation_names_the_allow_entry_that_made_it(tmp_path: Path) -> None:
    """Calls of one grant at one amount decided together, with other entries between them: each
    reservation is listed with its own call's allow entry, the first at or after its time."""
    keys, path, agent = _once_new(tmp_path)
    with Gate(parse_policy(_policy_text(keys), source="once.yaml"), SQLiteStore(path)) as gate:
        allows = []
        for n in range(3):
            allows.append(_killed_worker(gate, agent, Call.tool("lookup", {"id": f"o-{n}"})))
            assert not gate.authorize(agent, Call.tool("nope", {})).allowed  # a deny between them
    assert [row["allow_index"] for row in _held(str(path), "--older-than", "0")] == allows


def test_a_once_only_calls_reservation_is_left_to_tasks_settle(tmp_path: Path) -> None:
    """Review R58: `budget settle` must not settle a once-only call's reservation behind `tasks
    settle`'s back (the call would stay started, its reservation gone): refused, pointing to it."""
    keys, path, agent = _once_new(tmp_path)
    with Gate(parse_policy(_policy_text(keys), source="once.yaml"), SQLiteStore(path)) as gate:
        _killed_worker(gate, agent, PAY, call_id="c1", run_id=RUN)
        ((key,),) = gate.store.query("SELECT key FROM agentgate_once")
    (row,) = _held(str(path), "--older-than", "0")
    assert row["once_key"] == key
    code, out = _cli("budget", "settle", row["id"], "--ran", "--older-than", "0", "--store", str(path))
    assert code == 1 and f"agentgate tasks settle {key}" in out
    code, _ = _cli("tasks", "settle", key, "--ran", "--older-than", "0", "--store", str(path))
    assert code == 0
    assert _held(str(path), "--older-than", "0") == []


def test_an_id_that_is_none_is_bad_input_and_an_unknown_one_is_refused(tmp_path: Path) -> None:
    keys, path, agent = _once_new(tmp_path)
    with Gate(parse_policy(_policy_text(keys), source="once.yaml"), SQLiteStore(path)) as gate:
        _killed_worker(gate, agent)
    code, _ = _cli("budget", "settle", "not-an-id", "--ran", "--store", str(path))
    assert code == 2
    code, out = _cli("budget", "settle", "0" * 32, "--ran", "--older-than", "0", "--store", str(path))
    assert code == 1 and "no budget reservation" in out


def test_a_store_without_a_log_has_no_held_reservations_and_is_not_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGENTGATE_LOG_KEY", str(tmp_path / "log.key"))
    path = tmp_path / "agentgate.db"
    with SQLiteStore(path) as store:
        open_log_key(store, create=True)
    before = path.read_bytes()
    assert _held(str(path), "--older-than", "0") == []
    assert path.read_bytes() == before


@pytest.mark.postgres
def test_held_and_settle_on_postgresql(
    postgres_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Review R58: the same on a PostgreSQL store that several workers share."""
    from agentgate.store._postgres import PostgresStore

    monkeypatch.setenv("AGENTGATE_LOG_KEY", str(tmp_path / "log.key"))
    keys = {n: SigningKey.generate() for n in ("root", "agent")}
    opened: Callable[[], Store] = lambda: PostgresStore(postgres_url)  # noqa: E731
    with Gate(parse_policy(_policy_text(keys), source="once.yaml"), opened()) as gate:
        agent = gate.issue(keys["root"], name="agent", key=keys["agent"], role="worker")
        allow = _killed_worker(gate, agent)
    (row,) = _held(postgres_url, "--older-than", "0")
    assert (row["allow_index"], row["amount"], row["once_key"]) == (allow, 1, None)
    code, out = _cli("budget", "settle", row["id"], "--not-run", "--older-than", "0", "--store", postgres_url)
    assert code == 0, out
    code, out = _cli("budget", "settle", row["id"], "--ran", "--older-than", "0", "--store", postgres_url)
    assert code == 1 and "not held" in out
    with opened() as store:
        assert BudgetLedger(store).usage(agent.chain.ids[-1]) == (0, 0)
    assert _held(postgres_url, "--older-than", "0") == []


def test_settle_held_refuses_with_a_typed_error(tmp_path: Path) -> None:
    keys, path, agent = _once_new(tmp_path)
    with Gate(parse_policy(_policy_text(keys), source="once.yaml"), SQLiteStore(path)) as gate:
        _killed_worker(gate, agent)
        ((reservation,),) = gate.store.query("SELECT id FROM budget_reservations")
        with pytest.raises(SettlementRefused, match="may still be running"):
            held_module.settle_held(gate.store, gate.audit, reservation, ran=True, by="ops")


def test_a_gpu_leases_reservation_is_left_to_its_broker(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Review R58: a GPU lease holds its reservation until the lease ends (hours maybe), and its
    broker settles it then; settled by hand meanwhile, the broker's own settlement would fail.
    Listed with its lease, and refused (exit 1), pointing to `agentgate broker leases`."""
    from test_broker_restart_budget import World, lease

    world = World(str(tmp_path / "agentgate.db"))
    save_key(world.log_key, tmp_path, "log")
    monkeypatch.setenv("AGENTGATE_LOG_KEY", str(tmp_path / "log.key"))
    try:
        answer = world.process.gated.submit(world.trainer, lease("ft-1"))
        assert answer.allowed and answer.lease() is not None
        world.process.gate.flush()
        (row,) = _held(str(tmp_path / "agentgate.db"), "--older-than", "0")
        assert row["lease"] == {"broker": "default", "request_id": "ft-1"} and row["once_key"] is None
        code, out = _cli(
            "budget",
            "settle",
            row["id"],
            "--not-run",
            "--older-than",
            "0",
            "--store",
            str(tmp_path / "agentgate.db"),
        )
        assert code == 1 and "GPU lease ft-1 of broker default" in out, out
        assert world.process.gate.ledger.reservation(row["id"]).state == "reserved"
    finally:
        world.process.gate.close()


def test_a_reservation_a_sigkilled_worker_left_is_settled_and_the_budget_is_whole_again(
    tmp_path: Path,
) -> None:
    """Review R58: a real worker process SIGKILLed after its allow committed and before its
    outcome (tests/test_multiproc_r58_gate.py's ``killed`` worker, an idempotent tool): its
    reservation is listed with that allow, and settled as not run the budget is whole again."""
    from test_multiproc_r58_gate import CALLS, Shared

    shared = Shared(tmp_path, str(tmp_path / "agentgate.db"))
    decided = tmp_path / "decided"
    shared.run([{"mode": "killed", "decided": str(decided)}], expect_exit=-9)
    (row,) = _held(shared.url, "--older-than", "0")
    assert (row["allow_index"], row["once_key"]) == (int(decided.read_text()), None)
    code, out = _cli("budget", "settle", row["id"], "--not-run", "--older-than", "0", "--store", shared.url)
    assert code == 0, out
    with shared.gate() as gate:
        assert gate.ledger.remaining(shared.agent.chain.root.id) == CALLS
        assert gate.verify().ok


@pytest.mark.parametrize("verb", ["held", "settle"])
def test_a_reservation_row_written_outside_agentgate_is_named_not_a_traceback(
    tmp_path: Path, verb: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R58: a held reservation whose chain is not JSON (a row edited by hand) made `budget
    held` and `budget settle` end in a JSONDecodeError traceback; exit 2, one line naming it."""
    keys, path, agent = _once_new(tmp_path)
    with Gate(parse_policy(_policy_text(keys), source="once.yaml"), SQLiteStore(path)) as gate:
        _killed_worker(gate, agent)
    with SQLiteStore(path) as store, store.transaction() as tx:
        tx.execute("UPDATE budget_reservations SET chain = 'not json'")
        ((reservation,),) = tx.execute("SELECT id FROM budget_reservations")
    argv = (
        ["held", "--older-than", "0"]
        if verb == "held"
        else ["settle", reservation, "--ran", "--older-than", "0"]
    )
    code, _ = _cli("budget", *argv, "--store", str(path))
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("agentgate: error: budget_reservations: the row of reservation")
    assert reservation in err and len(err.splitlines()) == 1
