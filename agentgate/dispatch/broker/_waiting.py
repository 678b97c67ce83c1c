"""A request waiting in the broker's queue (``_Waiting``): when it came, when its wait ends, and the
GPUs nominated for it, with the leases it waits on (preemption) or whether it drains a group."""

from __future__ import annotations

from dataclasses import dataclass, field

from agentgate.dispatch.broker._model import GangRequest


@dataclass
class _Waiting:
    request: GangRequest
    submitted_at: float
    deadline: float
    seq: int
    nominated: tuple[int, ...] = ()
    victims: set[str] = field(default_factory=set)
    draining: bool = False
