"""Review R68: what a LangGraph agent's own chat model (no dispatcher attached) is charged when
its provider reports more than was reserved.

R67 bounded the prompt a dispatched call is charged (``prompt_tokens_most`` of the payload
agentgate sends) and left the agent's own model charged as its provider reports: agentgate does
not build that model's request (a provider's server-side tools, such as a web search, add billed
input tokens no bound of the messages can foresee), so a cap there would undercharge real bills.
These tests pin, with a real Gate and SQLite store, that the budget is still never overrun: a
report over the reservation but within the budget is charged as reported; one over what the
budget has left is charged what is left, the budget exhausted, the outcome saying by how much
(``overran the tokens budget by N``), and the run's next model call refused; one over
``MAX_USAGE_TOKENS`` is garbage, charged as reserved, the outcome saying what was reported.
"""

from __future__ import annotations

import re
from pathlib import Path

from test_langgraph_hostile_model import GO, Hostile, Setup, _answer, _call, _make

from agentgate.dispatch._answers import MAX_USAGE_TOKENS
from agentgate.integrations.langgraph import create_gated_agent

_BUDGET = 100_000


def _run(tmp_path: Path, usage: dict[str, int]) -> tuple[Setup, list[tuple[int | None, list[str]]]]:
    """The setup after one run of an agent whose own model reports ``usage`` on every answer,
    and each model call's ``(budget_delta, reasons)`` of its outcome."""
    setup = _make(tmp_path, budget=_BUDGET, unit="tokens")
    model = Hostile(turns=[_answer(_call("search", {"query": "x"}, "s1"))], usage=usage)
    agent = create_gated_agent(setup.gate, name="boss", model=model, tools=setup.tools(), max_tokens=64)
    agent.invoke(GO, context=setup.boss)
    setup.gate.flush()
    outcomes = [
        (e.budget_delta, list(e.reasons))
        for e in setup.gate.audit.entries()
        if e.kind == "outcome" and (e.resource or "").startswith("model:")
    ]
    return setup, outcomes


def _spent(setup: Setup) -> int:
    [(spent, _)] = setup.gate.budget_usage(setup.boss).values()
    return int(spent)


def test_a_report_over_the_reservation_within_the_budget_is_charged_as_reported(tmp_path: Path) -> None:
    """Review R68 (pinned): 20,000 input tokens reported for a prompt reserved at a few dozen are
    charged as reported (the provider's bill): the budget is not overrun. Review R69: the outcome
    says by how much the report exceeded the reservation (R68 pinned no reason: an operator could
    not see that reservations run short)."""
    setup, outcomes = _run(tmp_path, {"input_tokens": 20_000, "output_tokens": 5, "total_tokens": 20_005})
    try:
        assert [delta for delta, _ in outcomes] == [20_005, 20_005]
        for _, reasons in outcomes:
            [over] = reasons
            said = re.fullmatch(r"the reported usage costs 20005 tokens, (\d+) over the (\d+) reserved", over)
            assert said is not None and int(said[1]) + int(said[2]) == 20_005
        assert _spent(setup) == 40_010
    finally:
        setup.gate.close()


def test_a_report_over_what_the_budget_has_left_exhausts_it_and_says_so(tmp_path: Path) -> None:
    """Review R68 (pinned): a report of more than the whole budget is charged what is left, never
    more; the outcome says by how much it overran, and the run's next model call is refused (the
    tool call the first answer asked for still ran: it was allowed before)."""
    reported = 10 * _BUDGET
    setup, outcomes = _run(
        tmp_path, {"input_tokens": reported, "output_tokens": 5, "total_tokens": reported + 5}
    )
    try:
        assert _spent(setup) == _BUDGET
        [(delta, reasons)] = outcomes
        assert delta == reported + 5
        assert (
            reasons[-1] == f"overran the tokens budget by {reported + 5 - _BUDGET}; the budget is exhausted"
        )
        assert reasons[0].startswith(f"the reported usage costs {reported + 5} tokens, ")  # Review R69
        refused = [
            e for e in setup.gate.audit.entries() if e.kind == "deny" and e.resource == "model:scripted"
        ]
        assert len(refused) == 1
    finally:
        setup.gate.close()


def test_a_report_over_max_usage_tokens_is_garbage_charged_as_reserved(tmp_path: Path) -> None:
    """Review R68 (pinned): a count over ``MAX_USAGE_TOKENS`` is no bill: charged as reserved, the
    outcome naming what was reported."""
    usage = {"input_tokens": MAX_USAGE_TOKENS + 1, "output_tokens": 5, "total_tokens": 0}
    setup, outcomes = _run(tmp_path, usage)
    try:
        for delta, reasons in outcomes:
            assert delta is not None and 0 < delta < 1_000
            assert reasons[0].startswith(
                f"reported usage ({MAX_USAGE_TOKENS + 1}, 5) is not two token counts"
            )
            assert reasons[0].endswith(f"charged as reserved ({delta} tokens)")
        assert _spent(setup) == sum(d or 0 for d, _ in outcomes)
    finally:
        setup.gate.close()
