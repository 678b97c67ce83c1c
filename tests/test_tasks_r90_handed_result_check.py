"""Review R90: a ``SyncScheduler`` with a store (each attempt handed to the loop thread and back)
asked whether its tool's result was an async body that never began (``not_begun``) outside the
``try`` that hands the outcome back. A result whose check raises (a lazy proxy such as werkzeug's
``LocalProxy`` used outside its context), or a Ctrl-C landing there, left the core's attempt
waiting for an outcome nobody gave: it held its tool's concurrency slot and lease while the
process lived, the next call queued until its deadline, and ``close`` waited out its timeout.
An error there is now the attempt's (a failed attempt, as without a store and in the async
core), and an interrupt cancels the handed attempt."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from test_tasks_r90_probe_result_check import _Uninspectable

from agentgate.store import open_store
from agentgate.tasks import Attempt, SchedulerConfig, SyncScheduler, ToolCall, ToolLimits

CONFIG = SchedulerConfig(tools={"t": ToolLimits(concurrency=1)})


def _ran(attempt: Attempt) -> str:
    return "ran"


@pytest.mark.parametrize(
    ("raised", "caught"),
    [
        (RuntimeError("working outside of application context"), RuntimeError),
        (KeyboardInterrupt(), KeyboardInterrupt),
    ],
)
def test_a_handed_attempt_whose_result_cannot_be_checked_gives_its_slot_back(
    tmp_path: Path, raised: BaseException, caught: type[BaseException]
) -> None:
    scheduler = SyncScheduler(CONFIG, store=open_store(str(tmp_path / "s.db")))
    try:
        with pytest.raises(caught):
            scheduler.submit(ToolCall("t", {}), lambda attempt: _Uninspectable(raised))
        # The slot (concurrency 1) and its lease are back: was DeadlineExceeded, queued for them.
        assert scheduler.submit(ToolCall("t", {}, deadline=time.time() + 5), _ran) == "ran"
    finally:
        started = time.monotonic()
        scheduler.close(timeout_s=5)
        assert time.monotonic() - started < 4  # nothing left for the drain to wait out


def test_an_error_checking_a_handed_result_is_a_failed_attempt(tmp_path: Path) -> None:
    scheduler = SyncScheduler(CONFIG, store=open_store(str(tmp_path / "s.db")))
    try:
        with pytest.raises(RuntimeError, match="outside of application context"):
            scheduler.submit(
                ToolCall("t", {}),
                lambda attempt: _Uninspectable(RuntimeError("outside of application context")),
            )
        [letter] = scheduler.dead_letters()
        assert [(error.error_class, error.error_type) for error in letter.errors] == [
            ("error", "RuntimeError")
        ]
    finally:
        scheduler.close(timeout_s=5)
