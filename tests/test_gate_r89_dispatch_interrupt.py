"""Review R89: a Ctrl-C while ``Gate.dispatch`` waited for its answer raised ``KeyboardInterrupt``
in the caller at once, but the dispatcher's call ran on, on the gate's loop thread: the backend
generated up to ``max_tokens`` and the router counted the call in flight (one of the backend's
``max_concurrency`` slots) until the generation ended (the LangGraph ``DispatchedChatModel``'s
sync ``invoke`` takes this path). The interrupted wait now cancels the call, as leaving
``dispatch_stream`` and cancelling ``adispatch`` do: the backend's request is aborted, its slot
freed, and the next call is served.

Real components: a Gate on a SQLite file (``test_gate``'s policy), a real ``Dispatcher`` and
``Router`` over loopback HTTP to a ``SimServer`` in real time, and a real SIGINT sent to this
process (``_thread.interrupt_main`` does not wake a blocked ``Future.result``: it would show
nothing)."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from test_gate import Setup

from agentgate.dispatch import Dispatcher, Router, inventory_from_mapping
from agentgate.sim import SimServer

MODEL = "llama-3.1-8b"


def _payload(tokens: int) -> dict[str, Any]:
    return {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": tokens}


def _press_ctrl_c_once_generating(server: SimServer) -> None:
    """Send SIGINT to this process once the engine generates the call (the caller then waits in
    ``Gate.dispatch``); give up after 10 s, and the call then ends on its own."""
    deadline = time.monotonic() + 10.0
    while not server.engine.running and time.monotonic() < deadline:
        time.sleep(0.01)
    if server.engine.running:
        os.kill(os.getpid(), signal.SIGINT)


def _freed(server: SimServer, router: Router) -> bool:
    """Whether the engine runs nothing and the router holds no slot of ``b0``, waiting up to 5 s
    for the cancellation to reach them (the generation asked for takes about 18 s)."""
    deadline = time.monotonic() + 5.0
    while (server.engine.running or router.in_flight("b0")) and time.monotonic() < deadline:
        time.sleep(0.01)
    return not server.engine.running and router.in_flight("b0") == 0


@pytest.mark.usefixtures("default_sigint")
def test_ctrl_c_during_dispatch_cancels_the_call_on_the_backend(tmp_path: Path) -> None:
    with SimServer() as server:
        inventory = inventory_from_mapping(
            {"backends": [{"name": "b0", "url": server.url, "models": [MODEL], "max_concurrency": 1}]}
        )
        router = Router(inventory)
        setup = Setup(tmp_path)
        try:
            setup.gate.attach_dispatcher(Dispatcher(inventory, router))
            presser = threading.Thread(target=_press_ctrl_c_once_generating, args=(server,))
            presser.start()
            try:
                with pytest.raises(KeyboardInterrupt):
                    setup.gate.dispatch(_payload(4000))
            finally:
                presser.join()
            assert _freed(server, router)  # until R89: still generating, the slot held
            answer = setup.gate.dispatch(_payload(2))  # the one slot serves the next call
            assert answer.backend == "b0" and answer.usage.completion_tokens == 2
        finally:
            setup.gate.close()
