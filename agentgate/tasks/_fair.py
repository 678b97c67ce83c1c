"""Weighted fair queueing of waiting calls: priority rank, then class, tenant, agent, tool.

This is agentgate's own scheduling idea, so it is written here. Waiting calls sit in a tree:

    rank (strict: a lower rank is always served first)
      -> priority class (weighted share among classes of one rank)
        -> tenant (weighted share, weights from the configuration)
          -> agent / principal (equal share within its tenant)
            -> one FIFO per tool

At each level the next child is chosen by stride scheduling (Waldspurger and Weihl, 1995), the
unit-cost form of weighted fair queueing: every child has a *pass*; the child with the lowest
pass among those with work that can start is served, and its pass grows by its *stride*,
``1 / weight``. So over any period in which two tenants both have work waiting, the numbers of
calls they start differ from the ratio of their weights by at most one. Passes and strides are
integers (the stride is ``_STRIDE_SCALE / weight``, rounded, at least 1), so they stay exact
however long the queue runs and whatever the weights: in floats, a tiny weight's stride was
infinite and a huge weight's vanished against the pass, and members then tied for good, the
first made starving the others. A child that had no work and gets some starts at the parent's
current virtual time (the pass of the child served last), so idle time does not turn into a
burst of saved-up credit that would starve the others.

Within an agent the tool FIFOs are merged by arrival order, skipping tools that cannot start now
(at their concurrency limit, out of rate tokens; the caller passes the set of tools that can): a call never waits behind a call to another,
saturated tool, and calls to the same tool from one agent start in arrival order (FIFO within
class and tenant for calls that compete for the same limits). Tenants and agents at their own
concurrency limit are skipped the same way, which keeps the queue work-conserving; a caller that
knows only one tenant's calls can start (``pop``'s ``only_tenant``), or one agent's
(``only_agent``), has that tenant or agent looked up alone, not walked to past the others
(review R93).

A node with many waiting children keeps them in a heap by (pass, creation order), the order a
stable sort by pass gives, and walks it lazily, so choosing among them does not cost a sort.

A node counts only what its readers ask of it. An agent counts its calls waiting, in all and per
tool; a rank, class or tenant counts its children with calls waiting, in all and per tool (a
walk down asks only whether a child has some). So a push or a removal changes one agent's counts,
and those above it only when the agent starts or stops having calls (to that tool) waiting, and
so on up: under load, with calls queued, it touches one node, not four (review R70). A node
with a single child names it (``only``): the fast dispatch passes such a level without a search.
A rank, class or tenant also lists per tool its children with calls to it waiting, in creation
order (``holders``), and the queue its ranks with some, lowest first: the fast dispatch compares
only those, not every child (review R71; the lists change only when the counts start or stop).

Nodes of tenants and agents with nothing waiting are forgotten once they outnumber the others
(``_sweep``), so the tree does not grow with every agent ever seen, and neither does the cost of
choosing among a node's children.

A call that leaves the queue without starting (deadline, cancellation) is marked dead and
dropped lazily when it reaches the head, so removal is O(depth) and never scans a FIFO.
"""

from __future__ import annotations

import bisect
import heapq
import itertools
import operator
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from fractions import Fraction
from typing import Any, Generic, TypeVar

T = TypeVar("T")

#: A node forgets its children with nothing waiting when it has this many (then twice as many as it kept).
_SWEEP_MIN = 16
#: A node orders its waiting children with a heap from this many on, and by sorting below ``_HEAP_OFF``.
_HEAP_AT = 32
_HEAP_OFF = 8
#: A weight of 1 has this stride: 720720 (the least common multiple of 1 to 16) times 2**32, so
#: the strides of whole weights to 16 and of their halves and quarters are exact. Weights above
#: it (about 3e15) would all have the stride 1: the configuration takes none above
#: ``_config.MAX_WEIGHT`` (1e6), whose stride is over 3e9, so rounding moves a share by less than
#: one call in six billion.
_STRIDE_SCALE = 720_720 << 32
#: Makes heap entries unique: a child entered again at an unchanged pass is never compared itself.
_entries = itertools.count()

Blocked = Callable[[str], bool]
#: (pass, order, unique number, child): a child's place in its parent's heap.
_HeapEntry = tuple[int, int, int, "_Node"]
AgentBlocked = Callable[[str, str], bool]


class _Node:
    """One level's member (a rank, class, tenant or agent) and its waiting children."""

    __slots__ = (
        "backlog",
        "children",
        "entry",
        "heap",
        "holders",
        "key",
        "made",
        "only",
        "order",
        "pass_",
        "queues",
        "stride",
        "sweep_at",
        "tools",
        "vtime",
    )

    def __init__(self, key: str, weight: float, order: int = 0) -> None:
        self.key = key
        self.stride = _stride(weight)  # what its pass grows by when it is served
        self.order = order  # its rank among its parent's children by creation (ties of pass)
        self.made = 0  # children made so far (the next child's order)
        #: The children with calls waiting by (pass, order), kept only while there are many of
        #: them (``_HEAP_AT``); entries whose child's ``entry`` is another one are stale.
        self.heap: list[_HeapEntry] | None = None
        self.entry: _HeapEntry | None = None  # this node's live entry in its parent's heap
        self.sweep_at = _SWEEP_MIN  # children count at which idle children are forgotten
        self.pass_ = 0
        self.vtime = 0
        #: An agent's calls waiting; a rank's, class's or tenant's children with calls waiting
        #: (so it changes above an agent only when a child starts or stops having calls waiting).
        self.backlog = 0
        #: Per tool, an agent's calls to it waiting; a rank's, class's or tenant's children with calls
        #: to it waiting (which is all a reader above an agent asks: whether a child has some).
        self.tools: dict[str, int] = {}
        #: Per tool, a rank's, class's or tenant's children with calls to it waiting, in the order
        #: they were made (``order``): ``_first`` compares these only, not every child.
        self.holders: dict[str, list[_Node]] = {}
        self.children: dict[str, _Node] = {}
        #: Its child while it has exactly one (``pop_tool`` passes such a level without a search).
        self.only: _Node | None = None
        self.queues: dict[str, deque[Entry[Any]]] = {}


class Entry(Generic[T]):
    """A waiting item's place in the queue; ``alive`` is False once it left.

    The caller makes one for its item (or an item is its own entry: a subclass whose ``item`` is
    itself, as the scheduler's ``Waiter``, one object less per waiting call); ``push_entry``
    sets the other fields.
    """

    __slots__ = ("alive", "arrival", "item", "path", "seq", "tenant", "tool")

    alive: bool
    #: Its ``seq`` when it first came, set by its first ``move`` (a move gives it a new ``seq``).
    arrival: int
    path: tuple[_Node, ...]
    seq: int
    tenant: str
    tool: str

    def __init__(self, item: T) -> None:
        self.item = item


class FairQueue(Generic[T]):
    """The queue tree described in the module docstring. Not thread-safe (one event loop)."""

    def __init__(self) -> None:
        self._ranks: dict[int, _Node] = {}
        self._order: list[int] = []
        self._roots: list[_Node] = []  # the nodes of ``_order``'s ranks, in that order
        self._seq = 0
        self.size = 0
        self.tenant_sizes: dict[str, int] = {}
        self.tool_sizes: dict[str, int] = {}
        self._paths: dict[tuple[int, str, str, str], tuple[_Node, ...]] = {}
        #: Per tool, the nodes of the ranks with calls to it waiting, lowest rank first (a rank's
        #: node has its rank as its ``order``).
        self._holders: dict[str, list[_Node]] = {}

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
        self._seq += 1
        entry.seq = self._seq
        entry.tenant = tenant
        entry.tool = tool
        entry.path = path
        entry.alive = True
        queue = leaf.queues.get(tool)  # there while the agent has calls to ``tool`` waiting
        if queue is not None:
            queue.append(entry)
            leaf.tools[tool] += 1
        else:  # the agent's first call to ``tool`` waiting: its ancestors may have none either
            leaf.queues[tool] = deque((entry,))
            leaf.tools[tool] = 1
            child = leaf
            for member in (path[2], path[1], path[0]):
                _hold(member.holders, tool, child)
                counts = member.tools
                had = counts.get(tool, 0)
                counts[tool] = had + 1
                if had:
                    break
                child = member
            else:  # the rank's first call to ``tool`` waiting
                _hold(self._holders, tool, child)
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
            root = self._ranks[rank] = _Node(str(rank), 1.0, rank)
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
        if entry.alive:
            path = entry.path
            self._take_out(entry, path[0], path[1], path[2], path[3])

    def _take_out(self, entry: Entry[T], root: _Node, klass: _Node, tenant: _Node, agent: _Node) -> None:
        """Take ``entry``, alive, out of the counts of its path (``root`` to ``agent``) and of the
        queue's sizes: ``discard``'s removal, which ``_serve`` makes with the path its pop walked
        (its slot in the agent's FIFO is dropped lazily)."""
        entry.alive = False
        tool = entry.tool
        counts = agent.tools
        left = counts[tool] - 1
        if left:
            counts[tool] = left
        else:  # the agent's last call to ``tool``: its FIFO holds only dead entries now
            del counts[tool]
            del agent.queues[tool]
            child = agent
            for member in (tenant, klass, root):
                _release(member.holders, tool, child)
                counts = member.tools
                left = counts[tool] - 1
                if left:
                    counts[tool] = left
                    break
                del counts[tool]
                child = member
            else:
                _release(self._holders, tool, child)
        left = agent.backlog - 1
        agent.backlog = left
        if not left:  # the agent leaves its tenant's waiting children, and so on up while one empties
            child = agent
            for parent in (tenant, klass, root):
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
        self,
        open_tools: set[str],
        tenant_blocked: Blocked | None,
        agent_blocked: AgentBlocked | None,
        only_tenant: str | None = None,
        only_agent: str | None = None,
    ) -> T | None:
        """Remove and return the next item that can start, or None when none can.

        ``open_tools`` are the tools that can start a call now (the caller works them out from
        ``tool_sizes``); subtrees without waiting calls to an open tool are not visited. At each
        level visited, the children with such calls are taken lowest pass first: sorted while a
        node has few of them, from a heap from ``_HEAP_AT`` on (the first in O(log n)), so 1,000
        agents of one tenant all waiting cost a dispatch tens of microseconds, not a sort. The
        predicates say whether a tenant, or an agent (tenant, agent), cannot start a call now
        (None: no such limits).

        ``only_tenant``: the caller knows that no other tenant's calls can start (a finish freed
        only this tenant's and agent's slots, after a dispatch left nothing that could start), so
        the walk looks up that tenant under each class instead of walking the class's tenants in
        turn, past every one at its limit (review R93). ``only_agent`` (with ``only_tenant``: one
        of its agents): the finish freed only that agent's slot, its tenant having had room, so
        that agent is looked up alone under the tenant, not walked to past every agent at its
        limit. What it returns is what the full walk would: the others would all be skipped.
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
                if only_tenant is None:
                    tenants = _by_turn(klass, open_tools)
                else:
                    tenants = _alone(klass, only_tenant, open_tools)
                for tenant in tenants:
                    if tenant_blocked is not None and tenant_blocked(tenant.key):
                        continue
                    if only_agent is None or only_tenant is None:
                        agents = _by_turn(tenant, open_tools)
                    else:
                        agents = _alone(tenant, only_agent, open_tools)
                    for agent in agents:
                        if agent_blocked is not None and agent_blocked(tenant.key, agent.key):
                            continue
                        entry = self._pick_tool(agent, open_tools)
                        if entry is None:
                            continue
                        agent.queues[entry.tool].popleft()  # the head of its FIFO
                        return self._serve(root, klass, tenant, agent, entry)
        return None

    def pop_tool(self, tool: str) -> T:
        """``pop({tool}, None, None)`` (one open tool, no tenant or agent limits: the common
        dispatch, after a slot of ``tool`` came free) for a ``tool`` with calls waiting
        (``tool_sizes``; ``KeyError`` otherwise). Every child on the way with calls to ``tool``
        has one that can start, so the first child in turn at each level is the one ``pop``
        would serve: it is found without ordering the others (about a microsecond less per
        dispatch)."""
        roots = self._holders.get(tool)
        if roots is None:
            raise KeyError(tool)
        root = roots[0]
        klass = root.only or _first(root, tool)
        tenant = klass.only or _first(klass, tool)
        agent = tenant.only or _first(tenant, tool)
        queue = agent.queues[tool]
        entry = queue.popleft()
        while not entry.alive:  # it left earlier: its slot is dropped now
            entry = queue.popleft()
        return self._serve(root, klass, tenant, agent, entry)

    def _serve(self, root: _Node, klass: _Node, tenant: _Node, agent: _Node, entry: Entry[T]) -> T:
        """Take ``entry`` (of ``agent``, under ``tenant``, ``klass`` and ``root``, waiting, just
        taken off the head of its FIFO) out of the queue and advance the passes of the nodes that
        served it; return its item.

        The removal is ``discard``'s (``_take_out``), given the path the caller walked (review
        R71: the path's reads less per dispatch; tests/test_tasks_r71_fair_reference.py holds the
        order served to the queue's from before).

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
        self._take_out(entry, root, klass, tenant, agent)
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
#: A node's rank among its parent's children by creation (``holders``' order).
_by_order = operator.attrgetter("order")


def _hold(holders: dict[str, list[_Node]], tool: str, child: _Node) -> None:
    """Enter ``child`` (its first call to ``tool`` waiting) in ``holders[tool]``, by ``order``."""
    held = holders.get(tool)
    if held is None:
        holders[tool] = [child]
    else:
        bisect.insort(held, child, key=_by_order)


def _release(holders: dict[str, list[_Node]], tool: str, child: _Node) -> None:
    """Take ``child`` (its last call to ``tool`` gone) out of ``holders[tool]``."""
    held = holders[tool]
    if len(held) == 1:
        del holders[tool]
    else:
        held.remove(child)


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
    held = node.holders[tool]  # in the order they were made
    best = held[0]
    for child in held:
        if child.pass_ < best.pass_:
            best = child
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
        active = list(node.holders.get(tool, ()))
    else:
        active = [c for c in children.values() if not open_tools.isdisjoint(c.tools)]
    if len(active) > 1:
        active.sort(key=_by_pass)
    return active


def _alone(node: _Node, key: str, open_tools: set[str]) -> Iterable[_Node]:
    """``_by_turn(node, open_tools)`` narrowed to the child ``key``: it alone, if it has waiting
    calls to an open tool (``pop``'s ``only_tenant`` and ``only_agent``)."""
    child = node.children.get(key)
    return () if child is None or open_tools.isdisjoint(child.tools) else (child,)


def _others_waiting(entry: Entry[Any]) -> bool:
    """Whether calls to ``entry``'s tool other than ``entry`` (waiting) wait under its class: a
    class, tenant or agent on its path counts more than one (child with such calls, or call)."""
    tool = entry.tool
    return any(member.tools[tool] > 1 for member in entry.path[1:])
