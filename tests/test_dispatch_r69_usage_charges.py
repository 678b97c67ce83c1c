"""Review R69: what a model call's reported usage is charged, and what its outcome says of it.

Two holes left by review R68. A usage that cost more than the call's reservation (its prompt
estimate too low) was charged in full, the budget having room, and the outcome said nothing: an
operator could not see that reservations run short. And a usage of 0 prompt tokens for a call
whose prompt agentgate bounded (the gateway, a dispatched LangGraph call) was charged 0 for the
prompt, though a usage that leaves ``prompt_tokens`` out is charged the reservation (R68). Real
HTTP on 127.0.0.1 (a backend answering with the usage given), real Gate, real SQLite store.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from test_dispatch_r68_usage_garbage import Reporting, dispatched_agent_call
from test_gate_run import Setup
from test_gateway_end_to_end import _body
from test_gateway_hostile_backends import _gateway

from agentgate.capabilities import Call


def _agent_call(tmp_path: Path, usage: object) -> tuple[int, Any, Any]:
    """A dispatched LangGraph agent's one model call, answered "hi" with ``usage``: what its
    budget was charged, its ``allow`` entry and its ``outcome`` entry."""
    backends = [Reporting(usage)]
    try:
        return dispatched_agent_call(tmp_path, backends)
    finally:
        backends[0].close()


def test_a_usage_over_the_reservation_is_charged_and_the_outcome_says_by_how_much(tmp_path: Path) -> None:
    """Review R69: a call reserved (100, 10) tokens at 1 and 2 usd_micros (120) that reported
    (300, 10) was charged 320, the budget having room, its outcome's reasons empty; now they say
    the usage cost 200 usd_micros over the 120 reserved."""
    setup = Setup(tmp_path)
    try:
        auth = setup.gate.authorize(setup.agent, Call.model("small"), tokens=(100, 10))
        assert ("usd_micros", 120) in [(unit, amount) for _, unit, amount in auth.reservations]
        setup.gate.run(auth, lambda: "answer", spent=lambda _: (300, 10))
        [outcome] = [e for e in setup.entries() if e.kind == "outcome"]
        assert outcome.budget_delta == 320
        assert any(
            "320 usd_micros" in reason and "200 over the 120 reserved" in reason for reason in outcome.reasons
        ), outcome.reasons
    finally:
        setup.gate.close()


def test_a_usage_within_the_reservation_adds_no_reason(tmp_path: Path) -> None:
    """Review R69: the reason is for an overrun only; a usage under the reservation says nothing."""
    setup = Setup(tmp_path)
    try:
        auth = setup.gate.authorize(setup.agent, Call.model("small"), tokens=(100, 10))
        setup.gate.run(auth, lambda: "answer", spent=lambda _: (90, 10))
        [outcome] = [e for e in setup.entries() if e.kind == "outcome"]
        assert outcome.budget_delta == 110
        assert list(outcome.reasons) == []
    finally:
        setup.gate.close()


def test_a_dispatched_call_over_its_reservation_says_so(tmp_path: Path) -> None:
    """Review R69: over HTTP, a dispatched agent call whose backend reported more tokens than were
    reserved (a prompt of 300 against an estimate of about 130) was charged them silently."""
    spent, allow, outcome = _agent_call(tmp_path, {"prompt_tokens": 300, "completion_tokens": 16})
    assert spent > allow.budget_delta
    over = spent - allow.budget_delta
    assert any(f"{over} over the {allow.budget_delta} reserved" in r for r in outcome.reasons), (
        outcome.reasons
    )


def test_a_dispatched_call_reporting_no_prompt_tokens_is_charged_its_reservation(tmp_path: Path) -> None:
    """Review R69: a usage of 0 prompt tokens for the agent's prompt (never empty: its messages,
    its tools) was charged its 2 completion tokens, the prompt free, while one leaving
    ``prompt_tokens`` out is charged the reservation (R68). Now it is charged the reservation too,
    the outcome saying why."""
    spent, allow, outcome = _agent_call(tmp_path, {"prompt_tokens": 0, "completion_tokens": 2})
    assert spent == allow.budget_delta > 2
    assert any("reported 0 prompt tokens" in r and "charged as reserved" in r for r in outcome.reasons), (
        outcome.reasons
    )


def test_the_gateway_charges_a_usage_of_no_prompt_tokens_its_reservation(tmp_path: Path) -> None:
    """Review R69: the gateway charged a usage of 0 prompt tokens for a non-empty prompt 0 for it;
    now the reservation, as for a usage without ``prompt_tokens``."""
    backend = Reporting({"prompt_tokens": 0, "completion_tokens": 2})
    try:
        with _gateway(tmp_path, backend) as env:
            before = env.spent()
            answer = env.post(_body())
            assert answer.status_code == 200, answer.text
            [allow] = [
                e for e in env.gate.audit.entries() if e.kind == "allow" and e.resource.startswith("model:")
            ]
            assert env.spent() - before == allow.budget_delta > 2
            assert any("reported 0 prompt tokens" in r for r in env.outcomes()[-1].reasons)
    finally:
        backend.close()


def test_a_direct_call_without_a_prompt_bound_is_charged_a_zero_prompt_as_reported(tmp_path: Path) -> None:
    """Review R69: the rule is for a prompt agentgate bounded (and so knows is not empty); a direct
    caller's ``spent`` of (0, 10), no ``prompt_most`` given, is charged as reported, as before."""
    setup = Setup(tmp_path)
    try:
        auth = setup.gate.authorize(setup.agent, Call.model("small"), tokens=(100, 10))
        setup.gate.run(auth, lambda: "answer", spent=lambda _: (0, 10))
        [outcome] = [e for e in setup.entries() if e.kind == "outcome"]
        assert outcome.budget_delta == 20
    finally:
        setup.gate.close()
