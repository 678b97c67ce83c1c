"""Calls submitted to a ``SyncScheduler``, each from its own thread, beside a call that holds the
one slot until released: the harness of the twin tests (review R59), written once."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from agentgate.tasks import Attempt, SyncScheduler, ToolCall


class SyncCallers:
    """``submit`` runs ``scheduler.submit`` in a new thread and keeps what it returned or raised
    under its label (``outcomes``); ``hold`` is a tool that takes the slot until ``release``;
    ``until`` waits at most ``wait_s`` for a condition and asserts it."""

    def __init__(self, scheduler: SyncScheduler, wait_s: float) -> None:
        self.scheduler = scheduler
        self.wait_s = wait_s
        self.outcomes: dict[str, BaseException | str] = {}
        self.release = threading.Event()
        self.holding = threading.Event()

    def hold(self, attempt: Attempt) -> str:
        self.holding.set()
        self.release.wait(self.wait_s)
        return "held"

    def submit(self, label: str, call: ToolCall, fn: Callable[[Attempt], str]) -> threading.Thread:
        def run() -> None:
            try:
                self.outcomes[label] = self.scheduler.submit(call, fn)
            except BaseException as exc:
                self.outcomes[label] = exc

        thread = threading.Thread(target=run)
        thread.start()
        return thread

    def until(self, condition: Callable[[], bool]) -> None:
        end = time.monotonic() + self.wait_s
        while not condition() and time.monotonic() < end:
            time.sleep(0.001)
        assert condition()
