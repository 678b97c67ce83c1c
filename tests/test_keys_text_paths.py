"""Review R48, fifth second look: commit e7106b1 (``is_key_text`` looking at every word of the
value; the tool name ``_other`` reserved; ``resume_writing`` restarting the stall clock).

Found, and fixed by the lead in the same session (both were strict xfails: a path ending in a file
name with an extension is never key text; a new answer stops the last answer's tail clock unless
writing is paused):
- agentgate/keys.py: a plain key path that names no file is hidden as "looks like a key itself"
  when a blank, a parenthesis, ``=`` or ``:`` splits off a dot-free run of 40 or more characters
  of its directories (``.../Downloads/agentgate-production-signing-keys (1)/agent.pub``,
  ``.../My Keys/agent.pub``, ``.../tenant=acme/agent.pub``): the user no longer sees the typo.
  54b4d1c quoted all of them.
- agentgate/dispatch/gateway/_http.py: the stall clock ``resume_writing`` starts when no answer is
  being written keeps its mark when the next keep-alive answer is written below the high-water
  mark: the bytes of that answer count as the caller's stall, so a caller that keeps reading
  (slower than the new answer's size per ``stall_s``) is reset.

Both gateway defects share one cause, the mark of the stall clock outliving the answer it was
taken for (the tail clock of ``on_response_complete`` has it too, on uvloop, the gateway's loop).

Holds (passing): ordinary paths (dots, short, Windows, spaces without a long run) are quoted; a
value naming an existing file is never taken for a key, key text inside path-like punctuation is
still hidden; a Gate cannot reach the reserved name; the async scheduler's ``CircuitOpen`` names
the tool and the overflow only when shared, and a named tool with a late key stays under its own.
"""

from __future__ import annotations

import base64
import socket
import time
from pathlib import Path
from typing import Any

import pytest
from test_gateway_stall_paused import HIGH_WATER, _EndsPaused, answered, connected

from agentgate.capabilities import canonical_resource
from agentgate.errors import CapabilityError, CircuitOpen, KeyFileError
from agentgate.keys import is_key_text, load_public_key, load_signing_key
from agentgate.tasks import Scheduler, SchedulerConfig, ToolCall
from agentgate.tasks._call import OVERFLOW_BREAKER
from agentgate.tasks._config import BreakerPolicy, ToolLimits
from agentgate.tasks._limits import PER_NAME_STATE

_SEED = base64.b64encode(bytes(range(7, 39))).decode()

# --- is_key_text: plain paths -----------------------------------------------------------------


@pytest.mark.parametrize(
    "tail",
    [
        "etc/agentgate/keys/agent.key",
        "keys/prod/agent.pub",
        "a.pub",
        "My Keys/agent.pub",
        "agentgate-production-signing-key-2026/agent.pub",
        "C:\\Users\\alice\\Documents\\agentgate-production-signing-keys\\agent.pub",
        "C:/Users/alice/Documents/agentgate-production-keys/agent.pub",
    ],
)
def test_an_ordinary_path_that_names_no_file_is_quoted(tail: str) -> None:
    # Under a short directory: one of 40+ characters with a blank below it is the xfail below.
    path = "/srv/no-such/" + tail if not tail.startswith("C:") else tail
    assert not is_key_text(path)
    with pytest.raises(KeyFileError) as raised:
        load_signing_key(path)
    assert "not shown" not in str(raised.value) and "looks like a key" not in str(raised.value)


@pytest.mark.parametrize(
    "tail",
    [
        "Downloads/agentgate-production-signing-keys (1)/agent.pub",
        "projects/agentgate-deployment/My Keys/agent.pub",
        "deployments/production/eu-west-1/tenant=acme/agent.pub",
    ],
)
def test_a_plain_path_with_a_blank_or_assignment_that_names_no_file_is_quoted(tail: str) -> None:
    path = "/srv/no-such/" + tail  # 54b4d1c quoted each of these
    with pytest.raises(KeyFileError) as raised:
        load_public_key(path)
    assert "agent.pub" in str(raised.value)  # the user sees which path was not found


def test_a_value_naming_an_existing_file_is_never_key_text(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    for name in (_SEED.replace("/", "_"), "x " + _SEED.replace("/", "_"), "{" + "a" * 40 + "}"):
        (tmp_path / name).write_text("not a key")
        assert not is_key_text(name)
        with pytest.raises(KeyFileError) as raised:
            load_signing_key(name)
        assert "looks like a key" not in str(raised.value)


def test_key_text_inside_a_path_like_value_is_still_hidden() -> None:
    for value in ("keys/" + _SEED, "ed25519:" + _SEED + ".", "(" + _SEED + ")"):
        with pytest.raises(KeyFileError) as raised:
            load_signing_key(value)
        assert _SEED not in str(raised.value)


def test_a_gate_cannot_name_the_reserved_tool() -> None:
    """A Gate builds its ToolCall from a canonical policy resource: ``_other`` never is one, so
    the reservation cannot turn a call the Gate allowed into an InputError."""
    with pytest.raises(CapabilityError):
        canonical_resource("tool:_other")


# --- the stall clock started by resume_writing, and a next keep-alive answer ------------------

SMALL = 40 << 10
"""The next answer: written at once, below the high-water mark (writing never pauses)."""
TAIL = 36 << 10
"""A first answer of which some 6 to 10 KiB stay in the transport's buffer (SNDBUF, RCVBUF)."""


class _TwoAnswers(_EndsPaused):
    """uvicorn with the gateway's protocol: ``/big`` ends with writing paused, ``/small`` writes
    ``SMALL`` bytes in one go, ``/tail`` ``TAIL`` bytes (its tail left in the transport's buffer,
    below the high-water mark, when the caller has not read yet)."""

    async def _app(self, scope: Any, receive: Any, send: Any) -> None:
        size = {"/small": SMALL, "/tail": TAIL}.get(scope["path"])
        if size is None:
            await self._ends_paused(send)
            return
        headers = [(b"content-length", str(size).encode())]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": b"s" * size, "more_body": False})


def _reads_on(sock: socket.socket, received: bytes) -> bool:
    """Ask for ``/small`` on the same connection and read on, steadily (2 KiB every 50 ms: some
    20 KiB per stall limit), until it came whole (True) or the connection was cut (False)."""
    sock.sendall(b"GET /small HTTP/1.1\r\nHost: x\r\n\r\n")
    try:
        while not received.endswith(b"s" * SMALL):
            time.sleep(0.05)
            piece = sock.recv(2048)
            if not piece:
                return False
            received += piece
    except ConnectionResetError:
        return False
    return True


def _scene() -> bool | None:
    """None: not set up (the window below low water was missed); else whether the caller, reading
    steadily, got both answers whole."""
    with _TwoAnswers() as served, connected(served) as (sock, protocol, transport):
        sock.sendall(b"GET /big HTTP/1.1\r\nHost: x\r\n\r\n")
        answered(protocol)
        received = b""
        while not 0 < transport.get_write_buffer_size() <= HIGH_WATER // 4:
            if transport.get_write_buffer_size() == 0:
                return None
            piece = sock.recv(256)
            assert piece
            received += piece
        # Writing resumed with bytes left and no answer running: the clock runs.
        return _reads_on(sock, received)


def test_a_caller_reading_steadily_through_a_next_keep_alive_answer_is_not_cut() -> None:
    for _ in range(3):
        result = _scene()
        if result is not None:
            assert result, "a caller that kept reading was reset"
            return
    raise AssertionError("the scene was never set up")


def _reads_both_after_a_tail(loop: str) -> bool:
    with _TwoAnswers(loop) as served, connected(served) as (sock, protocol, transport):
        sock.sendall(b"GET /tail HTTP/1.1\r\nHost: x\r\n\r\n")
        answered(protocol)
        # The tail's clock runs (the answer ended with bytes in the transport's buffer).
        assert 0 < transport.get_write_buffer_size() + SMALL < HIGH_WATER
        return _reads_on(sock, b"")


def test_on_uvloop_a_caller_reading_steadily_after_a_tail_is_not_cut() -> None:
    """The same mark, older than e7106b1: the clock ``on_response_complete`` starts for an answer's
    tail, the next answer (asked for on the same connection) written on top of it."""
    assert _reads_both_after_a_tail("uvloop"), "a caller that kept reading was reset"


# --- the CircuitOpen of the async scheduler ---------------------------------------------------


async def test_the_async_schedulers_circuit_open_names_the_tool_and_the_overflow_only_when_shared() -> None:
    """The sync path is pinned (second_look4); the async one raises from two other places."""
    config = SchedulerConfig(
        result_cache_size=0,
        tools={"pay": ToolLimits()},
        breaker=BreakerPolicy(failure_threshold=1, reset_timeout_s=3600),
    )
    scheduler = Scheduler(config)

    async def down(_attempt: object) -> str:
        raise ConnectionError("down")

    async def ok(_attempt: object) -> str:
        return "ok"

    try:
        with pytest.raises(ConnectionError):
            await scheduler.submit(ToolCall("pay"), down)
        with pytest.raises(CircuitOpen) as named:
            await scheduler.submit(ToolCall("pay"), ok)
        assert named.value.key == "tool:pay" and "shares" not in str(named.value)
        for i in range(PER_NAME_STATE):
            scheduler.shared.breaker_for(ToolCall(tool=f"made-up-{i}"))
        with pytest.raises(ConnectionError):
            await scheduler.submit(ToolCall("late-0"), down)
        with pytest.raises(CircuitOpen) as shared:
            await scheduler.submit(ToolCall("late-1", breaker_key="backend:late"), ok)
        assert shared.value.key == OVERFLOW_BREAKER
        assert "'late-1'" in str(shared.value) and "late-0" not in str(shared.value)
        # A named tool with a late key stays under its own (open) breaker, not the overflow's.
        with pytest.raises(CircuitOpen) as late:
            await scheduler.submit(ToolCall("pay", breaker_key="backend:late"), ok)
        assert late.value.key == "tool:pay" and "shares" not in str(late.value)
    finally:
        await scheduler.aclose()
