"""The fair queue (agentgate/tasks/_fair.py) against its own copy from before review R71 (fairq2).

Review R71 (fairq2) wrote the removal of a served call into ``_serve`` (no ``discard`` call per
dispatch, the call taken off the head of its FIFO at once instead of lazily at the next pop), and
gave each node above an agent, and the queue, per-tool lists of the children with calls waiting
(``holders``), which ``pop_tool`` and ``_first`` walk instead of every child.

The order served must not change for any sequence of operations: random
runs of pushes (random rank, class, tenant, agent, tool), removals, moves between ranks and
classes (the lending of a nested call's ancestors), both kinds of pop, ``most_urgent_class`` and
``rank_of`` go to the queue and to ``ReferenceFairQueue``, the class as it was before, copied
unchanged below; every answer, item served and size must be the same.
"""

from __future__ import annotations

import bisect
import heapq
import operator
import random
from collections import deque
from collections.abc import Iterable, Iterator
from fractions import Fraction
from typing import Any, Generic, TypeVar

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentgate.tasks import _fair
from agentgate.tasks._fair import (
    _SWEEP_MIN,
    AgentBlocked,
    Blocked,
    Entry,
    FairQueue,
    _entries,
    _HeapEntry,
    _Node,
)

T = TypeVar("T")
_STRIDE_SCALE = _fair._STRIDE_SCALE
_HEAP_AT = _fair._HEAP_AT
_HEAP_OFF = _fair._HEAP_OFF


class ReferenceFairQueue(Generic[T]):
    """The reference: ``FairQueue`` as it was before review R71 (fairq2), copied unchanged."""

    def __init__(self) -> None:
        self._ranks: dict[int, _Node] = {}
        self._order: list[int] = []
        self._roots: list[_Node] = []  # the nodes of ``_order``'s ranks, in that order
        self._seq = 0
        self.size = 0
        self.tenant_sizes: dict[str, int] = {}
        self.tool_sizes: dict[str, int] = {}
        self._paths: dict[tuple[int, str, str, str], tuple[_Node, ...]] = {}

    def push_entry(
        self,
        entry: Entry[T],
        rank: int,
        priority: str,
        priority_weight: float,
        tenant: str,
        tenant_weight: float,
        agent: str,
        tool: str,
    ) -> None:
        """Append ``entry`` (made by the caller, not yet in any queue, its ``item`` set) at the tail
        of its tool FIFO.

        The weights of a class and a tenant are taken when their node is first made (they come
        from a frozen configuration).
        """
        path = self._paths.get((rank, priority, tenant, agent))
        if path is None:
            path = self._path(rank, priority, priority_weight, tenant, tenant_weight, agent)
        leaf = path[3]
        queue = leaf.queues.get(tool)
        if queue is None:
            queue = leaf.queues[tool] = deque()
        self._seq += 1
        entry.seq = self._seq
        entry.tenant = tenant
        entry.tool = tool
        entry.path = path
        entry.alive = True
        queue.append(entry)
        counts = leaf.tools
        had = counts.get(tool, 0)
        counts[tool] = had + 1
        if not had:  # the agent's first call to ``tool`` waiting: its ancestors may have none either
            for member in (path[2], path[1], path[0]):
                counts = member.tools
                had = counts.get(tool, 0)
                counts[tool] = had + 1
                if had:
                    break
        had = leaf.backlog
        leaf.backlog = had + 1
        if not had:  # the agent had nothing waiting: it enters its tenant's waiting children, and so on up
            child = leaf
            for parent in (path[2], path[1], path[0]):
                child.pass_ = max(child.pass_, parent.vtime)
                had = parent.backlog
                parent.backlog = had + 1
                if parent.heap is not None:
                    _heap_push(parent, child)
                elif had + 1 >= _HEAP_AT:
                    _heap_build(parent)
                if had:
                    break
                child = parent
        self.size += 1
        self.tenant_sizes[tenant] = self.tenant_sizes.get(tenant, 0) + 1
        self.tool_sizes[tool] = self.tool_sizes.get(tool, 0) + 1

    def _path(
        self, rank: int, priority: str, priority_weight: float, tenant: str, tenant_weight: float, agent: str
    ) -> tuple[_Node, ...]:
        root = self._ranks.get(rank)
        if root is None:
            root = self._ranks[rank] = _Node(str(rank), 1.0)
            at = bisect.bisect(self._order, rank)
            self._order.insert(at, rank)
            self._roots.insert(at, root)
        node, path = root, [root]
        for key, weight in ((priority, priority_weight), (tenant, tenant_weight), (agent, 1.0)):
            child = node.children.get(key)
            if child is None:
                if len(node.children) >= node.sweep_at:
                    self._sweep(rank, path)
                child = node.children[key] = _Node(key, weight, node.made)
                node.made += 1
                node.only = child if len(node.children) == 1 else None
            path.append(child)
            node = child
        found = self._paths[(rank, priority, tenant, agent)] = tuple(path)
        return found

    def _sweep(self, rank: int, path: list[_Node]) -> None:
        """Forget the children of ``path[-1]`` with nothing waiting, and the cached paths through them.

        Called when a node is about to get a child and has ``sweep_at`` children; the next sweep
        waits until the children left have doubled, so the cost is constant per child made.
        A forgotten agent or tenant that comes back enters like a new one, at its parent's
        virtual time (what it had used beyond that is forgiven, as for any new agent).
        """
        node = path[-1]
        prefix = tuple(member.key for member in path[1:])
        for key, child in list(node.children.items()):
            if child.backlog:
                continue
            del node.children[key]
            for priority, tenant, agent in _leaf_keys(child, (*prefix, key)):
                self._paths.pop((rank, priority, tenant, agent), None)
        node.sweep_at = max(_SWEEP_MIN, 2 * len(node.children))
        node.only = next(iter(node.children.values())) if len(node.children) == 1 else None

    def discard(self, entry: Entry[T]) -> None:
        """Take ``entry`` out of the queue if it is still in it (its slot in the FIFO is dropped lazily)."""
        if not entry.alive:
            return
        entry.alive = False
        tool = entry.tool
        path = entry.path
        leaf = path[3]
        counts = leaf.tools
        left = counts[tool] - 1
        if left:
            counts[tool] = left
        else:  # the agent's last call to ``tool``: its FIFO holds only dead entries now
            del counts[tool]
            del leaf.queues[tool]
            for member in (path[2], path[1], path[0]):
                counts = member.tools
                left = counts[tool] - 1
                if left:
                    counts[tool] = left
                    break
                del counts[tool]
        left = leaf.backlog - 1
        leaf.backlog = left
        if not left:  # the agent leaves its tenant's waiting children, and so on up while one empties
            child = leaf
            for parent in (path[2], path[1], path[0]):
                child.entry = None
                left = parent.backlog - 1
                parent.backlog = left
                if parent.heap is not None and left < _HEAP_OFF:
                    parent.heap = None
                if left:
                    break
                child = parent
        self.size -= 1
        sizes = self.tenant_sizes
        left = sizes[entry.tenant] - 1
        if left:
            sizes[entry.tenant] = left
        else:
            del sizes[entry.tenant]
        sizes = self.tool_sizes
        left = sizes[tool] - 1
        if left:
            sizes[tool] = left
        else:
            del sizes[tool]

    def most_urgent_class(
        self, tools: Iterable[str], above: int, excluding: Entry[T] | None = None
    ) -> str | None:
        """The class of the calls to one of ``tools`` waiting at the lowest rank, if it is lower
        than ``above`` (among classes of that rank, the one made first), else None. ``excluding``:
        an entry not counted (a nested call asking which class its ancestors' waiters lend it
        must not find the class it was lent)."""
        wanted = set(tools)
        skip = (excluding.path[1], excluding.tool) if excluding is not None and excluding.alive else None
        for rank in self._order:
            if rank >= above:
                return None
            root = self._ranks[rank]
            if wanted.isdisjoint(root.tools):
                continue
            for klass in root.children.values():
                for tool in wanted.intersection(klass.tools):
                    if (klass, tool) != skip or (excluding is not None and _others_waiting(excluding)):
                        return klass.key
        return None

    def rank_of(self, entry: Entry[T]) -> int:
        """The rank ``entry`` (still in the queue) waits at."""
        root = entry.path[0]
        return next(rank for rank, node in self._ranks.items() if node is root)

    def move(
        self,
        entry: Entry[T],
        rank: int,
        priority: str,
        priority_weight: float,
        tenant_weight: float,
        *,
        back: bool = False,
    ) -> None:
        """Move ``entry`` (still in the queue) to the tail of its tool FIFO under ``rank`` and class
        ``priority``, its tenant and agent kept, as if it left and came again: it is counted
        waiting once throughout, and no pass grows (only serving an entry charges its nodes).
        ``back``: not to the tail but to the place its first arrival gives it in that FIFO, after
        the entries that came before it and before those that came after (a twin moved back
        down when the urgent calls joined to it stopped waiting keeps its place in line).

        Its slot in its old FIFO holds a dead placeholder from now on (the FIFO drops it lazily,
        as it drops any entry that left), found by a scan of that one FIFO: a move is rare (a
        more urgent call joined this one's outcome, or stopped waiting), a scan on the hot path
        would not be. Every FIFO stays in ``seq`` order (the placeholder takes the entry's)."""
        fifo = entry.path[3].queues[entry.tool]
        gone: Entry[Any] = Entry(None)
        gone.alive = False
        gone.seq = entry.seq
        fifo[fifo.index(entry)] = gone
        arrival = getattr(entry, "arrival", entry.seq)  # unset until its first move
        tenant, agent, tool = entry.tenant, entry.path[3].key, entry.tool
        self.discard(entry)
        self.push_entry(entry, rank, priority, priority_weight, tenant, tenant_weight, agent, tool)
        entry.arrival = arrival
        if back:
            fifo = entry.path[3].queues[tool]
            fifo.pop()  # pushed at the tail: into its place by arrival instead
            entry.seq = arrival
            at = len(fifo)
            while at and fifo[at - 1].seq > arrival:
                at -= 1
            fifo.insert(at, entry)

    def pop(
        self, open_tools: set[str], tenant_blocked: Blocked | None, agent_blocked: AgentBlocked | None
    ) -> T | None:
        """Remove and return the next item that can start, or None when none can.

        ``open_tools`` are the tools that can start a call now (the caller works them out from
        ``tool_sizes``); subtrees without waiting calls to an open tool are not visited. At each
        level visited, the children with such calls are taken lowest pass first: sorted while a
        node has few of them, from a heap from ``_HEAP_AT`` on (the first in O(log n)), so 1,000
        agents of one tenant all waiting cost a dispatch tens of microseconds, not a sort. The
        predicates say whether a tenant, or an agent (tenant, agent), cannot start a call now
        (None: no such limits).
        """
        if not open_tools:
            return None
        if tenant_blocked is None and agent_blocked is None and len(open_tools) == 1:
            [tool] = open_tools
            return self.pop_tool(tool) if tool in self.tool_sizes else None
        for rank in self._order:
            root = self._ranks[rank]
            if not root.backlog or open_tools.isdisjoint(root.tools):
                continue
            for klass in _by_turn(root, open_tools):
                for tenant in _by_turn(klass, open_tools):
                    if tenant_blocked is not None and tenant_blocked(tenant.key):
                        continue
                    for agent in _by_turn(tenant, open_tools):
                        if agent_blocked is not None and agent_blocked(tenant.key, agent.key):
                            continue
                        entry = self._pick_tool(agent, open_tools)
                        if entry is None:
                            continue
                        return self._serve(root, klass, tenant, agent, entry)
        return None

    def pop_tool(self, tool: str) -> T:
        """``pop({tool}, None, None)`` (one open tool, no tenant or agent limits: the common
        dispatch, after a slot of ``tool`` came free) for a ``tool`` with calls waiting
        (``tool_sizes``; ``KeyError`` otherwise). Every child on the way with calls to ``tool``
        has one that can start, so the first child in turn at each level is the one ``pop``
        would serve: it is found without ordering the others (about a microsecond less per
        dispatch)."""
        for root in self._roots:
            if tool in root.tools:
                klass = root.only or _first(root, tool)
                tenant = klass.only or _first(klass, tool)
                agent = tenant.only or _first(tenant, tool)
                queue = agent.queues[tool]
                while not queue[0].alive:
                    queue.popleft()
                return self._serve(root, klass, tenant, agent, queue[0])
        raise KeyError(tool)

    def _serve(self, root: _Node, klass: _Node, tenant: _Node, agent: _Node, entry: Entry[T]) -> T:
        """Take ``entry`` (of ``agent``, under ``tenant``, ``klass`` and ``root``) out of the queue
        and advance the passes of the nodes that served it; return its item.

        A served node's pass is first brought up to its parent's virtual time: a node that was
        skipped while none of its calls could start (their tool full or out of tokens, its tenant
        or agent at its limit) kept its pass meanwhile, and would otherwise take every turn it
        missed in a row once its calls can start, starving the others as saved-up idle credit
        would (which ``push`` refuses the same way)."""
        # ``max`` written out: it is a builtin's call per level, on every dispatch.
        served = klass.pass_
        if served < root.vtime:
            served = root.vtime
        root.vtime = served
        klass.pass_ = served + klass.stride
        served = tenant.pass_
        if served < klass.vtime:
            served = klass.vtime
        klass.vtime = served
        tenant.pass_ = served + tenant.stride
        served = agent.pass_
        if served < tenant.vtime:
            served = tenant.vtime
        tenant.vtime = served
        agent.pass_ = served + agent.stride
        self.discard(entry)
        # The served nodes' passes grew: where a heap orders them, enter them anew.
        if root.heap is not None and klass.backlog:
            _heap_push(root, klass)
        if klass.heap is not None and tenant.backlog:
            _heap_push(klass, tenant)
        if tenant.heap is not None and agent.backlog:
            _heap_push(tenant, agent)
        return entry.item

    @staticmethod
    def _pick_tool(leaf: _Node, open_tools: set[str]) -> Entry[Any] | None:
        best: deque[Entry[Any]] | None = None
        # One open tool (a dispatch after a slot came free) is the common case: no set algebra.
        tools = open_tools if len(open_tools) == 1 else open_tools.intersection(leaf.tools)
        for tool in tools:
            if tool not in leaf.tools:
                continue
            queue = leaf.queues[tool]
            while not queue[0].alive:
                queue.popleft()
            if best is None or queue[0].seq < best[0].seq:
                best = queue
        return best[0] if best is not None else None


def _stride(weight: float) -> int:
    """The stride of ``weight`` (finite, > 0): ``_STRIDE_SCALE / weight`` rounded, at least 1,
    computed exactly (a float quotient overflows for a weight below about 1e-293)."""
    if weight == 1.0:  # agents, and most classes and tenants: no Fraction per node made
        return _STRIDE_SCALE
    return max(1, round(Fraction(_STRIDE_SCALE) / Fraction(weight)))


def _leaf_keys(node: _Node, keys: tuple[str, ...]) -> Iterator[tuple[str, str, str]]:
    """The (class, tenant, agent) keys of the agents under ``node``, whose keys from the class down are ``keys``."""
    if len(keys) == 3:
        yield keys[0], keys[1], keys[2]
        return
    for key, child in node.children.items():
        yield from _leaf_keys(child, (*keys, key))


#: A node's pass (a C-level key function: sorting a node's children calls no Python function).
_by_pass = operator.attrgetter("pass_")


def _heap_push(parent: _Node, child: _Node) -> None:
    """Enter ``child`` (calls waiting) in ``parent``'s heap at its pass; its older entry goes stale."""
    heap = parent.heap
    assert heap is not None
    entry = child.entry = (child.pass_, child.order, next(_entries), child)
    heapq.heappush(heap, entry)
    if len(heap) > 2 * parent.backlog + _HEAP_AT:  # mostly stale: rebuild (amortized O(1))
        _heap_build(parent)


def _heap_build(parent: _Node) -> None:
    """Make ``parent``'s heap of its children with calls waiting."""
    heap = []
    for child in parent.children.values():
        if child.backlog:
            entry = child.entry = (child.pass_, child.order, next(_entries), child)
            heap.append(entry)
    heapq.heapify(heap)
    parent.heap = heap


def _heap_turns(heap: list[_HeapEntry], open_tools: set[str]) -> Iterator[_Node]:
    """The live entries of ``heap`` whose child has calls to an open tool, by (pass, order), lazily:
    the heap's implicit tree is walked lowest first, so taking the first costs O(log n)."""
    while heap and heap[0][3].entry is not heap[0]:  # stale entries on top go for good (amortized)
        heapq.heappop(heap)
    size = len(heap)
    if not size:
        return
    single = next(iter(open_tools)) if len(open_tools) == 1 else None
    frontier = [(heap[0][0], heap[0][1], 0)]
    while frontier:
        index = heapq.heappop(frontier)[2]
        entry = heap[index]
        child = entry[3]
        if child.entry is entry and (
            single in child.tools if single is not None else not open_tools.isdisjoint(child.tools)
        ):
            yield child
        for below in (2 * index + 1, 2 * index + 2):
            if below < size:
                heapq.heappush(frontier, (heap[below][0], heap[below][1], below))


def _first(node: _Node, tool: str) -> _Node:
    """The first of ``node``'s children in turn (``_by_turn``) among those with calls to ``tool``
    waiting (``node`` has some): the lowest pass, ties to the child made first."""
    if node.heap is not None:
        return next(iter(_heap_turns(node.heap, {tool})))
    best: _Node | None = None
    for child in node.children.values():  # in the order they were made
        if tool in child.tools and (best is None or child.pass_ < best.pass_):
            best = child
    assert best is not None
    return best


def _by_turn(node: _Node, open_tools: set[str]) -> Iterable[_Node]:
    """The children of ``node`` with waiting calls to an open tool, lowest pass first (ties: the
    child made first)."""
    children = node.children
    if len(children) == 1:  # the only child holds all of the node's calls, which the caller checked
        return children.values()
    if node.heap is not None:
        return _heap_turns(node.heap, open_tools)
    if len(open_tools) == 1:
        [tool] = open_tools
        active = [c for c in children.values() if tool in c.tools]
    else:
        active = [c for c in children.values() if not open_tools.isdisjoint(c.tools)]
    if len(active) > 1:
        active.sort(key=_by_pass)
    return active


def _others_waiting(entry: Entry[Any]) -> bool:
    """Whether calls to ``entry``'s tool other than ``entry`` (waiting) wait under its class: a
    class, tenant or agent on its path counts more than one (child with such calls, or call)."""
    tool = entry.tool
    return any(member.tools[tool] > 1 for member in entry.path[1:])


_TOOLS = ("t", "u", "v", "w")
_CLASSES = {"hi": 3.0, "mid": 1.0, "lo": 0.5}
_RANKS = (0, 1, 2)


def _check_holders(queue: FairQueue[int]) -> None:
    """Every ``holders`` list (the queue's and each node's above an agent) is a recount: the
    children with calls to the tool waiting, in creation order (ranks: lowest first)."""
    roots = [queue._ranks[rank] for rank in sorted(queue._ranks)]
    assert queue._holders == {tool: [r for r in roots if tool in r.tools] for tool in queue.tool_sizes}
    pending = list(roots)
    while pending:
        node = pending.pop()
        if not node.children or node.queues:
            continue
        children = list(node.children.values())
        assert [c.order for c in children] == sorted(c.order for c in children)
        assert node.holders == {tool: [c for c in children if tool in c.tools] for tool in node.tools}
        pending.extend(children)


def _run(seed: int, steps: int, tenants: int, agents: int, tools: int) -> int:
    """Run ``steps`` random operations on both queues; return how many items were served."""
    rng = random.Random(seed)
    new: FairQueue[int] = FairQueue()
    old: ReferenceFairQueue[int] = ReferenceFairQueue()
    live: dict[int, tuple[Entry[int], Entry[int]]] = {}
    gone: list[tuple[Entry[int], Entry[int]]] = []
    served = made = 0
    tool_names = _TOOLS[:tools]
    for _ in range(steps):
        choice = rng.random()
        if choice < 0.45 or not live:
            made += 1
            tenant = f"T{rng.randrange(tenants)}"
            klass = rng.choice(list(_CLASSES))
            rank, weight = rng.choice(_RANKS), 1.0 + int(tenant[1:]) % 3
            agent, tool = f"A{rng.randrange(agents)}", rng.choice(tool_names)
            pair = Entry(made), Entry(made)
            new.push_entry(pair[0], rank, klass, _CLASSES[klass], tenant, weight, agent, tool)
            old.push_entry(pair[1], rank, klass, _CLASSES[klass], tenant, weight, agent, tool)
            live[made] = pair
        elif choice < 0.55:
            pair = live.pop(rng.choice(list(live)))
            new.discard(pair[0])
            old.discard(pair[1])
            gone.append(pair)
            if rng.random() < 0.3:  # a second removal (a cancelled call's) changes nothing
                again = rng.choice(gone)
                new.discard(again[0])
                old.discard(again[1])
        elif choice < 0.62:
            pair = live[rng.choice(list(live))]
            assert new.rank_of(pair[0]) == old.rank_of(pair[1])
            klass = rng.choice(list(_CLASSES))
            rank, back = rng.choice(_RANKS), rng.random() < 0.5
            weight = 1.0 + int(pair[0].tenant[1:]) % 3
            new.move(pair[0], rank, klass, _CLASSES[klass], weight, back=back)
            old.move(pair[1], rank, klass, _CLASSES[klass], weight, back=back)
        elif choice < 0.85:
            tool = rng.choice(sorted(old.tool_sizes))
            got = new.pop_tool(tool)
            assert got == old.pop_tool(tool)
            live.pop(got)
            served += 1
        else:
            open_tools = set(rng.sample(tool_names, rng.randint(1, tools)))
            blocked = frozenset(f"T{n}" for n in rng.sample(range(tenants), tenants // 3))
            tenant_blocked: Blocked | None = blocked.__contains__ if rng.random() < 0.5 else None
            agent_blocked: AgentBlocked | None = (
                (lambda tenant, agent: agent == "A0") if rng.random() < 0.5 else None
            )
            got_or_none = new.pop(set(open_tools), tenant_blocked, agent_blocked)
            assert got_or_none == old.pop(set(open_tools), tenant_blocked, agent_blocked)
            if got_or_none is not None:
                live.pop(got_or_none)
                served += 1
        assert (new.size, new.tenant_sizes, new.tool_sizes) == (old.size, old.tenant_sizes, old.tool_sizes)
        if rng.random() < 0.1:
            _check_holders(new)
        if live and rng.random() < 0.2:
            pair = live[rng.choice(list(live))]
            wanted = set(rng.sample(tool_names, rng.randint(1, tools)))
            above = rng.choice((1, 2, 3))
            assert new.most_urgent_class(wanted, above, pair[0]) == old.most_urgent_class(
                wanted, above, pair[1]
            )
    while live:  # drain: the rest in the same order too
        tool = sorted(old.tool_sizes)[0]
        got = new.pop_tool(tool)
        assert got == old.pop_tool(tool)
        live.pop(got)
        served += 1
    assert new.size == old.size == 0 and not new.tenant_sizes and not new.tool_sizes
    return served


@settings(max_examples=60, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    tenants=st.sampled_from((1, 2, 4, 40)),
    agents=st.sampled_from((1, 3, 40)),
    tools=st.integers(1, len(_TOOLS)),
    heap_at=st.sampled_from((2, _HEAP_AT, 10**9)),
)
def test_serves_as_the_reference_for_random_operations(
    seed: int, tenants: int, agents: int, tools: int, heap_at: int
) -> None:
    """Review R71: the fair queue's pop path was rewritten for fewer operations per dispatch (the
    served call's removal written into ``_serve``, its FIFO slot dropped at once); it must serve
    exactly the items, in exactly the order, that the queue before it served, and keep the same
    sizes, for any mix of pushes, removals, moves, pops and lending questions, with heaps from 2
    children, from 32, or never (one path only: ``tenants`` and ``agents`` of 1)."""
    global _HEAP_AT, _HEAP_OFF
    saved = (_fair._HEAP_AT, _fair._HEAP_OFF, _HEAP_AT, _HEAP_OFF)
    _fair._HEAP_AT = _HEAP_AT = heap_at
    _fair._HEAP_OFF = _HEAP_OFF = min(heap_at, saved[1])
    try:
        assert _run(seed, 400, tenants, agents, tools) > 0
    finally:
        _fair._HEAP_AT, _fair._HEAP_OFF, _HEAP_AT, _HEAP_OFF = saved


@pytest.mark.parametrize("seed", range(3))
def test_serves_as_the_reference_in_long_runs(seed: int) -> None:
    """Review R71: as above, in longer runs with many tenants and agents (sweeps of idle nodes,
    heaps built and dropped), where a drift would have time to show."""
    assert _run(seed, 5000, 40, 40, 3) > 1000
