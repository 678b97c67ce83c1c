"""The limits of the gateway's HTTP edge as operator settings (review R55): the request head's
time (``GatewayServer(head_timeout_s=...)``, ``agentgate serve --head-timeout-s``) and the body's
size and time (``Gateway(max_body_bytes=..., body_timeout_s=...)``, ``--max-body-bytes``,
``--body-timeout-s``), each checked (a positive, finite number; a typed error naming it).

Real loopback sockets against the gateway tests' ``env`` fixture, and one ``agentgate serve``
process."""

from __future__ import annotations

import contextlib
import math
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from test_gateway import NAMES, Env, _free_port, _policy_text, wait_until_serving

from agentgate.cli.main import main
from agentgate.dispatch.gateway import Gateway, GatewayServer
from agentgate.errors import InputError
from agentgate.keys import SigningKey

pytest_plugins = ("test_gateway",)  # its ``backends`` and ``env`` fixtures

_HEAD = b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"


def _answer(port: int, data: bytes, pause: float = 0.0, rest: bytes = b"") -> bytes:
    """Send ``data`` (then, after ``pause`` seconds, ``rest``) and read until the connection closes."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(data)
        if pause:
            time.sleep(pause)
            with contextlib.suppress(OSError):
                sock.sendall(rest)
        received = b""
        with contextlib.suppress(TimeoutError, ConnectionResetError):
            while piece := sock.recv(65536):
                received += piece
    return received


@contextlib.contextmanager
def _served(env: Env, server: dict[str, Any] | None = None, **gateway: Any) -> Any:
    """A second gateway over ``env``'s gate and inventory, with these settings."""
    made = GatewayServer(Gateway(env.gate, env.server.gateway.inventory, **gateway), port=0, **(server or {}))
    made.start()
    try:
        yield made
    finally:
        made.stop()


def test_the_head_timeout_is_a_server_setting(env: Env) -> None:
    """Review R55: the head timeout was a module constant (10 s) no operator could set.

    Rule: ``GatewayServer(head_timeout_s=...)`` bounds the time a request head may take: a head
    not complete within it is answered a bare 408 and the connection closed."""
    with _served(env, {"head_timeout_s": 0.3}) as server:
        answer = _answer(server.port, b"GET /healthz HTTP/1.1\r\n", pause=0.8, rest=b"Host: x\r\n\r\n")
    assert answer.startswith(b"HTTP/1.1 408 "), answer[:200]


def test_the_body_limit_and_timeout_are_gateway_settings(env: Env) -> None:
    """Review R55: the body limit (8 MiB) and body timeout (60 s) were module constants no
    operator could set.

    Rule: ``Gateway(max_body_bytes=N)`` answers 413 to a body over N bytes, read or declared
    with ``Expect: 100-continue`` (then before any of it is sent), and
    ``Gateway(body_timeout_s=...)`` answers 408 to a body not all arrived in time; each refusal
    names the limit and is audited as a deny."""
    before = len(env.entries())
    with _served(env, max_body_bytes=100, body_timeout_s=0.3) as server:
        large = b'{"messages": [{"role": "user", "content": "%s"}]}' % (b"a" * 100)
        read = _answer(
            server.port, _HEAD + b"Content-Length: %d\r\nConnection: close\r\n\r\n" % len(large) + large
        )
        declared = _answer(server.port, _HEAD + b"Content-Length: 101\r\nExpect: 100-continue\r\n\r\n")
        slow = _answer(server.port, _HEAD + b"Content-Length: 50\r\n\r\n{")
    for answer in (read, declared):
        assert answer.startswith(b"HTTP/1.1 413 ") and b"over 100 bytes" in answer, answer[:300]
    assert b"100 Continue" not in declared
    assert slow.startswith(b"HTTP/1.1 408 ") and b"did not arrive within 0.3 s" in slow, slow[:300]
    assert [e.kind for e in env.entries()[before:]] == ["deny"] * 3


@pytest.mark.parametrize("value", [0, -1, math.nan, math.inf, True, "10"])
@pytest.mark.parametrize("setting", ["head_timeout_s", "stream_stall_s", "body_timeout_s", "max_body_bytes"])
def test_a_setting_that_is_not_a_positive_finite_number_is_refused_naming_it(
    env: Env, setting: str, value: Any
) -> None:
    """Review R55: each limit is a positive finite number (``max_body_bytes`` a whole one); any
    other value is an ``InputError`` naming the setting, before anything is served.
    Review R55: ``stream_stall_s``'s error named "the stream stall limit", not the parameter."""
    inventory = env.server.gateway.inventory
    with pytest.raises(InputError, match=f"^{setting} must be "):
        if setting in ("head_timeout_s", "stream_stall_s"):
            GatewayServer(Gateway(env.gate, inventory), port=0, **{setting: value})
        else:
            Gateway(env.gate, inventory, **{setting: value})
    if setting == "max_body_bytes":
        with pytest.raises(InputError, match=setting):
            Gateway(env.gate, inventory, max_body_bytes=1.5)


@pytest.mark.parametrize("flag", ["--head-timeout-s", "--body-timeout-s", "--max-body-bytes"])
@pytest.mark.parametrize("value", ["0", "-1", "nan", "inf", "x"])
def test_a_serve_flag_out_of_range_is_one_line_naming_it(
    flag: str, value: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R55: ``agentgate serve`` refuses a limit that is not a positive finite number (a
    whole one for ``--max-body-bytes``) with exit 2 and one line naming the flag."""
    with pytest.raises(SystemExit) as exited:
        main(["serve", "--policy", "p.yaml", "--inventory", "i.yaml", flag, value])
    err = capsys.readouterr().err
    assert exited.value.code == 2 and "Traceback" not in err
    lines = [line for line in err.splitlines() if line.startswith("agentgate: error: ")]
    assert len(lines) == 1 and f"argument {flag}: " in lines[0], err


def _serve_command(tmp_path: Path, backends: Any) -> tuple[list[str], int]:
    """The ``agentgate serve`` command line of a gateway over the first simulated backend, on a
    store made in ``tmp_path`` and a free port (returned), for a test to add its flags to."""
    keys = {name: SigningKey.generate() for name in NAMES}
    policy = tmp_path / "policy.yaml"
    policy.write_text(_policy_text({n: k.did for n, k in keys.items()}))
    inventory = tmp_path / "inventory.yaml"
    sim = backends[0]
    inventory.write_text(
        f"backends:\n  - {{name: sim, url: '{sim.url}', engine: vllm, models: [{sim.model_name}]}}\n"
    )
    store = tmp_path / "serve.db"
    assert main(["store", "init", "--store", str(store)]) == 0
    port = _free_port()
    command = [sys.executable, "-m", "agentgate.cli.main", "serve", "--policy", str(policy)]
    command += ["--inventory", str(inventory), "--port", str(port), "--store", str(store)]
    return command, port


def test_agentgate_serve_applies_its_limit_flags(tmp_path: Path, backends: Any) -> None:
    """Review R55: ``agentgate serve --head-timeout-s --body-timeout-s --max-body-bytes`` reach
    the gateway it serves: a slow head is a 408, a body over the limit a 413 naming it, a slow
    body a 408 naming its timeout."""
    command, port = _serve_command(tmp_path, backends)
    command += ["--head-timeout-s", "0.3", "--body-timeout-s", "0.3", "--max-body-bytes", "100"]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        wait_until_serving(f"http://127.0.0.1:{port}", process)
        head = _answer(port, b"GET /healthz HTTP/1.1\r\n", pause=0.8, rest=b"Host: x\r\n\r\n")
        large = _answer(port, _HEAD + b"Content-Length: 101\r\nExpect: 100-continue\r\n\r\n")
        slow = _answer(port, _HEAD + b"Content-Length: 50\r\n\r\n{")
    finally:
        process.terminate()
        process.communicate(timeout=20)
    assert head.startswith(b"HTTP/1.1 408 "), head[:200]
    assert large.startswith(b"HTTP/1.1 413 ") and b"over 100 bytes" in large, large[:300]
    assert slow.startswith(b"HTTP/1.1 408 ") and b"within 0.3 s" in slow, slow[:300]


def test_the_head_size_and_the_unread_body_time_are_server_settings(env: Env) -> None:
    """Review R56: the head limit (64 KiB) and a refused body's remaining time (10 s) were module
    constants of the protocol no operator could set.

    Rule: ``GatewayServer(max_head_bytes=N)`` answers a bare 431 to a head over N bytes (the
    default takes it), and ``GatewayServer(unread_body_s=...)`` closes the connection of a request
    refused before its body all came once the rest has taken that long (here trickled on)."""
    head = b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\nX-Big: %s\r\n\r\n" % (b"a" * 4096)
    assert _answer(env.server.port, head).startswith(b"HTTP/1.1 200 ")
    with _served(env, {"max_head_bytes": 2048, "unread_body_s": 0.3}) as server:
        refused = _answer(server.port, head)
        with socket.create_connection(("127.0.0.1", server.port), timeout=0.05) as sock:
            sock.sendall(_HEAD + b"Content-Encoding: gzip\r\nContent-Length: 1000000\r\n\r\n{")
            received, closed = b"", False
            deadline = time.monotonic() + 5  # a bound on a failing test (the default is 10 s)
            while not closed and time.monotonic() < deadline:
                try:
                    sock.sendall(b" ")
                    while piece := sock.recv(65536):
                        received += piece
                    closed = True
                except TimeoutError:
                    time.sleep(0.05)
                except OSError:
                    closed = True
    assert refused.startswith(b"HTTP/1.1 431 "), refused[:200]
    assert received.startswith(b"HTTP/1.1 400 ") and b"is not supported" in received, received[:300]
    assert closed, "the connection was still open 5 s after the refusal"


_HEADS = ("max_head_bytes", (0, -1, 1023, 16 * 1024 * 1024 + 1, 1.5, True, "65536"))
_TIMES = ("head_timeout_s", "stream_stall_s", "unread_body_s", "body_timeout_s")


@pytest.mark.parametrize(
    ("setting", "value"),
    [(_HEADS[0], v) for v in _HEADS[1]]
    + [(s, v) for s in _TIMES for v in (86_401, 1e300)]
    + [("unread_body_s", v) for v in (0, -1, math.nan, math.inf, True, "10")],
)
def test_an_http_limit_out_of_its_range_is_refused_naming_it(env: Env, setting: str, value: Any) -> None:
    """Review R56: a time limit past any use (1e300 s) was taken, and the head size and unread
    body time were no settings at all.

    Rule: each time limit is above 0 and at most a day, ``max_head_bytes`` a whole number from
    1024 to 16 MiB; any other value is an ``InputError`` naming the setting."""
    inventory = env.server.gateway.inventory
    with pytest.raises(InputError, match=f"^{setting} must be "):
        if setting == "body_timeout_s":
            Gateway(env.gate, inventory, **{setting: value})
        else:
            GatewayServer(Gateway(env.gate, inventory), port=0, **{setting: value})


@pytest.mark.parametrize(
    ("flag", "value"),
    [("--max-head-bytes", v) for v in ("0", "-1", "1023", "16777217", "1.5", "x")]
    + [
        (f, v)
        for f in ("--unread-body-s", "--head-timeout-s", "--stream-stall-s", "--body-timeout-s")
        for v in ("86401", "1e300")
    ]
    + [("--unread-body-s", v) for v in ("0", "-1", "nan", "inf", "x")],
)
def test_a_serve_http_limit_flag_out_of_range_is_one_line_naming_it(
    flag: str, value: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R56: ``agentgate serve`` took ``--stream-stall-s 1e300``, and had no
    ``--max-head-bytes`` or ``--unread-body-s``.

    Rule: each is refused out of its range with exit 2 and one line naming the flag, before
    anything is opened; ``--help`` lists both."""
    with pytest.raises(SystemExit) as exited:
        main(["serve", "--policy", "p.yaml", "--inventory", "i.yaml", flag, value])
    err = capsys.readouterr().err
    assert exited.value.code == 2 and "Traceback" not in err
    lines = [line for line in err.splitlines() if line.startswith("agentgate: error: ")]
    assert len(lines) == 1 and f"argument {flag}: " in lines[0], err
    with pytest.raises(SystemExit):
        main(["serve", "--help"])
    shown = capsys.readouterr().out
    assert "--max-head-bytes" in shown and "--unread-body-s" in shown


def test_agentgate_serve_applies_its_head_size_flag(tmp_path: Path, backends: Any) -> None:
    """Review R56: ``agentgate serve --max-head-bytes N`` reaches the server it runs: a head over
    N bytes is a bare 431."""
    command, port = _serve_command(tmp_path, backends)
    command += ["--max-head-bytes", "2048", "--unread-body-s", "0.3"]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        wait_until_serving(f"http://127.0.0.1:{port}", process)
        big = _answer(port, b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: %s\r\n\r\n" % (b"a" * 4096))
    finally:
        process.terminate()
        process.communicate(timeout=20)
    assert big.startswith(b"HTTP/1.1 431 "), big[:200]
