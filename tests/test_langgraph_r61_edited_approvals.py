"""Review R61: an approval meets a call edited in the run's state (``update_state``) before the
resume, or an approval that does not hold for the call it is presented to; real langgraph and
langchain, real SQLite stores, ``InMemorySaver`` (``SqliteSaver`` across a restart)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

import pytest
from _raw_sqlite import opened
from langchain_core.messages import AIMessage, ToolMessage
from langchain_core.tools import InjectedToolArg, InjectedToolCallId, StructuredTool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.types import Command

from agentgate.gate import AgentIdentity, Approval, Gate
from agentgate.integrations.langgraph import ScriptedChatModel, create_gated_agent
from agentgate.keys import SigningKey
from agentgate.policy import parse_policy
from agentgate.store import SQLiteStore

POLICY = """
version: 1
trust_anchors: {{root: {{did: "{root}"}}}}
principals:
  agent: {{kind: agent, did: "{agent}", roles: [worker]}}
  dana: {{kind: human, did: "{dana}", roles: [owner]}}
  eve: {{kind: human, did: "{eve}", roles: [owner]}}
tools:
  transfer:
    args:
      amount: {{type: number, required: true}}
      to: {{type: string, required: true}}
    loggable: [amount, to]
roles:
  worker:
    kind: agent
    capabilities: [{{resource: tool:transfer, constraints: {{to: {{in: [bob, carol]}}}}}}]
    ttl_s: 3600
  owner:
    kind: human
    capabilities: [{{resource: tool:transfer}}]
    ttl_s: 3600
approvals:
  transfer:
    resource: tool:transfer
    approvers: [dana]
    expiry_s: 600
"""

GO = {"messages": [{"role": "user", "content": "go"}]}


@dataclass
class Bank:
    path: Path
    keys: dict[str, SigningKey]
    gate: Gate
    agent: AgentIdentity
    ran: list[tuple[object, str, str, str]] = field(default_factory=list)
    """Each transfer run: the amount as the tool got it, the payee, the note, the tool call id."""

    def policy_text(self) -> str:
        return POLICY.format(**{name: key.did for name, key in self.keys.items()})

    def graph(self, *turns: AIMessage, checkpointer: Any = None) -> Any:
        def transfer(
            amount: Any,
            to: str,
            tool_call_id: Annotated[str, InjectedToolCallId],
            note: Annotated[str, InjectedToolArg] = "none",
        ) -> str:
            self.ran.append((amount, to, note, tool_call_id))
            return f"sent {amount!r} to {to}"

        tool = StructuredTool.from_function(func=transfer, name="transfer", description="transfer")
        return create_gated_agent(
            self.gate,
            name="agent",
            model=ScriptedChatModel(turns=list(turns)),
            tools=[tool],
            checkpointer=InMemorySaver() if checkpointer is None else checkpointer,
            gate_models=False,
        )

    def sign(self, payload: dict[str, Any], who: str = "dana") -> dict[str, Any]:
        return self.gate.approve(payload, self.keys[who])

    def kinds(self) -> list[str]:
        self.gate.flush()
        return [e.kind for e in self.gate.audit.entries()]

    def open_requests(self) -> list[tuple[Any, ...]]:
        return self.gate.store.query("SELECT id FROM approvals WHERE state IN ('pending', 'approved')")


@pytest.fixture
def bank(tmp_path: Path) -> Iterator[Bank]:
    keys = {name: SigningKey.generate() for name in ("root", "agent", "dana", "eve")}
    text = POLICY.format(**{name: key.did for name, key in keys.items()})
    gate = Gate(parse_policy(text, source="bank.yaml"), SQLiteStore(tmp_path / "agentgate.db"))
    agent = gate.issue(keys["root"], name="agent", key=keys["agent"], role="worker")
    made = Bank(tmp_path, keys, gate, agent)
    yield made
    made.gate.close()


def _turn(*calls: tuple[dict[str, Any], str]) -> AIMessage:
    return AIMessage(content="", tool_calls=[{"name": "transfer", "args": a, "id": i} for a, i in calls])


def _thread(name: str) -> dict[str, Any]:
    return {"configurable": {"thread_id": name}}


def _edit(graph: Any, config: dict[str, Any], args: dict[str, Any]) -> None:
    """Rewrite, in the run's state, the arguments of the interrupted call (the answer's id kept)."""
    proposed = [m for m in graph.get_state(config).values["messages"] if isinstance(m, AIMessage)][-1]
    (call,) = proposed.tool_calls
    rewritten = AIMessage(content="", id=proposed.id, tool_calls=[{**call, "args": args}])
    graph.update_state(config, {"messages": [rewritten]}, as_node="model")


def _reasons(interrupted: dict[str, Any]) -> list[str]:
    (pending,) = interrupted["__interrupt__"]
    return list(pending.value["request"]["reasons"])


def test_an_edit_that_only_reorders_the_arguments_keeps_the_approval(bank: Bank) -> None:
    """Review R61: the same arguments in another order are the same call (the digest is over
    canonical JSON): the approval given before the edit runs it, once, with no second request."""
    graph = bank.graph(_turn(({"amount": 5, "to": "bob"}, "t-1")))
    config = _thread("reorder")
    paused = graph.invoke(GO, config, context=bank.agent)
    approval = bank.sign(paused["__interrupt__"][0].value)
    _edit(graph, config, {"to": "bob", "amount": 5})
    done = graph.invoke(Command(resume=approval), config, context=bank.agent)
    assert "__interrupt__" not in done
    assert bank.ran == [(5, "bob", "none", "t-1")]
    assert bank.kinds().count("approval_required") == 1 and bank.open_requests() == []


@pytest.mark.parametrize("edited", [5.0, "5", True], ids=["float", "text", "boolean"])
def test_an_edit_that_changes_an_arguments_type_is_decided_again(bank: Bank, edited: object) -> None:
    """Review R61: 5, 5.0, "5" and True are four calls (a tool may treat them apart): the approval
    of ``amount: 5`` does not run the edited call. A number is asked for again, the person resuming
    told why the approval did not count, and runs once with its own approval; text and a boolean
    are refused by the policy's ``type: number`` without asking anyone. No request stays open."""
    graph = bank.graph(_turn(({"amount": 5, "to": "bob"}, "t-1")))
    config = _thread("types")
    paused = graph.invoke(GO, config, context=bank.agent)
    approval = bank.sign(paused["__interrupt__"][0].value)
    _edit(graph, config, {"amount": edited, "to": "bob"})
    resumed = graph.invoke(Command(resume=approval), config, context=bank.agent)
    assert bank.ran == []
    if isinstance(edited, float):
        assert resumed["__interrupt__"][0].value["request"]["args"] == {"amount": 5.0, "to": "bob"}
        assert "approval not counted: it was given for another call" in _reasons(resumed)
        again = bank.sign(resumed["__interrupt__"][0].value)
        done = graph.invoke(Command(resume=again), config, context=bank.agent)
        assert "__interrupt__" not in done
        assert bank.ran == [(5.0, "bob", "none", "t-1")] and type(bank.ran[0][0]) is float
    else:
        assert "__interrupt__" not in resumed
        (refused,) = [m for m in resumed["messages"] if isinstance(m, ToolMessage)]
        assert refused.status == "error" and "amount" in str(refused.content)
        _assert_closed_as_superseded(bank, {"amount": 5, "to": "bob"})
    assert bank.open_requests() == []
    assert bank.gate.verify().ok


def _assert_closed_as_superseded(bank: Bank, asked_args: dict[str, Any]) -> None:
    """The request asked for ``asked_args`` is answered in the log: a ``deny`` entry refers to its
    ``approval_required`` entry and says the call was changed and refused."""
    bank.gate.flush()
    entries = list(bank.gate.audit.entries())
    (asked,) = [e for e in entries if e.kind == "approval_required"]
    assert asked.args == asked_args
    (closed,) = [e for e in entries if e.kind == "deny" and e.ref == asked.index]
    assert "was changed and refused" in closed.reasons[0]
    assert (closed.resource, closed.args_digest) == (asked.resource, asked.args_digest)


def test_an_edit_the_grant_refuses_closes_the_request_it_replaced(bank: Bank) -> None:
    """Review R61: an interrupted transfer edited to a payee the grant does not cover is refused
    without asking anyone, and the request asked for the call before the edit is closed with it
    (until review R61 it stayed pending, listed to approvers, its entry never answered)."""
    graph = bank.graph(_turn(({"amount": 5, "to": "bob"}, "t-1")))
    config = _thread("payee")
    paused = graph.invoke(GO, config, context=bank.agent)
    approval = bank.sign(paused["__interrupt__"][0].value)
    _edit(graph, config, {"amount": 5, "to": "mallory"})
    resumed = graph.invoke(Command(resume=approval), config, context=bank.agent)
    assert "__interrupt__" not in resumed and bank.ran == []
    assert bank.open_requests() == []
    _assert_closed_as_superseded(bank, {"amount": 5, "to": "bob"})
    assert bank.gate.verify().ok


def test_an_edit_that_adds_injected_arguments_runs_with_the_injected_values(bank: Bank) -> None:
    """Review R61: an edit that writes values for the tool's injected arguments (a plain
    ``InjectedToolArg`` and an ``InjectedToolCallId``) changes neither the call decided (they are
    not the model's to choose, ``_model_args``) nor what runs (LangGraph's ``ToolNode`` drops
    them and injects its own): the approval runs the call once, with the default note and the
    real tool call id, not the edit's."""
    graph = bank.graph(_turn(({"amount": 5, "to": "bob"}, "t-1")))
    config = _thread("injected")
    paused = graph.invoke(GO, config, context=bank.agent)
    approval = bank.sign(paused["__interrupt__"][0].value)
    _edit(graph, config, {"amount": 5, "to": "bob", "note": "edited", "tool_call_id": "forged"})
    done = graph.invoke(Command(resume=approval), config, context=bank.agent)
    assert "__interrupt__" not in done
    assert bank.ran == [(5, "bob", "none", "t-1")]
    assert bank.kinds().count("approval_required") == 1 and bank.open_requests() == []


def _refused_then_resumed(bank: Bank, graph: Any, config: dict[str, Any], bad: Any, why: str) -> None:
    """Resume with ``bad``: nothing runs, the run asks again and says ``why``; then resume with
    dana's approval of the request shown: the call runs."""
    ran = list(bank.ran)
    again = graph.invoke(Command(resume=bad), config, context=bank.agent)
    assert bank.ran == ran
    assert why in _reasons(again)
    done = graph.invoke(
        Command(resume=bank.sign(again["__interrupt__"][0].value)), config, context=bank.agent
    )
    assert "__interrupt__" not in done and len(bank.ran) == len(ran) + 1


def test_an_approval_signed_by_the_requester_is_refused_and_the_run_stays_resumable(bank: Bank) -> None:
    """Review R61: the requesting agent's own signature does not count, says so, and a good
    approval still resumes the run."""
    graph = bank.graph(_turn(({"amount": 5, "to": "bob"}, "t-1")))
    config = _thread("self")
    paused = graph.invoke(GO, config, context=bank.agent)
    # Signed with Approval.sign: Gate.approve refuses the requester's key since review R71.
    own = Approval.sign(paused["__interrupt__"][0].value, bank.keys["agent"]).to_dict()
    _refused_then_resumed(
        bank, graph, config, own, "approval not counted: the approver must not be the requester"
    )
    assert bank.ran == [(5, "bob", "none", "t-1")]


def test_an_approval_for_another_call_id_is_refused_and_the_run_stays_resumable(bank: Bank) -> None:
    """Review R61: dana's approval of the same transfer asked in another thread under another
    tool call id does not run this one, and is not used up by it."""
    graph = bank.graph(_turn(({"amount": 5, "to": "bob"}, "t-1")))
    other = bank.graph(_turn(({"amount": 5, "to": "bob"}, "t-2")))
    config, elsewhere = _thread("here"), _thread("there")
    graph.invoke(GO, config, context=bank.agent)
    theirs = bank.sign(other.invoke(GO, elsewhere, context=bank.agent)["__interrupt__"][0].value)
    _refused_then_resumed(bank, graph, config, theirs, "approval not counted: it was given for another call")
    done = other.invoke(Command(resume=theirs), elsewhere, context=bank.agent)  # still good there
    assert "__interrupt__" not in done
    assert sorted(call_id for *_, call_id in bank.ran) == ["t-1", "t-2"]


def test_an_approval_replayed_on_the_threads_next_interrupt_is_refused(bank: Bank) -> None:
    """Review R61: the approval that ran the thread's first transfer, presented to the second
    transfer's interrupt in the same thread, counts for nothing; a good one runs the second."""
    graph = bank.graph(_turn(({"amount": 5, "to": "bob"}, "t-1")), _turn(({"amount": 5, "to": "bob"}, "t-2")))
    config = _thread("replay")
    first = bank.sign(graph.invoke(GO, config, context=bank.agent)["__interrupt__"][0].value)
    second = graph.invoke(Command(resume=first), config, context=bank.agent)
    assert bank.ran == [(5, "bob", "none", "t-1")] and "__interrupt__" in second
    _refused_then_resumed(bank, graph, config, first, "approval not counted: it was given for another call")
    assert [call_id for *_, call_id in bank.ran] == ["t-1", "t-2"]
    assert bank.open_requests() == []


def test_an_approval_by_a_key_rotated_out_is_refused_after_a_restart(bank: Bank) -> None:
    """Review R61: dana's key is replaced in the policy while the run waits (a restart with the new
    policy): an approval signed with the old key is not one of this call's approvers', is said to
    be so, and dana's approval with the new key resumes the run, once."""
    config = _thread("rotated")
    with opened(bank.path / "checkpoints.sqlite", check_same_thread=False) as conn:
        paused = bank.graph(
            _turn(({"amount": 5, "to": "bob"}, "t-1")), checkpointer=SqliteSaver(conn)
        ).invoke(GO, config, context=bank.agent)
    old = bank.sign(paused["__interrupt__"][0].value)
    bank.gate.close()
    bank.keys["dana"] = SigningKey.generate()
    policy = parse_policy(bank.policy_text(), source="bank.yaml")
    bank.gate = Gate(policy, SQLiteStore(bank.path / "agentgate.db"))
    try:
        with opened(bank.path / "checkpoints.sqlite", check_same_thread=False) as conn:
            graph = bank.graph(_turn(({"amount": 5, "to": "bob"}, "t-1")), checkpointer=SqliteSaver(conn))
            _refused_then_resumed(
                bank,
                graph,
                config,
                old,
                "approval not counted: its approver is not one of this call's approvers",
            )
    finally:
        conn.close()
    assert bank.ran == [(5, "bob", "none", "t-1")]
    assert bank.open_requests() == []
