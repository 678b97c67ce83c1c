"""Review R87c: R87b moved the dispatcher's ``start`` out of the gate's ``_dispatch_lock``, but
``attach_dispatcher`` still takes that plain lock for short sections, and a signal handler calling
``gate.close()`` in the attaching thread while it held one deadlocked (docs/dispatch.md said it
does not). The lock is now re-entrant and each section safe to re-enter: whatever line of the
attach's last section the handler's ``close`` lands on, the gate closes, and the dispatcher is
stopped (by that close, or by the attach, which then raises ``DispatchError``), never left
running. The signal is placed on each line with a line trace; an alarm breaks a deadlock.

Real components: a Gate on a SQLite file (``test_gate``'s policy); a stand-in dispatcher."""

from __future__ import annotations

import inspect
import signal
import sys
import threading
from types import FrameType
from typing import Any, cast

import pytest
from test_gate import Setup
from test_gate_r87_attach_dispatcher import _StandIn
from test_gate_r87_attach_dispatcher import setup as setup  # the fixture
from test_gate_r87b_attach_outside_lock import _HandlerExit, _on_usr1

import agentgate.gate._dispatching as dispatching
from agentgate.dispatch.dispatcher import Dispatcher
from agentgate.errors import DispatchError

pytestmark = pytest.mark.skipif(
    threading.current_thread() is not threading.main_thread(), reason="signal handlers run in the main thread"
)


def _last_section() -> list[int]:
    """The lines of ``attach_dispatcher``'s last section under the lock, from its ``with`` to the
    ``return`` of a dispatcher attached."""
    lines, first = inspect.getsourcelines(dispatching._Dispatching.attach_dispatcher)
    check = next(i for i, line in enumerate(lines) if "if not self._dispatch_closed:" in line)
    start = max(i for i in range(check) if "with self._dispatch_lock:" in lines[i])
    end = next(i for i in range(check, len(lines)) if lines[i].strip() == "return")
    return [first + i for i in range(start, end + 1) if not lines[i].strip().startswith("#")]


@pytest.mark.parametrize("raises", [True, False], ids=["handler-exits", "handler-returns"])
@pytest.mark.parametrize("line", _last_section())
def test_a_signal_handlers_close_on_any_line_under_the_lock_closes_the_gate(
    setup: Setup, line: int, raises: bool
) -> None:
    standin = _StandIn()
    closed: list[bool] = []
    fired: list[bool] = []

    def on_signal(signum: int, frame: FrameType | None) -> None:
        setup.gate.close(timeout_s=1)
        closed.append(True)
        if raises:
            raise _HandlerExit

    def local(frame: FrameType, event: str, arg: Any) -> Any:
        if event == "line" and frame.f_lineno == line and not fired:
            fired.append(True)
            signal.raise_signal(signal.SIGUSR1)
        return local

    def tracer(frame: FrameType, event: str, arg: Any) -> Any:
        code = frame.f_code
        if code.co_filename == dispatching.__file__ and code.co_name == "attach_dispatcher":
            return local
        return None

    before_trace = sys.gettrace()
    ended: list[BaseException] = []
    with _on_usr1(on_signal):
        sys.settrace(tracer)
        try:
            setup.gate.attach_dispatcher(cast(Dispatcher, standin))
        except (_HandlerExit, DispatchError) as exc:  # until R87c: _Deadlocked
            ended.append(exc)
        finally:
            sys.settrace(before_trace)
    if not fired:
        pytest.skip(f"line {line} does not run on this path")
    assert closed == [True] and standin.closed == 1 and not setup.gate.dispatches
    if not raises and ended:
        assert "closed while the dispatcher started" in str(ended[0])
