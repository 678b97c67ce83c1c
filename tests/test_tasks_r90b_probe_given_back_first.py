"""Review R90b: a ``SyncScheduler`` with a store gives a half-open probe's cross-process claim back
on the store pool, in the background (``_end_probe``). A probe whose call ended without telling
the breaker (an interrupt in its classifier or its ``pauses`` predicate, a pause) had its error
handed to its caller's thread while that give-back was still on its way: a call made right after
found the claim still held and was refused with ``CircuitOpen`` ("its 1 probe(s) run"), though no
probe ran (seen once as a failure of tests/test_tasks_r90_handed_interrupt.py on a loaded
machine). The caller is now told once the give-back has landed.

The store's give-back here waits for the next call to try its claim (at most ``HOLD_S``): the
order a loaded machine took now and then is then the order taken every time."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from test_tasks_r90_handed_interrupt import (
    CONFIG,
    RESET_S,
    _down,
    _in_a_thread,
    _probe_down,
    _ProbeDown,
    _ran,
)

from agentgate.store import open_store
from agentgate.store.leases import Lease, LeaseManager
from agentgate.tasks import (
    DEFAULT_CLASSIFIER,
    BreakerState,
    Classifier,
    SyncScheduler,
    ToolCall,
    from_function,
)

#: Longest the probe's give-back waits for the next call's claim: with the fix, the next call
#: comes only after the give-back, so this is how long each case takes.
HOLD_S = 0.3


def _interrupted(error: BaseException) -> bool:
    if isinstance(error, _ProbeDown):
        raise KeyboardInterrupt
    return False


def _paused(error: BaseException) -> bool:
    return isinstance(error, _ProbeDown)


def _classified_interrupted(error: BaseException) -> str | None:
    _interrupted(error)
    return None


#: How the probe's call ends without telling the breaker, and what its caller is told.
HOW = pytest.mark.parametrize(
    ("how", "told"),
    [
        ("interrupted in the classifier", "KeyboardInterrupt"),
        ("interrupted in pauses", "KeyboardInterrupt"),
        ("paused", "_ProbeDown"),
    ],
)


def _held_give_back(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """Patches ``LeaseManager`` to hold a probe's give-back until the next call tries for its
    claim (at most ``HOLD_S``); per probe claim given back, whether the next call's try came first."""
    claims: list[Lease | None] = []  # the probe's claim, then the next call's try for one
    next_claim_tried = threading.Event()
    given_back_after_it: list[bool] = []  # per probe claim given back: the next call's came first
    release, try_acquire = LeaseManager.release, LeaseManager.try_acquire

    def held_release(manager: LeaseManager, lease: Lease, **kwargs: Any) -> None:
        if lease.key.startswith("probe:"):
            given_back_after_it.append(next_claim_tried.wait(HOLD_S))
        release(manager, lease, **kwargs)

    def noted_try_acquire(manager: LeaseManager, key: str, limit: int, **kwargs: Any) -> Lease | None:
        if not key.startswith("probe:"):
            return try_acquire(manager, key, limit, **kwargs)
        claims.append(try_acquire(manager, key, limit, **kwargs))
        if len(claims) == 2:
            next_claim_tried.set()
        return claims[-1]

    monkeypatch.setattr(LeaseManager, "release", held_release)
    monkeypatch.setattr(LeaseManager, "try_acquire", noted_try_acquire)
    return given_back_after_it


def _ended(how: str) -> tuple[Classifier, Callable[[BaseException], bool] | None]:
    """The scheduler's classifier and the probe's ``pauses`` for ``how``."""
    classifier = DEFAULT_CLASSIFIER
    pauses: Callable[[BaseException], bool] | None = None
    if how == "interrupted in the classifier":
        classifier = from_function(_classified_interrupted) | DEFAULT_CLASSIFIER
    elif how == "interrupted in pauses":
        pauses = _interrupted
    else:
        pauses = _paused
    return classifier, pauses


@HOW
def test_a_probe_s_claim_is_back_before_its_caller_is_told(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, how: str, told: str
) -> None:
    given_back_after_it = _held_give_back(monkeypatch)
    classifier, pauses = _ended(how)
    scheduler = SyncScheduler(CONFIG, store=open_store(str(tmp_path / "s.db")), classifier=classifier)
    try:
        with pytest.raises(ConnectionRefusedError):
            scheduler.submit(ToolCall("t", {}), _down)  # opens the breaker
        time.sleep(RESET_S * 2)  # half open: the next call is its probe
        assert _in_a_thread(scheduler, ToolCall("t", {}, pauses=pauses), _probe_down) == told
        assert _in_a_thread(scheduler, ToolCall("t", {}), _ran) == "ran"  # was CircuitOpen
        assert given_back_after_it[0] is False  # back before the next call asked for its own
        assert scheduler.breakers()[0].state is BreakerState.CLOSED
    finally:
        scheduler.close(timeout_s=5)
