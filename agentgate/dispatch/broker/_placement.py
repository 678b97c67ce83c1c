"""Where a gang goes: the free-GPU index and the placement policies.

``FreeIndex`` keeps, for each interconnect level, the set of free GPUs of every group, so a
decision looks at groups (125 NVLink domains for 1,000 GPUs), never at every GPU.

``TopologyAware`` is the broker's policy; the rules, in the order they apply:

* a gang is placed inside one group at the innermost level it asks for, else at the next level
  out (with a constraint, a group at an inner level counts only when it lies inside one group at
  the constraint's level: an NVLink domain may span nodes), and spreads over the whole cluster only when its constraint is preferred (not required)
  and, for a communication-bound gang, only once the broker's locality wait is over (the broker
  passes ``loosen`` at once for a gang that no group of the levels it prefers could ever hold);
* inside a level, the group chosen is the best fit: the one with the fewest free GPUs that still
  holds the gang, so that whole NVLink domains stay free for the gangs that need them;
* a gang that may spread fills the most fragmented domains first (fewest free GPUs), unless it
  is communication-bound, which takes the fewest, largest domains;
* memory-bound work looks at the largest-memory groups first, preprocessing at the smallest.

``FirstFit`` is the baseline without topology: the lowest-numbered free GPUs that pass the
request's type and memory filters.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Protocol

from agentgate.dispatch.broker._model import GangRequest
from agentgate.dispatch.broker._topology import LEVELS, Level, Topology

Eligible = Callable[[int], bool] | None


class FreeIndex:
    """The free GPUs of a topology, grouped at every level. Not thread-safe: the broker locks."""

    __slots__ = ("_free", "_is_free", "topology", "total")

    def __init__(self, topology: Topology, *, empty: bool = False) -> None:
        self.topology = topology
        self._free: dict[Level, list[set[int]]] = {
            level: [set() if empty else set(m) for m in topology.members[level]] for level in LEVELS
        }
        self._is_free = [not empty] * len(topology)
        self.total = 0 if empty else len(topology)

    def copy(self) -> FreeIndex:
        """An independent copy, for what-if placement during preemption."""
        other = FreeIndex.__new__(FreeIndex)
        other.topology = self.topology
        other._free = {level: [set(s) for s in groups] for level, groups in self._free.items()}
        other._is_free = list(self._is_free)
        other.total = self.total
        return other

    def is_free(self, gpu: int) -> bool:
        """Whether GPU number ``gpu`` is free."""
        return self._is_free[gpu]

    def group(self, level: Level, group: int) -> set[int]:
        """The free GPUs of one group (the index's own set: do not mutate)."""
        return self._free[level][group]

    def groups(self, level: Level) -> list[set[int]]:
        """The free GPUs of every group at ``level`` (the index's own sets: do not mutate)."""
        return self._free[level]

    def take(self, gpus: Iterable[int]) -> None:
        """Mark GPUs as not free; each must be free."""
        topo = self.topology
        for i in gpus:
            assert self._is_free[i], f"gpu {i} is not free"
            self._is_free[i] = False
            self.total -= 1
            for level in LEVELS:
                self._free[level][topo.group_of[level][i]].discard(i)

    def give(self, gpus: Iterable[int]) -> None:
        """Mark GPUs as free; each must not be free."""
        topo = self.topology
        for i in gpus:
            assert not self._is_free[i], f"gpu {i} is already free"
            self._is_free[i] = True
            self.total += 1
            for level in LEVELS:
                self._free[level][topo.group_of[level][i]].add(i)


class PlacementPolicy(Protocol):
    """Chooses GPUs for a gang from the free ones, or says it cannot be placed whole now."""

    name: str

    def place(self, request: GangRequest, free: FreeIndex, *, loosen: bool) -> list[int] | None:
        """GPU numbers for the whole gang, or ``None``; never a part of it. Only GPUs that pass
        the request's filters (``eligibility``): the broker's what-if placements for preemption
        count and give back no others (``could_hold``).

        ``loosen``: the request has waited out the locality wait, so a preferred constraint may
        be relaxed.
        """
        ...


def eligibility(request: GangRequest, topology: Topology) -> Eligible:
    """The request's GPU filter, or ``None`` when every GPU qualifies. The type is matched in lower
    case (``Topology.type_keys``), as ``GatedBroker`` decides it: until review R68 a request for
    ``h100``, decided and allowed as ``gpu:h100``, matched no GPU of the inventory's ``H100``."""
    if request.gpu_type is None and request.min_memory_gb <= 0:
        return None
    gpus, keys = topology.gpus, topology.type_keys
    gpu_type = None if request.gpu_type is None else request.gpu_type.lower()
    memory = request.min_memory_gb
    return lambda i: (gpu_type is None or keys[i] == gpu_type) and gpus[i].memory_gb >= memory


def nested(request: GangRequest, topology: Topology, level: Level) -> tuple[bool, ...] | None:
    """Which groups at ``level`` a gang may be placed in as one group: with a topology constraint
    at an outer level, only those that lie inside one of its groups (an NVLink domain spanning two
    nodes is no place for a gang that must stay on one node); ``None``: every group."""
    constraint = request.topology
    if constraint is None or constraint.level == level:
        return None
    return topology.within.get((level, constraint.level))


def levels_to_try(request: GangRequest, *, loosen: bool) -> list[Level | None]:
    """The levels to try in order; ``None`` stands for "anywhere in the cluster"."""
    constraint = request.topology
    communication = request.hint.bound == "communication"
    if constraint is not None:
        upto = LEVELS.index(constraint.level)
        levels: list[Level | None] = list(LEVELS[: upto + 1]) if communication else [constraint.level]
        if not constraint.required and loosen:
            levels.append(None)
        return levels
    if request.gpus > 1 and communication:
        return ["nvlink_domain", "node", "rack", None] if loosen else ["nvlink_domain"]
    if request.gpus > 1 and request.hint.kind == "inference":
        return ["node", None]
    return [None]


def could_hold(
    policy: PlacementPolicy, request: GangRequest, free: FreeIndex, more: Iterable[int], *, loosen: bool
) -> bool:
    """Whether ``policy`` might place ``request`` were the GPUs ``more`` (not free, each passing the
    request's filters) free too: ``False`` only where counting shows it could not, since a
    placement takes GPUs that pass the filters (``eligibility``), and with ``TopologyAware`` one
    that does not spread takes them inside one group of the outermost level it tries. Costs a
    count of the free GPUs, not a copy of ``free``: the test before a what-if placement."""
    topology = free.topology
    eligible = eligibility(request, topology)
    # The outermost level last; ``None`` (the whole cluster) is counted by NVLink domain.
    outermost = levels_to_try(request, loosen=loosen)[-1] if isinstance(policy, TopologyAware) else None
    level: Level = "nvlink_domain" if outermost is None else outermost
    counts = [len(g) if eligible is None else sum(1 for i in g if eligible(i)) for g in free.groups(level)]
    of = topology.group_of[level]
    for i in more:
        counts[of[i]] += 1
    return (sum(counts) if outermost is None else max(counts)) >= request.gpus


class TopologyAware:
    """The broker's placement policy (rules in the module docstring)."""

    name = "topology-aware"

    def __init__(self, topology: Topology) -> None:
        self.topology = topology

    def place(self, request: GangRequest, free: FreeIndex, *, loosen: bool) -> list[int] | None:
        """See ``PlacementPolicy.place``."""
        n = request.gpus
        if free.total < n:
            return None
        eligible = eligibility(request, self.topology)
        memory_sign = self._memory_sign(request)
        fewest = request.hint.bound == "communication"
        for level in levels_to_try(request, loosen=loosen):
            chosen = (
                self._spread(n, free, eligible, memory_sign, fewest)
                if level is None
                else self._inside_one(
                    level, n, free, eligible, memory_sign, fewest, nested(request, self.topology, level)
                )
            )
            if chosen is not None:
                return chosen
        return None

    @staticmethod
    def _memory_sign(request: GangRequest) -> int:
        if request.hint.bound == "memory":
            return -1
        if request.hint.kind == "preprocessing":
            return 1
        return 0

    def _inside_one(
        self,
        level: Level,
        n: int,
        free: FreeIndex,
        eligible: Eligible,
        memory_sign: int,
        fewest: bool,
        allowed: tuple[bool, ...] | None,
    ) -> list[int] | None:
        memory = self.topology.group_memory_gb[level]
        best: tuple[float, int, int] | None = None
        for g, gpus in enumerate(free.groups(level)):
            if allowed is not None and not allowed[g]:
                continue
            count = len(gpus) if eligible is None else sum(1 for i in gpus if eligible(i))
            if count >= n:
                key = (memory_sign * memory[g], count, g)
                if best is None or key < best:
                    best = key
        if best is None:
            return None
        group = free.group(level, best[2])
        if level == "nvlink_domain":
            return sorted(i for i in group if eligible is None or eligible(i))[:n]
        return self._fill(sorted(group), n, free, eligible, memory_sign, fewest)

    def _spread(
        self, n: int, free: FreeIndex, eligible: Eligible, memory_sign: int, fewest: bool
    ) -> list[int] | None:
        candidates = [i for gpus in free.groups("nvlink_domain") for i in gpus]
        return self._fill(candidates, n, free, eligible, memory_sign, fewest)

    def _fill(
        self,
        candidates: list[int],
        n: int,
        free: FreeIndex,
        eligible: Eligible,
        memory_sign: int,
        fewest: bool,
    ) -> list[int] | None:
        """Take ``n`` of the candidates, whole domains at a time, in the policy's domain order."""
        topo = self.topology
        domain_of = topo.group_of["nvlink_domain"]
        memory = topo.group_memory_gb["nvlink_domain"]
        by_domain: dict[int, list[int]] = {}
        for i in candidates:
            if eligible is None or eligible(i):
                by_domain.setdefault(domain_of[i], []).append(i)
        if sum(len(v) for v in by_domain.values()) < n:
            return None
        sign = -1 if fewest else 1
        order = sorted(by_domain, key=lambda d: (memory_sign * memory[d], sign * len(by_domain[d]), d))
        chosen: list[int] = []
        for d in order:
            chosen.extend(sorted(by_domain[d])[: n - len(chosen)])
            if len(chosen) == n:
                break
        return chosen


class FirstFit:
    """Baseline without topology: the lowest-numbered eligible free GPUs."""

    name = "first-fit"

    def __init__(self, topology: Topology) -> None:
        self.topology = topology

    def place(self, request: GangRequest, free: FreeIndex, *, loosen: bool) -> list[int] | None:
        """See ``PlacementPolicy.place``; ignores hints and topology constraints."""
        n = request.gpus
        if free.total < n:
            return None
        eligible = eligibility(request, self.topology)
        chosen: list[int] = []
        for i in range(len(self.topology)):
            if free.is_free(i) and (eligible is None or eligible(i)):
                chosen.append(i)
                if len(chosen) == n:
                    return chosen
        return None
