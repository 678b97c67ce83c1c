"""A tool call refused before it is decided (an answer cut at its output limit, two calls sharing
an id, no such tool...) closes the approval request its own run has open for that call (a run
paused for an approval and resumed into such a refusal), never another run's: another thread of
the same agent may ask the same call (same tool, arguments and id: a model that numbers its calls
alike) and wait for its own approval."""

from __future__ import annotations

from pathlib import Path

import pytest
from langchain_core.messages import AIMessage
from test_langgraph_r68_invalid_tool_calls import GO, answering, deploy_gate, pending

from agentgate.capabilities import Call
from agentgate.errors import InputError


def test_a_cut_answer_in_one_thread_leaves_another_threads_approval_request_open(tmp_path: Path) -> None:
    """Review R68: the refusal of a call of a cut answer (thread b) closed, as denied, the
    approval request thread a had open for its call of the same tool under the same id: dana
    could no longer approve it."""
    gate, supervisor, deploy = deploy_gate(tmp_path)
    asking = AIMessage(content="", tool_calls=[{"name": "deploy", "args": {}, "id": "call_0"}])
    cut = AIMessage(
        content="",
        tool_calls=[{"name": "deploy", "args": {}, "id": "call_0"}],
        response_metadata={"finish_reason": "length"},
    )
    try:
        paused = answering(gate, asking, [deploy]).invoke(
            GO, {"configurable": {"thread_id": "a"}}, context=supervisor
        )
        assert paused["__interrupt__"]
        result = answering(gate, cut, [deploy]).invoke(
            GO, {"configurable": {"thread_id": "b"}}, context=supervisor
        )
        assert "cut at its output limit" in str(result["messages"][2].content)
        assert pending(gate) == 1
    finally:
        gate.close()


def test_a_refusal_before_the_decision_still_closes_its_own_runs_request(tmp_path: Path) -> None:
    """Review R68: scoped to its run, the refusal still closes the request of the call it
    refuses: the run paused for the approval, its answer then edited into a cut one (the same
    call, same id) and resumed, leaves no request pending."""
    gate, supervisor, deploy = deploy_gate(tmp_path)
    asking = AIMessage(content="", tool_calls=[{"name": "deploy", "args": {}, "id": "call_0"}])
    config = {"configurable": {"thread_id": "a"}}
    agent = answering(gate, asking, [deploy])
    try:
        assert agent.invoke(GO, config, context=supervisor)["__interrupt__"]
        assert pending(gate) == 1
        (answer,) = [m for m in agent.get_state(config).values["messages"] if isinstance(m, AIMessage)]
        cut = answer.model_copy(update={"response_metadata": {"finish_reason": "length"}})
        agent.update_state(config, {"messages": [cut]}, as_node="model")
        agent.invoke(None, config, context=supervisor)
        assert pending(gate) == 0
    finally:
        gate.close()


def test_record_refusal_refuses_an_asked_in_that_is_no_pair_of_text(tmp_path: Path) -> None:
    """Review R68: ``Gate.record_refusal``'s new ``asked_in`` is checked as ``authorize`` checks
    it: anything but ``None`` or a pair of text is an ``InputError`` naming it, nothing written."""
    gate, supervisor, _ = deploy_gate(tmp_path)
    try:
        before = len(list(gate.audit.entries()))
        with pytest.raises(InputError, match="asked_in must be a"):
            gate.record_refusal(supervisor, Call.tool("deploy"), ("no",), call_id="c", asked_in=("a", 1))  # type: ignore[arg-type]
        gate.flush()
        assert len(list(gate.audit.entries())) == before
    finally:
        gate.close()
