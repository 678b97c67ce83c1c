"""What an outcome settled by hand (``agentgate tasks settle``, ``store.once.settle``) says was
charged when its call holds several reservations (review R67).

A call's ``budget_delta`` is in one unit, the caller's own budget's (docs/audit-format.md): the
Gate's outcome takes its first reservation's (``_settle_reservations``), the GPU broker's sums its
reservations of that unit (a renewal's are added to its lease's). ``once.settle`` took the first
reservation still held, whatever its unit, and wrote each grant's ``charges`` by unit with the
last reservation's amount over the others'. Real components: a Gate over a SQLite file, its
ledger and once-only calls.
"""

from __future__ import annotations

from pathlib import Path

from test_gate_once import PAY, RUN, _gate, _new

from agentgate.store.once import settle


def test_a_call_holding_two_reservations_of_its_unit_is_charged_both_and_says_so(tmp_path: Path) -> None:
    """Review R67: a once-only call that holds two reservations in ``calls`` (1 and 7), settled
    as run, charged its grant 8; its outcome said ``budget_delta`` 1 (the first reservation's)
    and ``charges`` ``{grant: {calls: 7}}`` (the second's written over the first's). Both now
    say 8, what the grant's ``spent`` grew by."""
    keys, path, agent = _new(tmp_path)
    with _gate(path, keys) as gate:
        auth = gate.authorize(agent, PAY, call_id="c1", run_id=RUN)  # its worker then died
        assert auth.allowed and auth.once_key is not None
        (first, unit, one), *_ = auth.reservations
        assert (unit, one) == ("calls", 1)
        grant = agent.grant_id
        with gate.store.transaction() as tx:
            second = gate.ledger.reserve(tx, agent.chain.ids, {grant: 100}, 7, unit="calls")
            gate.once.start(tx, auth.once_key, auth.audit_index, [first, second])
        gate.flush()
        settle(gate.store, gate.audit, auth.once_key, ran=True, by="ops", min_age_s=0)
        outcome = [e for e in gate.audit.entries() if e.kind == "outcome" and e.ref == auth.audit_index]
        assert len(outcome) == 1
        assert gate.ledger.spent(grant) == 8
        assert outcome[0].charges == {grant: {"calls": 8}}
        assert outcome[0].budget_delta == 8
        assert gate.verify().ok


def test_a_reservation_in_another_unit_is_not_the_callers_delta(tmp_path: Path) -> None:
    """Review R67: when the call's first reservation (its own budget's unit) was no longer held,
    the outcome's ``budget_delta`` was the next held reservation's amount, in another unit; it is
    what the caller's own unit was charged now: 0. ``charges`` says what the other unit was."""
    keys, path, agent = _new(tmp_path)
    with _gate(path, keys) as gate:
        auth = gate.authorize(agent, PAY, call_id="c1", run_id=RUN)
        assert auth.allowed and auth.once_key is not None
        (first, _unit, _one), *_ = auth.reservations
        grant = agent.grant_id
        with gate.store.transaction() as tx:
            other = gate.ledger.reserve(tx, agent.chain.ids, {grant: 100}, 5, unit="tokens")
            gate.once.start(tx, auth.once_key, auth.audit_index, [first, other])
            gate.ledger.release(first, tx)  # settled before: no longer held
        gate.flush()
        settle(gate.store, gate.audit, auth.once_key, ran=True, by="ops", min_age_s=0)
        (outcome,) = [e for e in gate.audit.entries() if e.kind == "outcome" and e.ref == auth.audit_index]
        assert outcome.charges == {grant: {"tokens": 5}}
        assert outcome.budget_delta == 0
