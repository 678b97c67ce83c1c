"""A concurrency lease lost by a holder that stopped renewing it while alive (review R58): a
process paused (SIGSTOP, a VM paused, a long stall) or cut off from the store past its lease's
TTL finds, when it next renews, that its slot expired and was taken over by another process. It
forgets that lease and says so (a warning): the call still running under it passes the limit."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from agentgate.store import Store, open_store
from agentgate.store.leases import LeaseManager


class Clock:
    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


def test_a_lease_taken_over_while_its_holder_was_paused_is_forgotten_with_a_warning(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    """Review R58: a holder that did not renew within the TTL (paused) lost its slot to
    another; its next renew renewed nothing, yet it went on counting the lease as held and
    renewing it in vain, and nothing told the operator the limit had been passed."""
    clock = Clock()
    paused = LeaseManager(store, ttl_s=10, holder="paused", clock=clock)
    other = LeaseManager(store, ttl_s=10, holder="other", clock=clock)
    try:
        lease = paused.try_acquire("tool:pay", 1)
        assert lease is not None
        clock.now += 11  # paused past its TTL: the slot is free to take
        assert other.try_acquire("tool:pay", 1) is not None
        with caplog.at_level(logging.WARNING, logger="agentgate.store.leases"):
            assert paused.renew() == 0
        assert paused.held() == 0
        (said,) = [r.getMessage() for r in caplog.records if r.name == "agentgate.store.leases"]
        assert "'tool:pay' slot 0 of paused was lost" in said and "passes the limit" in said
        # The other's lease is untouched; the paused one's release of its lost lease changes nothing.
        paused.release(lease)
        assert [row.holder for row in other.rows("tool:pay")] == ["other"]
    finally:
        paused.close()
        other.close()


def test_a_lease_given_back_while_it_was_renewed_says_nothing(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    """Only a lease still held and gone from the store is lost: one released is not."""
    clock = Clock()
    manager = LeaseManager(store, ttl_s=10, holder="h", clock=clock)
    try:
        kept = manager.try_acquire("tool:pay", 2)
        given = manager.try_acquire("tool:pay", 2)
        assert kept is not None and given is not None
        manager.release(given)
        with caplog.at_level(logging.WARNING, logger="agentgate.store.leases"):
            assert manager.renew() == 1
        assert manager.held() == 1 and not caplog.records
    finally:
        manager.close()


HOLDER = textwrap.dedent(
    """
    import logging, sys, time
    from pathlib import Path
    from agentgate.store import open_store
    from agentgate.store.leases import LeaseManager

    logging.basicConfig(level=logging.WARNING, stream=sys.stdout, format="%(name)s %(message)s")
    url, work = sys.argv[1], Path(sys.argv[2])
    leases = LeaseManager(open_store(url), ttl_s=1.0, holder="stopped")
    assert leases.try_acquire("tool:pay", 1) is not None
    (work / "holding").touch()
    deadline = time.monotonic() + 60
    while leases.held() and time.monotonic() < deadline:  # the heartbeat renews every ttl/3
        time.sleep(0.02)
    print("held", leases.held(), flush=True)
    """
)


def test_a_process_stopped_past_its_lease_learns_it_lost_the_slot(store: Store, tmp_path: Path) -> None:
    """Review R58, real processes: a holder SIGSTOPped past its TTL, its slot taken by another
    process, then SIGCONTed: its heartbeat finds the lease gone, forgets it and warns."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, store.url, str(tmp_path)], env=env, stdout=subprocess.PIPE, text=True
    )
    other_store = open_store(store.url)
    other = LeaseManager(other_store, ttl_s=60, holder="other")
    try:
        deadline = time.monotonic() + 60
        while not (tmp_path / "holding").exists():
            assert holder.poll() is None and time.monotonic() < deadline, "the holder never took its slot"
            time.sleep(0.01)
        os.kill(holder.pid, signal.SIGSTOP)
        while other.try_acquire("tool:pay", 1) is None:  # free once the stopped one's lease expired
            assert time.monotonic() < deadline, "the stopped holder's slot never came back"
            time.sleep(0.05)
        os.kill(holder.pid, signal.SIGCONT)
        out, _ = holder.communicate(timeout=60)
    finally:
        if holder.poll() is None:
            os.kill(holder.pid, signal.SIGKILL)
            holder.wait()
        other.close()
        other_store.close()
    assert "slot 0 of stopped was lost" in out and out.strip().endswith("held 0"), out
