"""The fair queue's counts (agentgate/tasks/_fair.py) after random operations: a model-based test.

Since review R70 a node above an agent counts its children with calls waiting (in all and per
tool) and is updated only when a child starts or stops having some, and a node with one child
names it (``only``). After every operation of a seeded random run (pushes, removals, moves
between ranks and classes, both kinds of pop) every node's counts must equal a recount from the
live entries, every live entry's path must be the tree's, every heap must hold each waiting
child's live entry, ``pop_tool`` must serve the call ``pop``'s general walk serves, ``pop`` must
serve a call that can start whenever one can, and ``most_urgent_class`` must agree with a recount.
"""

from __future__ import annotations

import copy
import random
from collections import Counter

import pytest

from agentgate.tasks._fair import Entry, FairQueue, _Node

_TOOLS = ("t", "u", "v")
_CLASSES = {"hi": 3.0, "lo": 1.0}
_RANKS = (0, 1)


def _tenant_weight(tenant: str) -> float:
    return 1.0 + int(tenant[1:]) % 3


def _check(queue: FairQueue[int], live: dict[int, Entry[int]]) -> None:
    """Recount everything ``queue`` keeps from ``live`` (the entries the model says wait)."""
    assert queue.size == len(live)
    assert queue.tenant_sizes == Counter(entry.tenant for entry in live.values())
    assert queue.tool_sizes == Counter(entry.tool for entry in live.values())
    assert queue._order == sorted(queue._ranks)
    assert [queue._ranks[rank] for rank in queue._order] == queue._roots
    for entry in live.values():
        assert entry.alive
        root, klass, tenant, agent = entry.path
        assert queue._ranks[int(root.key)] is root
        assert root.children[klass.key] is klass
        assert klass.children[tenant.key] is tenant
        assert tenant.children[agent.key] is agent
        assert entry in agent.queues[entry.tool]
    by_agent: dict[int, list[Entry[int]]] = {}
    for entry in live.values():
        by_agent.setdefault(id(entry.path[3]), []).append(entry)
    for root in queue._roots:
        _check_node(root, by_agent, depth=0)


def _check_node(node: _Node, by_agent: dict[int, list[Entry[int]]], depth: int) -> None:
    assert node.only is (next(iter(node.children.values())) if len(node.children) == 1 else None)
    if depth == 3:  # an agent: its calls waiting
        mine = by_agent.get(id(node), [])
        assert node.backlog == len(mine)
        assert node.tools == Counter(entry.tool for entry in mine)
        assert set(node.queues) == set(node.tools)
        for tool, fifo in node.queues.items():
            seqs = [entry.seq for entry in fifo]
            assert seqs == sorted(seqs), f"FIFO of {node.key}/{tool} out of seq order"
            assert sum(entry.alive for entry in fifo) == node.tools[tool]
        return
    for child in node.children.values():
        _check_node(child, by_agent, depth + 1)
    waiting = [child for child in node.children.values() if child.backlog]
    assert node.backlog == len(waiting)
    assert node.tools == Counter(tool for child in waiting for tool in child.tools)
    if node.heap is not None:
        for child in waiting:
            assert child.entry is not None and child.entry in node.heap
            assert child.entry[0] == child.pass_


def _most_urgent_class(
    queue: FairQueue[int], live: dict[int, Entry[int]], tools: set[str], above: int, excluding: Entry[int]
) -> str | None:
    """``most_urgent_class`` from the live entries: the lowest rank below ``above`` with a call to
    one of ``tools`` other than ``excluding``, its first class (by creation) with one."""
    for rank in sorted(queue._ranks):
        if rank >= above:
            return None
        for key in queue._ranks[rank].children:
            if any(
                entry is not excluding
                and entry.tool in tools
                and entry.path[0].key == str(rank)
                and entry.path[1].key == key
                for entry in live.values()
            ):
                return key
    return None


def _random_open(rng: random.Random) -> set[str]:
    return set(rng.sample(_TOOLS, rng.randint(1, len(_TOOLS))))


@pytest.mark.parametrize("seed", range(3))
def test_counts_equal_a_recount_after_random_operations(seed: int) -> None:
    """Review R70: the counts above an agent are kept incrementally (children, not calls, and
    only when a child starts or stops having calls waiting); any drift (a push, removal, move,
    pop or sweep that missed a level, a heap crossing ``_HEAP_AT`` either way, ``only`` stale
    after a sweep) would be found by a recount after each operation."""
    rng = random.Random(seed)
    queue: FairQueue[int] = FairQueue()
    live: dict[int, Entry[int]] = {}
    dead: list[Entry[int]] = []
    made = 0
    # Many tenants and agents, so that heaps (32 waiting children) are built and dropped and idle
    # children are swept (16 children); few tools, so that per-tool counts overlap.
    for step in range(2000):
        phase = (step // 400) % 2  # fill, then drain, and again: heaps cross _HEAP_AT both ways
        choice = rng.random()
        if choice < (0.6 if phase == 0 else 0.25) or not live:
            made += 1
            entry = Entry(made)
            tenant = f"T{rng.randrange(48)}"
            agent = f"A{rng.randrange(40 if rng.random() < 0.5 else 3)}"
            priority = rng.choice(list(_CLASSES))
            queue.push_entry(
                entry,
                rng.choice(_RANKS),
                priority,
                _CLASSES[priority],
                tenant,
                _tenant_weight(tenant),
                agent,
                rng.choice(_TOOLS),
            )
            live[made] = entry
        elif choice < 0.7:
            item = rng.choice(list(live))
            entry = live.pop(item)
            queue.discard(entry)
            dead.append(entry)
            if rng.random() < 0.3:
                queue.discard(rng.choice(dead))  # a second removal changes nothing
        elif choice < 0.8:
            entry = live[rng.choice(list(live))]
            priority = rng.choice(list(_CLASSES))
            queue.move(
                entry,
                rng.choice(_RANKS),
                priority,
                _CLASSES[priority],
                _tenant_weight(entry.tenant),
                back=rng.random() < 0.5,
            )
        elif choice < 0.9:
            tool = rng.choice(sorted(queue.tool_sizes))
            if rng.random() < 0.2:  # the general walk pop_tool shortcuts, on a copy of the same state
                expected = copy.deepcopy(queue).pop({tool}, lambda tenant: False, None)
                got = queue.pop_tool(tool)
                assert got == expected
            else:
                got = queue.pop_tool(tool)
            assert live.pop(got).tool == tool
        else:
            open_tools = _random_open(rng)
            blocked = frozenset(f"T{n}" for n in rng.sample(range(48), 10))
            tenants_limited, agents_limited = rng.random() < 0.5, rng.random() < 0.5
            got_or_none = queue.pop(
                open_tools,
                blocked.__contains__ if tenants_limited else None,
                (lambda tenant, agent: agent == "A0") if agents_limited else None,
            )
            startable = [
                entry
                for entry in live.values()
                if entry.tool in open_tools
                and not (tenants_limited and entry.tenant in blocked)
                and not (agents_limited and entry.path[3].key == "A0")
            ]
            assert (got_or_none is None) == (not startable)  # work-conserving
            if got_or_none is not None:
                entry = live.pop(got_or_none)
                assert entry in startable
        _check(queue, live)
        if live and step % 5 == 0:
            excluding = live[rng.choice(list(live))]
            tools = _random_open(rng)
            above = rng.choice((1, 2))
            found = queue.most_urgent_class(tools, above, excluding)
            assert found == _most_urgent_class(queue, live, tools, above, excluding)
