"""Review R90: a ``SyncScheduler`` (no store) asked whether its tool's result was an async body
that never began (``not_begun``) after the attempt's outcome was in the breaker's hands, outside
the ``try`` that tells it. A result whose check raises (a lazy proxy such as werkzeug's
``LocalProxy`` used outside its context, whose ``__class__`` raises), or a Ctrl-C landing there,
kept a half-open probe for good: the breaker stayed half open with its only probe taken and
refused every later call. The check is now part of the attempt: an error there is a failed
attempt, as in the async core, and an interrupt gives the probe back."""

from __future__ import annotations

import time

import pytest

from agentgate.tasks import (
    Attempt,
    BreakerPolicy,
    BreakerState,
    SchedulerConfig,
    SyncScheduler,
    ToolCall,
)

RESET_S = 0.01
CONFIG = SchedulerConfig(
    breaker=BreakerPolicy(failure_threshold=1, reset_timeout_s=RESET_S, half_open_max_calls=1)
)


class _Uninspectable:
    """A result whose ``isinstance`` check raises ``raised``, as a lazy proxy out of context does."""

    def __init__(self, raised: BaseException) -> None:
        self.raised = raised

    @property  # type: ignore[misc]  # __class__ as a property: what the proxies do
    def __class__(self) -> type:
        raise self.raised


def _down(attempt: Attempt) -> str:
    raise ConnectionRefusedError("down")


def _ran(attempt: Attempt) -> str:
    return "ran"


@pytest.mark.parametrize(
    ("raised", "caught"),
    [
        (RuntimeError("working outside of application context"), RuntimeError),
        (KeyboardInterrupt(), KeyboardInterrupt),
    ],
)
def test_a_probe_whose_result_cannot_be_checked_is_not_kept(
    raised: BaseException, caught: type[BaseException]
) -> None:
    with SyncScheduler(CONFIG) as scheduler:
        with pytest.raises(ConnectionRefusedError):
            scheduler.submit(ToolCall("t", {}), _down)  # opens the breaker
        time.sleep(RESET_S * 2)  # half open: the next call is its probe
        with pytest.raises(caught):
            scheduler.submit(ToolCall("t", {}), lambda attempt: _Uninspectable(raised))
        time.sleep(RESET_S * 2)
        assert scheduler.submit(ToolCall("t", {}), _ran) == "ran"  # was CircuitOpen for good
        assert scheduler.breakers()[0].state is BreakerState.CLOSED


def test_an_error_checking_the_result_is_a_failed_attempt() -> None:
    with SyncScheduler(SchedulerConfig()) as scheduler:
        with pytest.raises(RuntimeError, match="outside of application context"):
            scheduler.submit(
                ToolCall("t", {}),
                lambda attempt: _Uninspectable(RuntimeError("outside of application context")),
            )
        [letter] = scheduler.dead_letters()
        assert [(error.error_class, error.error_type) for error in letter.errors] == [
            ("error", "RuntimeError")
        ]
