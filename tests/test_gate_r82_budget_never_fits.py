"""Review R82: a call that costs more than a budget's whole limit (a ``max_tokens`` priced above
it, or an estimate past what any budget holds, 2**63 tokens) was refused as "budget exhausted (0
of 100000 usd_micros spent on grant ...)" with ``budget_exhausted``: the amount asked was
dropped, the gateway answered 402 ``budget_exhausted`` and the LangGraph middleware ended the run
as on a spent budget. Such a call is now refused as one no budget like it could ever hold, as a
call larger than a quota's whole limit is: its reason says what it asks for, the budget's limit
and to ask for less; ``budget_never_fits``, not ``budget_exhausted``; the gateway answers 402
``budget_too_small``; the middleware puts no stop mark on it. A call that does not fit only
because of what was spent stays "budget exhausted", with the spent figures.

Real components: a Gate on a SQLite file; the gateway on loopback HTTP before simulated vLLM
backends (``test_gateway``'s fixtures)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from datetime import timedelta
from pathlib import Path

import openai
import pytest
from test_gate_budgets import Books
from test_gateway import MODEL, Env, _messages

from agentgate.capabilities import Call
from agentgate.integrations.langgraph._stops import _BUDGET_KEY, STOP_KEY, _stop_mark

pytest_plugins = ("test_gateway",)  # its ``backends`` and ``env`` fixtures


@pytest.fixture
def books(tmp_path: Path) -> Iterator[Books]:
    made = Books(tmp_path / "agentgate.db")
    yield made
    made.gate.close()


def test_a_call_above_the_whole_budget_is_refused_saying_what_it_asks_not_as_exhausted(books: Books) -> None:
    """Review R82: 10,000 output tokens at $15 per million (150,000 micro-dollars) on a budget of
    100,000: the reason names both amounts and what to do; nothing is reserved or spent."""
    auth = books.gate.authorize(books.bot, Call.model("big"), tokens=(0, 10_000))
    assert not auth.allowed and auth.budget_never_fits and not auth.budget_exhausted
    (reason,) = auth.reasons
    grant = books.bot.chain.ids[-1]
    assert reason == (
        f"the call asks for 150000 usd_micros, more than the whole budget of grant {grant[:12]} "
        "(100000 usd_micros), which can never hold it: ask for less (for a model call, a lower max_tokens)"
    )
    assert "Do not retry this call" in auth.explain()
    assert books.gate.ledger.usage(grant) in ((0, 0), None)
    assert books.gate.authorize(books.bot, Call.model("big"), tokens=(0, 100)).allowed  # 1,500 fits


@pytest.mark.parametrize("tokens", [(2**63, 1), (2**70, 1)])
def test_an_estimate_past_what_any_budget_holds_is_refused_as_never_fitting(
    books: Books, tokens: tuple[int, int]
) -> None:
    """Review R82: an estimate of 2**63 tokens or more was "budget exhausted (0 of 100000 ...)".
    It never fits; its amount is not quoted whole."""
    auth = books.gate.authorize(books.bot, Call.model("big"), tokens=tokens)
    assert not auth.allowed and auth.budget_never_fits and not auth.budget_exhausted
    assert auth.reasons[0].startswith(f"the call asks for more than {2**63 - 1} usd_micros"), auth.reasons


def test_a_call_that_does_not_fit_what_is_left_is_still_budget_exhausted(books: Books) -> None:
    """Review R82: a call the budget could hold unspent, refused for what was spent, stays an
    exhausted budget with its spent figures."""
    for _ in range(5):  # 18,000 micro-dollars each: 90,000 of 100,000 spent
        auth = books.gate.authorize(books.bot, Call.model("big"), tokens=(1000, 1000))
        books.gate.run(auth, lambda: "t", spent=lambda _: (1000, 1000))
    refused = books.gate.authorize(books.bot, Call.model("big"), tokens=(1000, 1000))
    assert not refused.allowed and refused.budget_exhausted and not refused.budget_never_fits
    assert refused.reasons[0].startswith("budget exhausted (90000 of 100000 usd_micros spent"), (
        refused.reasons
    )


def test_a_call_above_a_sub_agents_whole_budget_names_its_grant(books: Books) -> None:
    """Review R82: the budget named is the one the call can never fit, here the sub-agent's own
    (1,000 micro-dollars), not its supervisor's (100,000), which it would fit."""
    kid = books.gate.delegate(
        books.bot,
        name="kid",
        key=books.keys["kid"],
        capabilities=["model:big"],
        ttl=timedelta(seconds=60),
        budget=1000,
    )
    auth = books.gate.authorize(kid, Call.model("big"), tokens=(0, 100))  # 1,500
    assert not auth.allowed and auth.budget_never_fits
    assert f"whole budget of grant {kid.chain.ids[-1][:12]} (1000 usd_micros)" in auth.reasons[0]


def test_the_langgraph_middleware_marks_a_model_call_that_never_fits_as_a_budget_stop(books: Books) -> None:
    """Review R82: a model call that never fits carries the budget's stop mark, as an exhausted
    budget's does (the run's next model call asks as much; a sub-agent's such refusal ends its
    supervisor's, ``_paid_for_nothing``); a tool call that never fits carries none (as a quota's
    never-fits does not): the model may do without the tool."""
    never = books.gate.authorize(books.bot, Call.model("big"), tokens=(0, 10_000))
    assert never.budget_never_fits and _stop_mark(never, books.gate) == {STOP_KEY: True, _BUDGET_KEY: True}
    tool = replace(never, call=Call.tool("lookup", {}))
    assert _stop_mark(tool, books.gate) is None
    for _ in range(5):
        auth = books.gate.authorize(books.bot, Call.model("big"), tokens=(1000, 1000))
        books.gate.run(auth, lambda: "t", spent=lambda _: (1000, 1000))
    spent = books.gate.authorize(books.bot, Call.model("big"), tokens=(1000, 1000))
    assert _stop_mark(spent, books.gate) == {STOP_KEY: True, _BUDGET_KEY: True}


def test_the_gateway_answers_a_call_above_the_whole_budget_402_budget_too_small(env: Env) -> None:
    """Review R82: the gateway answered 402 ``budget_exhausted`` for a ``max_tokens`` priced above
    the caller's whole budget (100 micro-dollars). It answers 402 ``budget_too_small``, its message
    what the call asks for and the budget's limit; nothing charged, the refusal audited."""
    client = env.openai(env.poor)
    before, count = env.ledger(), len(env.entries())
    with pytest.raises(openai.APIStatusError) as raised:
        client.chat.completions.create(model=MODEL, messages=_messages(), max_tokens=200)
    assert raised.value.status_code == 402
    error = raised.value.body
    assert isinstance(error, dict) and error["code"] == "budget_too_small"
    assert "more than the whole budget" in error["message"] and "(100 usd_micros)" in error["message"]
    assert "max_tokens" in error["message"] and "budget exhausted" not in error["message"]
    assert env.ledger() == before and [e.kind for e in env.entries()[count:]] == ["deny"]
