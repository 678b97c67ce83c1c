"""A model answer holding thousands of ``invalid_tool_calls`` (arguments that are no JSON object)
costs the store one transaction, as one holding a single such call does, and the audit log a
bounded number of entries: the first ``INVALID_CALLS_NAMED`` calls one entry each, then one more
entry for the next call saying exactly how many others the answer held and that none of them
ran. Nothing is allowed, nothing runs."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage
from test_langgraph import Team, _make_team
from test_langgraph import team as team  # the fixture
from test_langgraph_r68_invalid_tool_calls import GO, _agent, _invalid, _tool_entries

from agentgate.capabilities import Call
from agentgate.errors import InputError
from agentgate.integrations.langgraph._tool_calls import INVALID_CALLS_NAMED
from agentgate.store import Transaction


def _transactions_of_run(team: Team, answer: AIMessage, monkeypatch: pytest.MonkeyPatch) -> int:
    """How many store transactions the run of an agent whose model answers ``answer`` opens (the
    real store's, counted as they open)."""
    opened = 0
    real: Callable[..., AbstractContextManager[Transaction]] = team.gate.store.transaction

    def counted(*args: Any, **kwargs: Any) -> AbstractContextManager[Transaction]:
        nonlocal opened
        opened += 1
        return real(*args, **kwargs)

    monkeypatch.setattr(team.gate.store, "transaction", counted)
    _agent(team, [answer], gate_models=False).invoke(GO, context=team.supervisor)
    team.gate.flush()
    monkeypatch.setattr(team.gate.store, "transaction", real)
    return opened


def _answer(count: int) -> AIMessage:
    return AIMessage(
        content="", invalid_tool_calls=[_invalid("search", f"c{n}", f'{{"query": "{n}') for n in range(count)]
    )


def test_thousands_of_invalid_calls_cost_one_transaction_and_bounded_entries(
    team: Team, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Review R69: each invalid tool call of an answer was recorded in a decision transaction of
    its own (one audit append and one commit per call): a model answering 3000 of them cost 3000
    commits and 3000 entries. Now the answer's refusals share one transaction, and past the
    first ``INVALID_CALLS_NAMED`` one entry says how many more there were."""
    single = _transactions_of_run(team, _answer(1), monkeypatch)
    before = len(_tool_entries(team))
    other = _make_team(tmp_path / "flood")
    try:
        flood = _transactions_of_run(other, _answer(3000), monkeypatch)
        entries = _tool_entries(other)
        assert other.ran == []
    finally:
        other.gate.close()
    assert before == 1
    assert flood == single
    assert len(entries) == INVALID_CALLS_NAMED + 1
    assert {(e.kind, e.resource, len(e.reasons)) for e in entries} == {("deny", "tool:search", 1)}
    for n, entry in enumerate(entries):
        args = f'{{"query": "{n}'
        assert f"sha256:{hashlib.sha256(args.encode()).hexdigest()}" in entry.reasons[0]
    last = entries[-1].reasons[0]
    unnamed = 3000 - INVALID_CALLS_NAMED - 1
    assert f"the answer held 3000 invalid tool calls; {unnamed} more after this one are not named" in last
    assert "none of them ran" in last


def test_invalid_calls_under_the_bound_are_each_named_in_one_transaction(
    team: Team, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Review R69: up to ``INVALID_CALLS_NAMED`` invalid calls each get their entry, all in the
    one transaction a single such call costs, and no summary is added."""
    single = _transactions_of_run(team, _answer(1), monkeypatch)
    other = _make_team(tmp_path / "few")
    try:
        few = _transactions_of_run(other, _answer(INVALID_CALLS_NAMED + 1), monkeypatch)
        entries = _tool_entries(other)
    finally:
        other.gate.close()
    assert few == single
    assert len(entries) == INVALID_CALLS_NAMED + 1
    assert not any("more after this one" in e.reasons[0] for e in entries)


def test_record_refusals_writes_all_or_none(team: Team) -> None:
    """Review R69: ``Gate.record_refusals`` (the batch the model hook writes an answer's invalid
    calls with) checks every refusal before writing any: a bad one is an ``InputError`` naming
    it, and nothing is written; the good ones are written in order."""
    size = team.gate.audit.size()
    with pytest.raises(InputError, match="call must be a Call, got a str"):
        team.gate.record_refusals(team.supervisor, [(Call.tool("search"), ["a"]), ("search", ["b"])])  # type: ignore[list-item]
    team.gate.flush()
    assert team.gate.audit.size() == size
    written = team.gate.record_refusals(
        team.supervisor, [(Call.tool("search"), ["a"]), (Call.tool("shell"), ["b"])]
    )
    assert [(r.verdict, r.call.resource, r.reasons) for r in written] == [
        ("deny", "tool:search", ("a",)),
        ("deny", "tool:shell", ("b",)),
    ]
    assert [e.index for e in _tool_entries(team)] == [r.audit_index for r in written]
