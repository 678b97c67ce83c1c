"""Review R92: a failure of a tool call with a ``call_id`` is kept past its end for the calls then
in flight that may have joined it (review R91b). The Gate grouped those calls by resource, run,
call id and arguments digest (review R91c) but not by the tenant, principal and grant that the
scheduler's idempotency key also holds: while one call waited on a long-running twin, every
failed call with those ids under another grant (a re-issue, another agent, another tenant),
which the scheduler keys apart and so can never join, was kept, its exception and traceback,
until that joiner ended. The Gate now groups the calls by the scheduler's own idempotency key.

Real components: a Gate on a SQLite file (``test_gate``'s policy: ``lookup`` is idempotent)."""

from __future__ import annotations

from test_gate import Setup
from test_gate_r91c_joiner_other_args import IDS, assert_joiner_keeps_no_failure, setup  # noqa: F401 (the fixture)

from agentgate.capabilities import Call


def test_a_joiner_keeps_no_failure_of_calls_under_another_grant(setup: Setup) -> None:  # noqa: F811 (the fixture)
    gate = setup.gate
    # A second grant to the same agent: the scheduler keys its calls apart (the grant).
    other_grant = gate.issue(setup.keys["root"], name="agent", key=setup.keys["agent"], role="worker")
    assert other_grant.grant_id != setup.agent.grant_id
    lookup = Call.tool("lookup", {"id": "1"})
    # Same ids, same arguments, under the other grant.
    assert_joiner_keeps_no_failure(setup, lambda _: gate.authorize(other_grant, lookup, **IDS))
