"""Attacks on backend credentials and on nested calls borrowing an ancestor's slot.

Credentials: a backend that echoes the ``Authorization`` it was sent into an answer agentgate
cannot parse (a bad status line, a bad header, usage that is not an object) must not get the key,
whole or cut, into any error agentgate raises, nor into the exceptions chained to it (a logger or
error tracker that walks ``__context__`` prints those). Real HTTP on 127.0.0.1 throughout: a raw
socket server that answers whatever bytes a test gives it.
"""

from __future__ import annotations

import asyncio
import contextlib
import http.server
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import _http
import aiohttp
import pytest
from test_backend_credentials import _Recorder

from agentgate.dispatch import Dispatcher, Router, inventory_from_mapping
from agentgate.dispatch.backends import BackendClient
from agentgate.dispatch.inventory import parse_inventory
from agentgate.errors import BackendCredentialError, BackendFailed, DispatchError
from agentgate.keys import load_public_key, load_signing_key
from agentgate.sim import SimServer
from agentgate.store._base import Store
from agentgate.store.leases import Lease, LeaseManager
from agentgate.tasks import Attempt, Scheduler, SchedulerConfig, ToolCall, ToolLimits

MODEL = "llama-3.1-8b"
KEY = "sk-r10-4c1d9a7e2b6f-backend-secret"
"""The backend key: every leak check looks for any 8 characters of it in a row."""
ENV = "AGENTGATE_R10_BACKEND_KEY"
CHAT = "/v1/chat/completions"
BODY = {"model": MODEL, "messages": [{"role": "user", "content": "hello"}], "max_tokens": 3}


def _fragments(text: str) -> list[str]:
    """Every run of 8 characters of ``KEY`` found in ``text``."""
    return [KEY[i : i + 8] for i in range(len(KEY) - 7) if KEY[i : i + 8] in text]


def _chain(exc: BaseException) -> list[BaseException]:
    """``exc`` and every exception chained to it (cause or context, shown or suppressed)."""
    seen: list[BaseException] = []
    todo: list[BaseException | None] = [exc]
    while todo:
        current = todo.pop()
        if current is None or any(current is known for known in seen):
            continue
        seen.append(current)
        todo += [current.__cause__, current.__context__]
    return seen


class _RawServer:
    """A real TCP server on 127.0.0.1 that reads one request head and answers the bytes
    ``answer(authorization)`` returns, then closes the connection."""

    def __init__(self, answer: Callable[[bytes], bytes]) -> None:
        self.answer = answer
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.sock.getsockname()[1]}"

    def _serve(self) -> None:
        while True:
            try:
                connection, _ = self.sock.accept()
            except OSError:
                return
            with connection:
                data = b""
                while b"\r\n\r\n" not in data:
                    piece = connection.recv(65536)
                    if not piece:
                        break
                    data += piece
                head = data.partition(b"\r\n\r\n")[0].split(b"\r\n")
                auth = next(
                    (line.split(b": ", 1)[1] for line in head if line.lower().startswith(b"authorization:")),
                    b"",
                )
                with contextlib.suppress(OSError):  # the client may have hung up
                    connection.sendall(self.answer(auth))

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def key_env(monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv(ENV, KEY)
    return ENV


def _json_answer(body: bytes) -> bytes:
    return b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (
        len(body),
        body,
    )


def _sse_answer(body: bytes) -> bytes:
    return b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: %d\r\n\r\n%s" % (
        len(body),
        body,
    )


ECHOES: dict[str, Callable[[bytes], bytes]] = {
    # The transport's own parsers quote the bytes they refuse (h11, aiohttp's llhttp).
    "bad status line": lambda auth: b"HTTP/1.1 2x0 " + b"y" * 30 + auth + b"\r\nContent-Length: 0\r\n\r\n",
    "bad header": lambda auth: (
        b"HTTP/1.1 200 OK\r\nX-E" + b"y" * 30 + auth + b"\x01: v\r\nContent-Length: 0\r\n\r\n"
    ),
    "not http": lambda auth: b"zz" + b"y" * 40 + auth + b"\r\n\r\n",
    # Usage that is not an object is quoted cut at 80 characters: the key straddles the cut.
    "usage cut": lambda auth: _json_answer(
        b'{"choices":[{"message":{"content":"x"},"delta":{"content":"x"}}],"usage":"'
        + b"x" * 60
        + auth
        + b'"}'
    ),
    "stream usage cut": lambda auth: _sse_answer(
        b'data: {"choices":[],"usage":"' + b"x" * 60 + auth + b'"}\n\n'
    ),
}


@pytest.fixture(params=sorted(ECHOES))
def echo(request: pytest.FixtureRequest) -> Iterator[_RawServer]:
    server = _RawServer(ECHOES[request.param])
    yield server
    server.close()


@pytest.mark.parametrize("transport", ["httpx", "aiohttp"])
async def test_an_echoed_key_is_in_no_error_nor_any_exception_chained_to_it(
    key_env: str, echo: _RawServer, transport: str
) -> None:
    backend = inventory_from_mapping(
        {
            "backends": [
                {"name": "b0", "url": echo.url, "engine": "vllm", "models": [MODEL], "api_key_env": key_env}
            ]
        }
    ).backends[0]
    errors: list[BaseException] = []
    async with _http.AsyncClient() as http, aiohttp.ClientSession() as session:
        client = BackendClient(backend, http, session=session if transport == "aiohttp" else None)
        for call in ("chat", "stream"):
            with pytest.raises(DispatchError) as info:
                if call == "chat":
                    await client.chat(BODY)
                else:
                    async for _ in client.stream(BODY):
                        pass
            errors.append(info.value)
    assert len(errors) == 2
    for error in errors:
        for linked in _chain(error):
            shown = f"{linked!s} {linked!r} {linked.args!r}"
            assert not _fragments(shown), (type(linked).__name__, shown)


@pytest.mark.parametrize(
    "field",
    [
        {"api_key_file": KEY},  # the key pasted where its file's path goes
        {"api_key_env": "Ab3" + KEY[7:].replace("-", "")},  # an alphanumeric key fits a variable's name
    ],
)
def test_a_key_pasted_in_place_of_its_file_or_variable_is_not_quoted_by_the_refusal(
    field: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    pasted = next(iter(field.values()))
    monkeypatch.delenv(pasted, raising=False)
    text = "backends:\n  - name: b0\n    url: http://10.0.0.1:8000\n    models: [m]\n"
    text += "".join(f"    {name}: {value}\n" for name, value in field.items())
    with pytest.raises(BackendCredentialError) as info:
        parse_inventory(text, source="inv.yaml")
    message = str(info.value)
    column = len(f"    {next(iter(field))}: ") + 1  # where the value starts
    assert message.startswith(f"inv.yaml:5:{column}: backends.0.{next(iter(field))}: backend 'b0': ")
    assert pasted[:8] not in message and pasted[-8:] not in message


def test_a_conventional_variable_name_is_still_named_when_unset(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("VLLM_API_KEY_2", raising=False)
    text = "backends:\n  - name: b0\n    url: http://10.0.0.1:8000\n    models: [m]\n    api_key_env: VLLM_API_KEY_2\n"
    with pytest.raises(BackendCredentialError, match="the environment variable VLLM_API_KEY_2 is not set"):
        parse_inventory(text, source="inv.yaml")


# --- keys new: a killed run must never cost the user a committed key --------------------------------

ROOT = Path(__file__).resolve().parents[1]

# `agentgate keys new NAME --dir DIR`, paused (forever) at the first fsync after its second link:
# NAME.pub is linked, so the pair is committed; the directory is being synced.
PAUSED_AFTER_COMMIT = """
import os, sys, time
real_link, real_fsync = os.link, os.fsync
links = [0]
def link(*args, **kwargs):
    real_link(*args, **kwargs)
    links[0] += 1
def fsync(fd):
    real_fsync(fd)
    if links[0] == 2:
        print("committed", flush=True)
        time.sleep(600)
os.link, os.fsync = link, fsync
from agentgate.cli.main import main
sys.exit(main(["keys", "new", sys.argv[1], "--dir", sys.argv[2]]))
"""


def test_a_run_killed_after_its_commit_leaves_a_key_no_later_run_removes(tmp_path: Path) -> None:
    """Killed once ``k.pub`` is linked, the pair is whole: the user may publish ``k.pub`` (move
    it away) and keep using ``k.key``. Before, the killed run's temporary files were still there,
    so the next ``keys new`` took ``k.key`` for a half-made pair and deleted the private key."""
    directory = tmp_path / "keys"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    process = subprocess.Popen(
        [sys.executable, "-c", PAUSED_AFTER_COMMIT, "k", str(directory)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        assert line.strip() == "committed", (
            line,
            process.stderr.read() if process.poll() is not None else "",
        )
    finally:
        process.send_signal(signal.SIGKILL)
        process.communicate(timeout=30)
    published = tmp_path / "k.pub"
    (directory / "k.pub").rename(published)  # the user publishes the public key
    did = load_public_key(published).did
    other = subprocess.run(
        [sys.executable, "-m", "agentgate.cli.main", "keys", "new", "other", "--dir", str(directory)],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert other.returncode == 0, other.stderr
    assert (directory / "k.key").exists(), sorted(p.name for p in directory.iterdir())
    assert load_signing_key(directory / "k.key").did == did


# --- a backend that rejects the key but serves /v1/models without it (llama.cpp's server) ------------


class _PublicModelsServer(http.server.ThreadingHTTPServer):
    """A real HTTP server on 127.0.0.1 like llama.cpp's server started with ``--api-key``:
    ``/health`` and ``/v1/models`` answer 200 to anyone; a chat call answers ``chat_status``
    (401 while the key is wrong) and is counted in ``chats``."""

    def __init__(self) -> None:
        self.chat_status = 401
        self.chats = 0
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def _answer(self, status: int, body: bytes) -> None:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self) -> None:
                self._answer(200, b'{"object": "list", "data": []}')

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers["Content-Length"]))
                server.chats += 1
                if server.chat_status != 200:
                    self._answer(server.chat_status, b'{"error": "Invalid API Key"}')
                    return
                answer = {"choices": [{"message": {"content": "ok"}, "finish_reason": "stop"}], "usage": {}}
                self._answer(200, json.dumps(answer).encode())

            def log_message(self, format: str, *args: Any) -> None:
                pass

        super().__init__(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.serve_forever, args=(0.02,), daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


async def _health_rounds(dispatcher: Dispatcher, backend: str, up: bool, rounds: int = 200) -> bool:
    """Wait (real time, a few health rounds) until ``backend`` is up (``up``) or down; True if so."""
    for _ in range(rounds):
        if dispatcher.is_down(backend) is not up:
            return True
        await asyncio.sleep(0.01)
    return False


async def test_a_backend_rejecting_the_key_behind_a_public_probe_is_retried_ever_less_often(
    key_env: str,
) -> None:
    """Its ``/v1/models`` answers 200 whatever the key, so the credentials probe passes at once and
    the backend came back after every ``cooldown_s``: one failed chat per cooldown, forever (53 of
    60 calls from 20 callers in 6 s sent it a chat). Now each rejection since it last served a call
    doubles its cooldown; a call it serves starts over. The clock is the test's: no timing."""
    now = [0.0]
    server = _PublicModelsServer()
    inv = inventory_from_mapping(
        {
            "backends": [
                {
                    "name": "cpp",
                    "url": server.url,
                    "engine": "vllm",
                    "models": [MODEL],
                    "api_key_env": key_env,
                }
            ]
        }
    )
    try:
        async with Dispatcher(
            inv,
            Router(inv),
            health_interval_s=0.01,
            cooldown_s=10.0,
            recovery_wait_s=0.0,
            max_attempts=1,
            clock=lambda: now[0],
        ) as dispatcher:

            async def rejected() -> None:
                with pytest.raises(BackendFailed, match="rejected our credentials"):
                    await dispatcher.chat(BODY)
                assert dispatcher.rejected_credentials("cpp")

            await rejected()  # first rejection: down for cooldown_s
            now[0] += 10.0
            assert await _health_rounds(dispatcher, "cpp", up=True)
            await rejected()  # second: down for twice cooldown_s
            now[0] += 10.0
            assert not await _health_rounds(dispatcher, "cpp", up=True, rounds=30)  # still down
            now[0] += 10.0
            assert await _health_rounds(dispatcher, "cpp", up=True)
            await rejected()  # third: four times
            now[0] += 30.0
            assert not await _health_rounds(dispatcher, "cpp", up=True, rounds=30)
            now[0] += 10.0
            assert await _health_rounds(dispatcher, "cpp", up=True)
            server.chat_status = 200  # the key is set right on the backend: a served call starts over
            assert (await dispatcher.chat(BODY)).content == "ok"
            server.chat_status = 401
            await rejected()
            now[0] += 10.0
            assert await _health_rounds(dispatcher, "cpp", up=True)
            assert server.chats == 5
    finally:
        server.shutdown()
        server.server_close()


# --- nested calls: a borrower that outlives its lender keeps the cross-process lease ------------------


def test_a_detached_nested_call_outliving_its_parent_keeps_the_cross_process_lease(store: Store) -> None:
    """Tool limit 1 across processes. The parent starts a nested call of its tool in a task it
    does not wait for, and returns; the nested call ran under the parent's slot and lease. Before:
    the parent's lease was given back when it finished, so another process took the tool's only
    lease while the nested call still ran (two running, limit 1). Now the lease passes to the
    nested call with the slot, and is given back when it finishes."""
    config = SchedulerConfig(tools={"a": ToolLimits(concurrency=1)})
    other_process = LeaseManager(store, ttl_s=10.0)
    taken: list[Lease] = []

    async def main() -> None:
        scheduler = Scheduler(config, store=store)
        started, release = asyncio.Event(), asyncio.Event()
        detached: list[asyncio.Task[str]] = []

        async def child(attempt: Attempt) -> str:
            started.set()
            await release.wait()
            return "child"

        async def parent(attempt: Attempt) -> str:
            call = ToolCall("a", arguments={"level": 2}, deadline=time.time() + 5.0)
            detached.append(asyncio.create_task(scheduler.submit(call, child)))
            await started.wait()
            return "parent"

        try:
            assert await scheduler.submit(ToolCall("a", deadline=time.time() + 5.0), parent) == "parent"
            assert not detached[0].done()  # the nested call runs on, its parent finished
            lease = await asyncio.to_thread(other_process.try_acquire, "tool:a", 1)
            if lease is not None:
                taken.append(lease)
            assert lease is None, "another process took the only lease while the nested call ran"
            release.set()
            assert await detached[0] == "child"
            assert scheduler.in_flight == 0
            lease = await asyncio.to_thread(other_process.try_acquire, "tool:a", 1)
            assert lease is not None  # given back when the nested call finished
            taken.append(lease)
        finally:
            release.set()
            await scheduler.aclose()

    try:
        asyncio.run(main())
    finally:
        for lease in taken:
            other_process.release(lease)
        other_process.close()


# --- a proxy in the environment ----------------------------------------------------------------------


async def test_a_proxy_in_the_environment_never_gets_the_backend_key(
    key_env: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """HTTP_PROXY set where agentgate runs: before, the dispatcher's health probes and metrics
    scrapes (httpx, which reads the proxy variables) went through that proxy with the backend's
    key in clear, while chat calls (aiohttp, which does not) went straight to the backend. Now
    every request goes straight to the backend."""
    backend, proxy = _Recorder(), _Recorder()
    for name in ("HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.setenv(name, proxy.url)
    for name in ("NO_PROXY", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
    inv = inventory_from_mapping(
        {
            "backends": [
                {
                    "name": "b0",
                    "url": backend.url,
                    "engine": "vllm",
                    "models": [MODEL],
                    "api_key_env": key_env,
                    "metrics_url": backend.url + "/metrics",
                }
            ]
        }
    )
    try:
        async with Dispatcher(inv, Router(inv), health_interval_s=0.01, scrape_interval_s=0.01):
            for _ in range(200):
                if {path for path, _ in backend.seen} >= {"/health", "/metrics"} or proxy.seen:
                    break
                await asyncio.sleep(0.01)
    finally:
        backend.close()
        proxy.close()
    assert proxy.seen == []
    assert ("/health", f"Bearer {KEY}") in backend.seen and ("/metrics", f"Bearer {KEY}") in backend.seen


@pytest.mark.parametrize("cancelled", [True, False])
def test_a_queued_nested_call_that_inherits_a_lease_before_it_resumes_holds_only_that_one(
    store: Store, cancelled: bool
) -> None:
    """The parent lends its slot to one nested call; a second queues. The first ends (the slot is
    lent to the queued one, whose task is woken) and the parent returns in the same loop turn, so
    the slot and its lease pass to a call that has not resumed yet. Cancelled then, it must give
    that lease back; resumed, it must run under it, not take a second one (which, with a limit
    of 1, never comes: it waited until its deadline, and the inherited lease stayed held)."""
    config = SchedulerConfig(tools={"a": ToolLimits(concurrency=1)})
    other_process = LeaseManager(store, ttl_s=10.0)
    taken: list[Lease] = []

    async def main() -> None:
        scheduler = Scheduler(config, store=store)
        first_done = asyncio.Event()
        nested: list[asyncio.Task[str]] = []

        async def first(attempt: Attempt) -> str:
            await asyncio.sleep(0.05)  # the second call queues meanwhile
            first_done.set()  # wakes the parent before this attempt's slot is lent on
            return "first"

        async def second(attempt: Attempt) -> str:
            assert not cancelled, "the second nested call was cancelled before it could run"
            return "second"

        async def parent(attempt: Attempt) -> str:
            for body in (first, second):
                call = ToolCall("a", arguments={"body": body.__name__}, deadline=time.time() + 3.0)
                nested.append(asyncio.create_task(scheduler.submit(call, body)))
                await asyncio.sleep(0.01)
            await first_done.wait()
            if cancelled:
                nested[1].cancel()
            return "parent"

        try:
            assert await scheduler.submit(ToolCall("a", deadline=time.time() + 5.0), parent) == "parent"
            assert await nested[0] == "first"
            if cancelled:
                with pytest.raises(asyncio.CancelledError):
                    await nested[1]
            else:
                assert await nested[1] == "second"
            assert scheduler.in_flight == 0
            for _ in range(100):  # a lease given back late is given back in a background task
                lease = await asyncio.to_thread(other_process.try_acquire, "tool:a", 1)
                if lease is not None:
                    taken.append(lease)
                    break
                await asyncio.sleep(0.01)
            assert taken, "the tool's only lease is still held with no call running"
        finally:
            await scheduler.aclose()

    try:
        asyncio.run(main())
    finally:
        for lease in taken:
            other_process.release(lease)
        other_process.close()


# --- key rotation -------------------------------------------------------------------------------------


async def test_a_rotated_key_file_is_read_again_once_the_backend_rejects_the_old_key(tmp_path: Path) -> None:
    """The backend's key is rotated (the backend takes only the new one; the operator writes it to
    the api_key_file) while the dispatcher runs. Before: the key was read once, at load, so the
    backend stayed down (rejecting the old key) until a restart. Now a backend down for rejecting
    our key has its key file read again on each health round; the new key is probed, and once
    accepted the backend serves calls with it."""
    path = tmp_path / "vllm.key"
    path.write_text("sk-r10-old-rotation-key\n")
    path.chmod(0o600)
    with SimServer(time_scale=0.01, api_key="sk-r10-old-rotation-key") as server:
        inv = inventory_from_mapping(
            {
                "backends": [
                    {
                        "name": "b0",
                        "url": server.url,
                        "engine": "vllm",
                        "models": [MODEL],
                        "api_key_file": str(path),
                    }
                ]
            }
        )
        async with Dispatcher(
            inv, Router(inv), health_interval_s=0.02, cooldown_s=0.05, recovery_wait_s=0.0, max_attempts=1
        ) as dispatcher:
            assert (await dispatcher.chat(BODY)).backend == "b0"
            server.api_key = "sk-r10-new-rotation-key"  # rotated on the backend first
            with pytest.raises(BackendFailed, match="rejected our credentials"):
                await dispatcher.chat(BODY)
            replacement = tmp_path / "vllm.key.new"
            replacement.write_text("sk-r10-new-rotation-key\n")
            replacement.chmod(0o600)
            replacement.replace(path)  # then in the key file
            for _ in range(300):
                if not dispatcher.is_down("b0"):
                    break
                await asyncio.sleep(0.01)
            assert not dispatcher.is_down("b0") and not dispatcher.rejected_credentials("b0")
            assert (await dispatcher.chat(BODY)).backend == "b0"
        assert server.authorizations[(CHAT, "Bearer sk-r10-new-rotation-key")] == 1
