"""``agentgate serve`` leaves a signal ignored at its start ignored (review R94, docs/cli.md).

A script that runs ``agentgate serve ... &`` starts it with SIGINT ignored (a non-interactive
shell does so for a background job, which shares the script's process group), and ``trap ''
TERM`` or a supervisor leaves SIGTERM ignored. Until review R94 ``serve`` (and uvicorn's
``capture_signals``) installed its stop request for both signals whatever they were: the Ctrl-C
meant for the script stopped the gateway, exit 0. Now the ignored signal does nothing, and the
other one still stops the gateway as before.
"""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import _http
import pytest
from test_cli_signals import ENV, ROOT, chat_world, serve_command  # noqa: F401 (chat_world: a fixture)
from test_gateway import _free_port, wait_until_serving

from agentgate.dispatch.gateway import GatewayGate
from agentgate.sim import SimServer

# How long the server must go on answering after the ignored signal. Before R94 it began its
# shutdown at uvicorn's next tick (0.1 s) and, with no grace, stopped listening at once.
WATCH_S = 0.6


@pytest.mark.parametrize(
    ("ignored", "stop"),
    # SIGHUP ignored at start is ``nohup agentgate serve ...``: the gateway outlives the terminal
    # (review R96, when SIGHUP became a stop request).
    [(signal.SIGINT, signal.SIGTERM), (signal.SIGTERM, signal.SIGINT), (signal.SIGHUP, signal.SIGTERM)],
    ids=["sigint-ignored", "sigterm-ignored", "sighup-ignored"],
)
def test_a_signal_ignored_at_start_does_not_stop_the_gateway(
    chat_world: tuple[Path, Path, Path, SimServer, GatewayGate, Any],  # noqa: F811
    ignored: signal.Signals,
    stop: signal.Signals,
) -> None:
    port = _free_port()
    base = f"http://127.0.0.1:{port}"
    process = subprocess.Popen(
        serve_command(chat_world, port, grace=0),
        stderr=subprocess.PIPE,
        text=True,
        env=ENV,
        cwd=ROOT,
        preexec_fn=lambda: signal.signal(ignored, signal.SIG_IGN),  # as the shell or trap does
    )
    try:
        wait_until_serving(base, process)
        process.send_signal(ignored)
        deadline = time.monotonic() + WATCH_S
        while time.monotonic() < deadline:
            assert process.poll() is None, "the ignored signal stopped the gateway"
            assert _http.get(base + "/healthz").status_code == 200
            time.sleep(0.05)
        process.send_signal(stop)
        _, err = process.communicate(timeout=20)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate(timeout=20)
    assert process.returncode == 0, err
    assert "Traceback" not in err, err
