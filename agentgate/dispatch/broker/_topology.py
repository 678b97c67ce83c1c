"""The broker's view of the GPUs: one flat, immutable list with its interconnect groups.

The broker places gangs by interconnect level (NVLink domain, node, rack), so it keeps its own
small value model instead of asking the YAML inventory on every decision: GPUs are numbered
``0..n-1`` once, and each level maps a GPU number to a group number. ``from_inventory`` builds it
from a loaded ``agentgate.dispatch.inventory.Inventory``; ``synthetic_topology`` builds regular
clusters for tests and benchmarks.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from agentgate._names import first_non_ascii
from agentgate.dispatch.broker._quoting import quoted
from agentgate.errors import InventoryError

if TYPE_CHECKING:
    from agentgate.dispatch.inventory import Inventory

Level = Literal["nvlink_domain", "node", "rack"]
"""A level of the interconnect hierarchy, innermost first."""

LEVELS: tuple[Level, ...] = ("nvlink_domain", "node", "rack")

MAX_GPU_NAME_CHARS = 256
"""The most characters a GPU's id, type, node, NVLink domain or rack may have: twice an
inventory name's 128, which ``from_inventory`` prefixes for a GPU without a domain (``gpu:<id>``)
or a node without a rack (``node:<name>``)."""

MAX_GPU_MEMORY_GB = 4096
"""The most device memory a GPU may declare, as in an inventory (``inventory.GPU.memory_gb``)."""

_NAMES = ("id", "type", "node", "nvlink_domain", "rack")
"""The fields of a ``GpuSpec`` that are names: quoted by the broker's errors and views."""


@dataclass(frozen=True, slots=True)
class GpuSpec:
    """One GPU as the broker sees it."""

    id: str
    """Unique GPU id."""
    type: str
    """Model name, e.g. ``H100``."""
    memory_gb: float
    """Device memory in GB."""
    node: str
    """The node it is installed in."""
    nvlink_domain: str
    """Its NVLink domain (a GPU without NVLink peers is its own domain)."""
    rack: str
    """Its rack (a node without a rack is its own rack)."""

    def group(self, level: Level) -> str:
        """The GPU's group name at ``level``."""
        if level == "nvlink_domain":
            return self.nvlink_domain
        if level == "node":
            return self.node
        return self.rack


@dataclass(frozen=True)
class Topology:
    """An immutable set of GPUs with their groups at each interconnect level.

    ``group_of[level][i]`` is the group number of GPU ``i``; ``members[level][g]`` the GPU numbers
    of group ``g`` in order; ``within[(inner, outer)][g]``
    whether group ``g`` at level ``inner`` lies inside one group at the outer level ``outer`` (an
    NVLink domain may span the nodes of a rack: GB200 NVL72). Raises ``InventoryError`` for an
    empty list, a duplicate GPU id, a name that is not text of 1 to ``MAX_GPU_NAME_CHARS``
    printable characters, a type that is not ASCII or a ``memory_gb`` that is no positive finite number, naming the field
    and the GPU's position (``gpus[3].id``), and for ``gpus`` that are not an iterable of
    ``GpuSpec`` (``gpus[3]: must be a GpuSpec, not str``). ``gpus`` is kept as a tuple.
    """

    gpus: tuple[GpuSpec, ...]
    index: dict[str, int] = field(init=False, repr=False, compare=False)
    group_of: dict[Level, tuple[int, ...]] = field(init=False, repr=False, compare=False)
    members: dict[Level, tuple[tuple[int, ...], ...]] = field(init=False, repr=False, compare=False)
    group_memory_gb: dict[Level, tuple[float, ...]] = field(init=False, repr=False, compare=False)
    within: dict[tuple[Level, Level], tuple[bool, ...]] = field(init=False, repr=False, compare=False)
    type_keys: tuple[str, ...] = field(init=False, repr=False, compare=False)
    """Each GPU's type in lower case: what a request's ``gpu_type`` is matched with, the name a
    lease of it is decided and priced as (``gpu:h100`` for ``H100``)."""

    def __post_init__(self) -> None:
        # A list is kept as a tuple, so that the topology stays immutable; until review R94 a list
        # was kept as given, and raw rows (a str, a dict) or a non-iterable raised an
        # ``AttributeError`` or a ``TypeError`` where the docs promise an ``InventoryError``.
        gpus: object = self.gpus
        if isinstance(gpus, str | bytes) or not isinstance(gpus, Iterable):
            raise InventoryError(f"gpus: must be an iterable of GpuSpec, not {type(gpus).__name__}")
        object.__setattr__(self, "gpus", tuple(gpus))
        if not self.gpus:
            raise InventoryError("the broker needs at least one GPU")
        index: dict[str, int] = {}
        for i, gpu in enumerate(self.gpus):
            _check_gpu(i, gpu)
            if gpu.id in index:
                raise InventoryError(
                    f"gpus[{i}].id: duplicate gpu {quoted(gpu.id)} (also gpus[{index[gpu.id]}])"
                )
            index[gpu.id] = i
        group_of: dict[Level, tuple[int, ...]] = {}
        members: dict[Level, tuple[tuple[int, ...], ...]] = {}
        memory: dict[Level, tuple[float, ...]] = {}
        for level in LEVELS:
            numbers: dict[str, int] = {}
            lists: list[list[int]] = []
            of: list[int] = []
            for i, gpu in enumerate(self.gpus):
                g = numbers.setdefault(gpu.group(level), len(numbers))
                if g == len(lists):
                    lists.append([])
                lists[g].append(i)
                of.append(g)
            group_of[level] = tuple(of)
            members[level] = tuple(tuple(m) for m in lists)
            # A group is as good for memory-bound work as its smallest GPU.
            memory[level] = tuple(min(self.gpus[i].memory_gb for i in m) for m in lists)
        within: dict[tuple[Level, Level], tuple[bool, ...]] = {}
        for depth, inner in enumerate(LEVELS):
            for outer in LEVELS[depth + 1 :]:
                outer_of = group_of[outer]
                within[(inner, outer)] = tuple(len({outer_of[i] for i in m}) == 1 for m in members[inner])
        object.__setattr__(self, "within", within)
        object.__setattr__(self, "type_keys", tuple(gpu.type.lower() for gpu in self.gpus))
        object.__setattr__(self, "index", index)
        object.__setattr__(self, "group_of", group_of)
        object.__setattr__(self, "members", members)
        object.__setattr__(self, "group_memory_gb", memory)

    def __len__(self) -> int:
        return len(self.gpus)

    def number(self, gpu_id: str) -> int:
        """The GPU's number; raises ``InventoryError`` for an unknown id."""
        try:
            return self.index[gpu_id]
        except KeyError:
            raise InventoryError(f"unknown gpu {quoted(gpu_id)}") from None

    def shared_level(self, numbers: Iterable[int]) -> Level | None:
        """The innermost level at which all the given GPUs share one group, or ``None``."""
        nums = list(numbers)
        if not nums:
            return None
        for level in LEVELS:
            of = self.group_of[level]
            if len({of[i] for i in nums}) == 1:
                return level
        return None


def _check_gpu(i: int, gpu: GpuSpec) -> None:
    """Refuse a GPU whose names the broker could not quote on one line, or whose memory no
    request could be compared with. Until review R62 a GPU id of 10,000 characters, or one with
    control characters, went whole into the broker's errors (``duplicate gpu``, ``unknown gpu``);
    a ``GpuSpec`` is a plain dataclass, so the topology checks what it is given."""
    if not isinstance(gpu, GpuSpec):
        raise InventoryError(f"gpus[{i}]: must be a GpuSpec, not {type(gpu).__name__}")
    for name in _NAMES:
        value = getattr(gpu, name)
        if not (isinstance(value, str) and 0 < len(value) <= MAX_GPU_NAME_CHARS and value.isprintable()):
            raise InventoryError(
                f"gpus[{i}].{name}: {quoted(value)} must be text of 1 to {MAX_GPU_NAME_CHARS} printable "
                "characters (no line break, escape or other control character)"
            )
    where = first_non_ascii(gpu.type)
    if where is not None:
        # A lease is decided as ``gpu:<type in lower case>`` (``GatedBroker``): until review R68
        # a type ``\u212a80`` (KELVIN SIGN) was leased under a grant for ``gpu:k80``.
        raise InventoryError(
            f"gpus[{i}].type: {quoted(gpu.type)} holds {where}: a GPU type is ASCII "
            "(a lease is decided as gpu:TYPE, the type in lower case)"
        )
    memory = gpu.memory_gb
    # NaN compares false with every bound, so it is refused too.
    if isinstance(memory, bool) or not isinstance(memory, int | float) or not 0 < memory <= MAX_GPU_MEMORY_GB:
        raise InventoryError(
            f"gpus[{i}].memory_gb: {quoted(memory)} must be a number of GB above 0 and at most {MAX_GPU_MEMORY_GB}"
        )


def synthetic_topology(
    nodes: int = 8,
    gpus_per_node: int = 8,
    *,
    domains_per_node: int = 1,
    nodes_per_rack: int = 4,
    types: Sequence[tuple[str, float]] = (("H100", 80.0),),
) -> Topology:
    """A regular cluster: ``nodes`` x ``gpus_per_node`` GPUs, ``domains_per_node`` NVLink domains
    per node, ``nodes_per_rack`` nodes per rack; node ``k`` gets GPU type ``types[k % len(types)]``.

    Raises ``InventoryError`` for non-positive sizes or a node that does not split evenly into
    domains.
    """
    if nodes < 1 or gpus_per_node < 1 or domains_per_node < 1 or nodes_per_rack < 1 or not types:
        raise InventoryError("synthetic topology sizes must be positive")
    if gpus_per_node % domains_per_node:
        raise InventoryError("gpus_per_node must split evenly into domains_per_node")
    per_domain = gpus_per_node // domains_per_node
    gpus = []
    for n in range(nodes):
        gpu_type, memory = types[n % len(types)]
        for k in range(gpus_per_node):
            gpus.append(
                GpuSpec(
                    id=f"n{n:03d}/g{k}",
                    type=gpu_type,
                    memory_gb=memory,
                    node=f"n{n:03d}",
                    nvlink_domain=f"n{n:03d}/nvl{k // per_domain}",
                    rack=f"r{n // nodes_per_rack:02d}",
                )
            )
    return Topology(tuple(gpus))


def from_inventory(inventory: Inventory) -> Topology:
    """The broker's topology for a loaded inventory, GPUs in inventory order.

    Raises ``InventoryError`` when the inventory declares no GPU.
    """
    return Topology(
        tuple(
            GpuSpec(
                id=gpu.id,
                type=gpu.type,
                memory_gb=gpu.memory_gb,
                node=gpu.node,
                nvlink_domain=inventory.domain_of(gpu.id),
                rack=inventory.rack_of(gpu.id),
            )
            for gpu in inventory.gpus
        )
    )
