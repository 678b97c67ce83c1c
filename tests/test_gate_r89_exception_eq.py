"""Review R89: ``Gate.run`` and ``Gate.arun`` told whether the exception that ended a call was
one the tool itself raised by comparing it with the earlier attempts' exceptions with ``==``
(``exc in raised``), inside their own ``except`` block. An exception class whose ``__eq__``
raises (one comparing fields another instance lacks) then had that error replace the tool's: the
call's outcome was never recorded and its reservation stayed held for good. The exceptions are
now compared by identity: an ``error`` outcome, the reservation released, the tool's own
exception raised.

Real components: a Gate on a SQLite file; ``lookup`` is idempotent and retried once on a
connection error, so the last attempt's exception is compared with the first's."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_gate_r89_identity_fields import gate_and_agent

from agentgate.capabilities import Call
from agentgate.gate import AgentIdentity, Gate

RETRY = "\n    retry: {attempts: 2, backoff_initial_s: 0, backoff_max_s: 0, retry_on: [connection]}"
"""What ``lookup`` adds to test_gate_r89_identity_fields' policy here: one retry on a connection error."""


class FieldsError(ConnectionError):
    """An error whose ``==`` reads a field another instance lacks, and so raises."""

    def __eq__(self, other: object) -> bool:
        return bool(self.args[0] == other.args[1])  # type: ignore[attr-defined]

    __hash__ = ConnectionError.__hash__


@pytest.fixture
def desk(tmp_path: Path) -> Iterator[tuple[Gate, AgentIdentity]]:
    with gate_and_agent(tmp_path, lookup=RETRY) as made:
        yield made


def _settled_as_error(gate: Gate, agent: AgentIdentity, index: int | None) -> None:
    gate.flush()
    outcome = gate.audit.entry(gate.audit.size() - 1)
    assert (outcome.kind, outcome.status, outcome.ref) == ("outcome", "error", index)
    assert gate.ledger.usage(agent.grant_id)[1] == 0  # nothing left held


def test_run_records_the_tool_error_whose_eq_raises(desk: tuple[Gate, AgentIdentity]) -> None:
    gate, agent = desk
    auth = gate.authorize(agent, Call.tool("lookup", {"id": "1"}))
    attempts: list[FieldsError] = []

    def lookup() -> str:
        attempts.append(FieldsError(f"attempt {len(attempts) + 1}"))
        raise attempts[-1]

    with pytest.raises(FieldsError) as raised:
        gate.run(auth, lookup)

    assert len(attempts) == 2 and raised.value is attempts[-1]
    _settled_as_error(gate, agent, auth.audit_index)


def test_arun_records_the_tool_error_whose_eq_raises(desk: tuple[Gate, AgentIdentity]) -> None:
    gate, agent = desk
    auth = gate.authorize(agent, Call.tool("lookup", {"id": "1"}))
    attempts: list[FieldsError] = []

    async def lookup() -> str:
        attempts.append(FieldsError(f"attempt {len(attempts) + 1}"))
        raise attempts[-1]

    with pytest.raises(FieldsError) as raised:
        asyncio.run(gate.arun(auth, lookup))

    assert len(attempts) == 2 and raised.value is attempts[-1]
    _settled_as_error(gate, agent, auth.audit_index)
