"""The fair queue's counts (agentgate/tasks/_fair.py) above an agent count children, not calls."""

from __future__ import annotations

from agentgate.tasks._fair import Entry, FairQueue


def _push(queue: FairQueue[str], name: str, tenant: str, agent: str, tool: str = "t") -> Entry[str]:
    entry = Entry(name)
    queue.push_entry(entry, 0, "c", 1.0, tenant, 1.0, agent, tool)
    return entry


def test_a_call_to_a_tool_its_agent_already_waits_for_changes_only_the_agents_counts() -> None:
    """Review R70: every push and removal updated the call counts of all four nodes on its path
    (about 150 opcodes of the scheduler's ~2,500 per call); above the agent a reader only asks
    whether a child has calls waiting, so those nodes now count children, and a second call of an
    agent leaves them as they were."""
    queue: FairQueue[str] = FairQueue()
    first = _push(queue, "a1", "x", "a")
    root, klass, tenant, agent = first.path
    second = _push(queue, "a2", "x", "a")
    assert agent.backlog == 2 and agent.tools == {"t": 2}
    assert [(node.backlog, node.tools) for node in (root, klass, tenant)] == [(1, {"t": 1})] * 3
    _push(queue, "b1", "x", "b", "u")  # a second agent of the tenant, another tool
    assert tenant.backlog == 2 and tenant.tools == {"t": 1, "u": 1}
    assert klass.tools == {"t": 1, "u": 1} and klass.backlog == 1
    queue.discard(second)
    queue.discard(first)
    assert tenant.backlog == 1 and tenant.tools == {"u": 1} and "t" not in agent.queues
    assert queue.pop_tool("u") == "b1"
    assert [(node.backlog, node.tools) for node in (root, klass, tenant, agent)] == [(0, {})] * 4


def test_the_class_lent_to_a_call_is_found_only_for_another_call_at_any_level() -> None:
    """Review R70: with the counts above an agent counting children, ``most_urgent_class``'s
    'another call than the excluded one' looks down the excluded call's path: another call of its
    agent, another agent of its tenant, another tenant of its class each count; none does not."""
    for others in ((), (("x", "a"),), (("x", "b"),), (("y", "c"),)):
        queue: FairQueue[str] = FairQueue()
        excluded = _push(queue, "e", "x", "a")
        for tenant, agent in others:
            _push(queue, "o", tenant, agent)
        _push(queue, "other-tool", "z", "z", "u")
        found = queue.most_urgent_class(["t"], 1, excluded)
        assert found == ("c" if others else None), others
