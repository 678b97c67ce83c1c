"""Review R88: a value that holds itself (a tool's artifact that is a tree with parent links, a
hand-made answer's tool call arguments) no longer hangs the run. The walks that look for integers
beyond 64 bits (``_tool_calls._holds_out_of_range``, ``_integers_out_of_range``) and the count of
an answer's characters (``dispatch._sse.text_chars``) went into every object and list each time
they met it, so they never ended on a cycle: the call was allowed and its outcome never written.
Each now walks an object or list once. Each run here is waited for on a thread (``_finished``), a
guard against the hang that measures nothing: a run that never ends fails its test within a minute
instead of holding the suite."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage, ToolMessage
from test_langgraph_r58_huge_integer import _run
from test_langgraph_r59b_tool_results import ARGS, _Answering

from agentgate.dispatch._sse import text_chars
from agentgate.integrations.langgraph._tool_calls import _holds_out_of_range, _integers_out_of_range

HUGE = 10**30


@pytest.fixture
def answering(tmp_path: Path) -> Iterator[_Answering]:
    made = _Answering(tmp_path)
    yield made
    made.gate.close()


def _finished(run: Callable[[], Any]) -> Any:
    """What ``run`` returns, run on a thread that must end within 60 s (it takes well under one)."""
    done: list[Any] = []
    failed: list[BaseException] = []

    def target() -> None:
        try:
            done.append(run())
        except BaseException as exc:
            failed.append(exc)

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(60)
    assert not thread.is_alive(), "the run did not end (a walk that never ends on a cycle)"
    if failed:
        raise failed[0]
    return done[0]


def _tree(root_id: int) -> dict[str, Any]:
    """A tree whose leaf links back to its root: a cycle."""
    root: dict[str, Any] = {"id": root_id, "children": []}
    root["children"].append({"name": "leaf", "parent": root})
    return root


def _asked(args: dict[str, Any]) -> AIMessage:
    return AIMessage(content="", tool_calls=[{"name": "payments.refund", "args": args, "id": "c1"}])


def _entries(answering: _Answering) -> list[tuple[str, str | None]]:
    return [(e.kind, e.status) for e in answering.refusals()]


def test_a_cyclic_artifact_is_kept_as_the_tool_made_it_without_a_checkpointer(answering: _Answering) -> None:
    artifact = _tree(7)
    answering.use(("found", artifact))
    result = _finished(lambda: _run(answering, "none", "sync", _asked(ARGS)))
    [answer] = [m for m in result["messages"] if isinstance(m, ToolMessage)]
    assert answer.status == "success" and answer.artifact is artifact
    assert result["messages"][-1].content == "done"
    assert _entries(answering) == [("allow", None), ("outcome", "ok")]


@pytest.mark.parametrize("saver", ["none", "memory"])
def test_a_cyclic_artifact_holding_an_integer_beyond_64_bits_is_not_kept(
    answering: _Answering, saver: str
) -> None:
    """The integer is turned to text where the walk first meets it; the leaf's link back to the
    tool's own root still holds it, so the result is not kept and the call is recorded failed."""
    answering.use(("found", _tree(HUGE)))
    result = _finished(lambda: _run(answering, saver, "sync", _asked(ARGS)))
    [answer] = [m for m in result["messages"] if isinstance(m, ToolMessage)]
    assert answer.status == "error" and "ran, but its result holds" in str(answer.content)
    assert result["messages"][-1].content == "done"
    assert answering.refunded == [5]  # it ran once
    assert _entries(answering) == [("allow", None), ("outcome", "error")]


def test_a_cyclic_artifact_with_a_checkpointer_is_not_kept(answering: _Answering) -> None:
    answering.use(("found", _tree(7)))
    result = _finished(lambda: _run(answering, "memory", "sync", _asked(ARGS)))
    [answer] = [m for m in result["messages"] if isinstance(m, ToolMessage)]
    assert answer.status == "error" and "the run's checkpointer cannot store" in str(answer.content)
    assert _entries(answering) == [("allow", None), ("outcome", "error")]


@pytest.mark.parametrize(
    ("amount", "said"),
    [(1, "cannot be digested"), (HUGE, "an integer beyond the range a call's arguments may hold")],
)
def test_tool_call_arguments_that_hold_themselves_are_refused(
    answering: _Answering, amount: int, said: str
) -> None:
    """A hand-made answer whose call's arguments hold themselves: the model hook and the tool hook
    both walk them; the call is refused (a deny), never run, and the run goes on."""
    note: dict[str, Any] = {"text": "n", "amount": amount}
    note["self"] = note
    answering.use(("refunded", None))
    result = _finished(lambda: _run(answering, "none", "sync", _asked({**ARGS, "note": note})))
    [answer] = [m for m in result["messages"] if isinstance(m, ToolMessage)]
    assert answer.status == "error" and said in str(answer.content)
    assert result["messages"][-1].content == "done"
    assert answering.refunded == []
    assert _entries(answering) == [("deny", None)]


def test_the_walks_end_on_cycles_and_on_lists_shared_at_every_level() -> None:
    shared: list[Any] = ["x"]
    for _ in range(64):  # 2**64 paths, 65 lists
        shared = [shared, shared]
    looped: list[Any] = [HUGE]
    looped.append(looped)
    assert _finished(lambda: (_holds_out_of_range(shared), _integers_out_of_range(shared))) == (False, [])
    assert _finished(lambda: _integers_out_of_range(looped)) == [((0,), HUGE)]
    assert _finished(lambda: text_chars([shared])) == 1
    assert _finished(lambda: text_chars([_tree(1)])) == len("leaf")
