"""Review R69: a decision whose COMMIT the real server carried out, its answer lost
(``CommitUnknown``), no longer leaves its budget reservation held until settled by hand: the
gate reads back whether the reservation was committed (by its id, unique, never reused) and, if
it was, releases it with a ``not run`` outcome; if not, there is nothing to settle. A loopback TCP
proxy between the store and the session's PostgreSQL server forwards the COMMIT, swallows the
server's answer and closes the connection (``test_store_r68_pg_lost_commit.CommitCutter``)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from test_gate_approvals import _agent, _gate
from test_gate_policy_change import MODEL
from test_store_r68_pg_lost_commit import BUDGET, CommitCutter, _recv, _shut, _through, settled_after

from agentgate.errors import CommitUnknown
from agentgate.store._postgres import PostgresStore

pytestmark = pytest.mark.postgres


@pytest.fixture
def cutter(postgres_server: Any) -> Iterator[CommitCutter]:
    proxy = CommitCutter(f"{postgres_server.socket_dir}/.s.PGSQL.{postgres_server.port}")
    yield proxy
    proxy.close()


def test_a_decision_whose_commit_was_not_acknowledged_has_its_reservation_released(
    postgres_url: str, cutter: CommitCutter
) -> None:
    """Review R69: the decision's transaction committed (its ``allow`` entry and reservation
    stand), the answer lost: the call was not run, yet its reservation stayed held, the budget
    smaller by it, until someone ran ``agentgate budget settle ID --not-run``. The next commit
    (here, the next decision's) finds the reservation committed and releases it, with an
    ``outcome`` entry for that ``allow`` saying the call was not run; the budget is charged for
    the second decision only."""
    gate = _gate(PostgresStore(_through(postgres_url, cutter)))
    try:
        agent = _agent(gate)
        cutter.arm(b'"kind":"allow"')
        with pytest.raises(CommitUnknown) as unknown:
            gate.authorize(agent, MODEL, tokens=(10, 5))
        assert cutter.cut == 1
        lost = [e for e in gate.audit.entries() if e.kind == "allow" and e.resource == "model:small"]
        assert len(lost) == 1  # committed by the server
        again = gate.authorize(agent, MODEL, tokens=(10, 5))
        assert again.allowed
        settled_after(gate, unknown.value)
        held = sum(amount for _, _, amount in again.reservations)
        assert gate.ledger.remaining(agent.grant_id) == BUDGET - held
        outcomes = [e for e in gate.audit.entries() if e.kind == "outcome"]
        assert [o.ref for o in outcomes] == [lost[0].index]
        assert outcomes[0].budget_delta == 0
        assert any("not acknowledged" in r and "not run" in r for r in outcomes[0].reasons), outcomes[
            0
        ].reasons
        states = gate.store.query("SELECT id, state FROM budget_reservations ORDER BY state")
        assert states == [(states[0][0], "released"), (again.reservations[0][0], "reserved")]
        assert list(gate.audit.verify().problems) == []
    finally:
        gate.close()


class CommitDropper(CommitCutter):
    """``CommitCutter``, but the COMMIT is never forwarded: the connection is closed in its place,
    and the server rolls the transaction back."""

    def _up(self, client: Any, server: Any, state: dict[str, bool]) -> None:
        while data := _recv(client):
            with self._lock:
                if self.marker is not None and self.marker in data:
                    self.marker = None
                    state["marked"] = True
            if state["marked"] and self.then in data:
                self.cut += 1
                break
            try:
                server.sendall(data)
            except OSError:
                break
        _shut(client, server)


@pytest.fixture
def dropper(postgres_server: Any) -> Iterator[CommitCutter]:
    proxy = CommitDropper(f"{postgres_server.socket_dir}/.s.PGSQL.{postgres_server.port}")
    yield proxy
    proxy.close()


def test_a_decision_whose_commit_did_not_happen_leaves_nothing_to_settle(
    postgres_url: str, dropper: CommitCutter
) -> None:
    """Review R69: the read-back that settles a lost decision (above) must not settle one the
    server rolled back (its COMMIT never reached it, the connection lost once it was sent): no reservation of its id exists, so no ``outcome`` entry is written for an
    ``allow`` that is not in the log."""
    gate = _gate(PostgresStore(_through(postgres_url, dropper)))
    try:
        agent = _agent(gate)
        dropper.arm(b'"kind":"allow"')
        with pytest.raises(CommitUnknown) as unknown:
            gate.authorize(agent, MODEL, tokens=(10, 5))
        assert dropper.cut == 1
        assert [e for e in gate.audit.entries() if e.kind == "allow" and e.resource == "model:small"] == []
        again = gate.authorize(agent, MODEL, tokens=(10, 5))
        assert again.allowed
        settled_after(gate, unknown.value)
        assert [e.kind for e in gate.audit.entries() if e.kind == "outcome"] == []
        held = sum(amount for _, _, amount in again.reservations)
        assert gate.ledger.remaining(agent.grant_id) == BUDGET - held
    finally:
        gate.close()


class CommitHolder(CommitCutter):
    """``CommitCutter``, but the server's end of the cut connection is kept open (``kept``): its
    server process committed and lives on, idle (since review R70 read back at once:
    ``test_store_r70_pg_lost_decision``)."""

    def __init__(self, socket_path: str) -> None:
        super().__init__(socket_path)
        self.kept: list[Any] = []

    def _down(self, server: Any, client: Any, state: dict[str, bool]) -> None:
        while data := _recv(server):
            if state["cutting"]:
                self.cut += 1
                self.kept.append(server)
                self._before_cut(server)
                _shut(client)
                return
            try:
                client.sendall(data)
            except OSError:
                break
        _shut(client, server)

    def _before_cut(self, server: Any) -> None:
        """Runs once the COMMIT is answered, before the client's end is cut (and learns its
        COMMIT's answer is lost)."""


class CommitHolderBusy(CommitHolder):
    """``CommitHolder``, but once the COMMIT is answered the kept connection is handed a long
    statement: its server process lives on ``active``, as one whose COMMIT awaits a synchronous
    standby is (review R70: one idle with no transaction open is read back at once), until it
    is ended (``pg_terminate_backend``). The client is cut only once that statement runs (review
    R72: cut first, a gate that read back at once found the process idle, between the COMMIT and
    the statement, and wrote the outcome a test says waits; a clean-clone CI run under load)."""

    def __init__(self, socket_path: str) -> None:
        super().__init__(socket_path)
        directory, _, name = socket_path.rpartition("/")
        self.conninfo = f"host={directory} port={name.rsplit('.', 1)[1]} user=postgres dbname=postgres"

    def _before_cut(self, server: Any) -> None:
        counted = "SELECT count(*) FROM pg_stat_activity WHERE state = 'active' AND query = %s"
        with psycopg.connect(self.conninfo, autocommit=True) as probe:
            (before,) = probe.execute(counted, (BUSY_STATEMENT,)).fetchone() or (0,)
            query = BUSY_STATEMENT.encode() + b"\x00"
            server.sendall(b"Q" + (len(query) + 4).to_bytes(4, "big") + query)
            for _ in range(100_000):
                if (probe.execute(counted, (BUSY_STATEMENT,)).fetchone() or (0,))[0] > before:
                    return


BUSY_STATEMENT = "SELECT pg_sleep(3600)"
"""What ``CommitHolderBusy`` hands the kept connection once its COMMIT is answered."""


def _until_busy(gate: Any, session: int | None) -> None:
    """Wait until the server process ``session`` runs the statement ``CommitHolderBusy`` gave it:
    that statement, not only ``active``, which the COMMIT itself also is while it runs (review
    R72; ``CommitHolderBusy`` now cuts the client only once it runs, so this finds it at once)."""
    for _ in range(100_000):
        state = gate.store.query("SELECT state, query FROM pg_stat_activity WHERE pid = ?", (session,))
        if state == [("active", BUSY_STATEMENT)]:
            return
    pytest.fail(f"server process {session} never busy")


def _terminate(gate: Any, session: int | None) -> None:
    """End the server process ``session`` and wait until it has."""
    gate.store.query("SELECT pg_terminate_backend(?)", (session,))
    for _ in range(100_000):
        if not gate.store.query("SELECT 1 FROM pg_stat_activity WHERE pid = ?", (session,)):
            return
    pytest.fail(f"server process {session} never ended")


def test_a_lost_decision_is_read_back_only_once_its_server_process_has_ended(
    postgres_server: Any, postgres_url: str
) -> None:
    """Review R69: the read-back (above) must not run while the lost connection's server process
    lives: its COMMIT may not be visible yet (a synchronous standby awaited), and a decision read
    then as not committed would keep its reservation held for good. Here that process committed
    and lives on, busy (since review R70 one idle is read back at once): the outcome waits, the
    reservation held, and is written once the process has ended. (Without the wait it is written
    at once: the state this test checks in between.)"""
    holder = CommitHolderBusy(f"{postgres_server.socket_dir}/.s.PGSQL.{postgres_server.port}")
    gate = _gate(PostgresStore(_through(postgres_url, holder)))
    try:
        agent = _agent(gate)
        holder.arm(b'"kind":"allow"')
        with pytest.raises(CommitUnknown) as lost:
            gate.authorize(agent, MODEL, tokens=(10, 5))
        assert holder.cut == 1 and lost.value.session is not None
        _until_busy(gate, lost.value.session)
        again = gate.authorize(agent, MODEL, tokens=(10, 5))
        assert again.allowed
        gate.flush()
        states = gate.store.query("SELECT state FROM budget_reservations")
        assert sorted(s for (s,) in states) == ["reserved", "reserved"]  # the lost one waits
        assert [e for e in gate.audit.entries() if e.kind == "outcome"] == []
        _terminate(gate, lost.value.session)
        gate.flush()
        states = gate.store.query("SELECT state FROM budget_reservations")
        assert sorted(s for (s,) in states) == ["released", "reserved"]
        assert [e.ref for e in gate.audit.entries() if e.kind == "outcome"] != []
    finally:
        gate.close()
        _shut(*holder.kept)
        holder.close()
