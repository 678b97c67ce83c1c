"""A call's claim on the slots of a ``SharedLimits``: the ``Waiter``, the ``Signal`` through which
a waiting one learns that it starts, and ``RUNNING``, the attempt whose tool runs in the caller's
context (what makes a call nested: ``_lending.py``)."""

from __future__ import annotations

import asyncio
import contextvars
from typing import TYPE_CHECKING, Protocol

from agentgate.tasks._call import ToolCall
from agentgate.tasks._config import PriorityClass, ToolLimits
from agentgate.tasks._fair import Entry

if TYPE_CHECKING:
    from agentgate.store.leases import Lease, LeaseManager
    from agentgate.tasks._limits import SharedLimits


class Signal(Protocol):
    """How a waiting call learns it was started (``set_result`` is called with the lock held)."""

    def done(self) -> bool: ...

    def set_result(self, result: None, /) -> None: ...

    def cancel(self) -> object: ...


class Waiter(Entry["Waiter"]):
    """One attempt's claim on slots: granted when started, ``queued`` while waiting.

    It is its own place in the fair queue (an ``Entry`` whose item is itself): a call that waits
    makes one object less (fewer for the garbage collector to walk while thousands wait).
    """

    __slots__ = (
        "borrowed",
        "call",
        "finished",
        "future",
        "granted",
        "lease",
        "lent",
        "limits",
        "loop",
        "owner",
        "parent",
        "queued",
        "queued_at",
        "thread",
        "urgency",
    )

    future: Signal  # set only when the call has to wait
    thread: int  # the thread of ``loop``, set with it

    def __init__(self, call: ToolCall, limits: ToolLimits, queued_at: float, owner: SharedLimits) -> None:
        self.call = call
        self.limits = limits
        self.queued_at = queued_at
        self.owner = owner
        self.granted = False
        self.finished = False
        #: Entered in the fair queue (it waited, or waits: ``alive``).
        self.queued = False
        #: The loop whose thread must resolve ``future`` (an asyncio future); None: thread-safe signal.
        self.loop: asyncio.AbstractEventLoop | None = None
        #: The running attempt this call was made from (a nested call), else None.
        self.parent: Waiter | None = None
        #: Limit dimension -> the ancestor whose slot this attempt runs under (None: none borrowed).
        self.borrowed: dict[str, Waiter] | None = None
        #: Limit dimension -> the nested attempt this one's slot is lent to (None: none lent).
        self.lent: dict[str, Waiter] | None = None
        #: The cross-process lease of this attempt's tool slot and the manager it came from (a
        #: scheduler with a store sets it, and gives it back after ``finish``); passed on with the
        #: tool slot to a nested attempt that outlives this one (``_finish_lending``). None: none.
        self.lease: tuple[LeaseManager, Lease] | None = None
        #: The class this call is scheduled at, not counting what it inherits as a nested call:
        #: its own, or the more urgent one of calls joined to it (its twin's class). Read by the
        #: nested calls it makes (``_inherited_priority``). None: its own class.
        self.urgency: PriorityClass | None = None

    @property  # the entry's item is the waiter itself (a property: no reference cycle)
    def item(self) -> Waiter:  # type: ignore[override]
        """The fair queue's item for this entry: the waiter itself."""
        return self


#: The attempt whose tool is running in this context (set by the schedulers around the tool).
RUNNING: contextvars.ContextVar[Waiter | None] = contextvars.ContextVar(
    "agentgate_running_call", default=None
)
