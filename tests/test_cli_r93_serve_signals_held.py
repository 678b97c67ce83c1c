"""``agentgate serve``: a signal after the shutdown began waits for the outcomes (review R93).

A real ``agentgate serve`` process streams an answer; the test holds the store's write lock
(a ``budget settle``, another gateway or a backup would), then sends SIGTERM. The stream is cut
at once (``--shutdown-grace-s 0``) and the shutdown waits on the store for its outcome. A second
signal then (Ctrl-C, or SIGTERM again as a supervisor repeats it) lands while the process waits;
the lock is released after it. Until review R93 uvicorn had put back Python's handlers by then:
the Ctrl-C raised in ``gate.close()`` and threw its last commit away (exit 130, the allow's
reservation held, no outcome), and the SIGTERM closed the event loop under a worker thread
(uvloop's traceback on stderr). Now either is taken as the stop already under way: exit 0, no
traceback, the outcome recorded and no reservation held.

The signal is sent a second after the cut, while the lock is still held: the process waits
on the store until the lock is released, however long that is, so a slow machine only makes the
signal land earlier in the same wait (never a failure from timing).
"""

from __future__ import annotations

import json
import signal
import sqlite3
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import _http
import httpx
import pytest
from test_cli_signals import ENV, ROOT, chat_world, serve_command  # noqa: F401 (chat_world: a fixture)
from test_gateway import _free_port, wait_until_serving
from test_gateway_stall import MODEL

from agentgate.dispatch.gateway import GatewayGate, invocation_headers
from agentgate.sim import SimServer


@pytest.mark.parametrize("second", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm-again"])
def test_a_signal_while_the_shutdown_waits_on_the_store_loses_no_outcome(
    chat_world: tuple[Path, Path, Path, SimServer, GatewayGate, Any],  # noqa: F811
    second: signal.Signals,
) -> None:
    _, _, store, _sim, issuer, agent = chat_world
    port = _free_port()
    env = {**ENV, "AGENTGATE_SQLITE_BUSY_TIMEOUT": "60"}  # the wait outlasts the test's lock
    process = subprocess.Popen(
        serve_command(chat_world, port, grace=0), stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT
    )
    body = {"model": MODEL, "messages": [{"role": "user", "content": "Tell me everything."}]}
    body |= {"max_tokens": 100_000, "stream": True}
    events: list[str] = []
    begun, ended = threading.Event(), threading.Event()

    def call() -> None:
        url = f"http://127.0.0.1:{port}/v1/chat/completions"
        try:
            headers = invocation_headers(agent.key, agent.chain, body)
            with _http.stream("POST", url, json=body, headers=headers, timeout=60) as response:
                for line in response.iter_lines():
                    if line.startswith("data: "):
                        events.append(line[6:])
                        begun.set()
        except httpx.HTTPError:
            pass
        finally:
            begun.set()
            ended.set()

    lock = sqlite3.connect(store, isolation_level=None, check_same_thread=False)
    try:
        wait_until_serving(f"http://127.0.0.1:{port}", process)
        threading.Thread(target=call, daemon=True).start()
        assert begun.wait(20), "the stream never began"
        lock.execute("BEGIN EXCLUSIVE")
        process.send_signal(signal.SIGTERM)
        assert ended.wait(20), "the stream was not cut"
        time.sleep(1)  # into the wait on the store (it lasts until the lock is released)
        process.send_signal(second)
        time.sleep(0.5)
        lock.execute("ROLLBACK")
        _, err = process.communicate(timeout=30)
    finally:
        lock.close()
        if process.poll() is None:
            process.kill()
            process.communicate(timeout=20)
    assert process.returncode == 0, err
    assert "Traceback" not in err and "not recorded" not in err, err
    assert json.loads(events[-1])["error"]["code"] == "shutting_down", events[-1:]
    issuer.flush()
    outcomes = [e for e in issuer.audit.entries() if e.kind == "outcome"]
    assert len(outcomes) == 1, outcomes
    states = [row[0] for row in issuer.store.query("SELECT state FROM budget_reservations")]
    assert "held" not in states, states
    assert issuer.audit.verify().ok
