"""``GatewayServer``: a ``Gateway`` served by uvicorn, in the foreground or in a background
thread, over the bounded HTTP protocol (``agentgate/_bounded_http.py``) with the limits it is given. Stopping lets the calls in flight
finish for a grace, then cuts and settles them, on uvicorn's forced exit too (``_Server``).
"""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from typing import TYPE_CHECKING

import uvicorn

from agentgate._bounded_http import BoundedHttpToolsProtocol, EmbeddedConfig
from agentgate._http_limits import (
    HEAD_TIMEOUT_S,
    MAX_HEAD_BYTES,
    MOST_SECONDS,
    STREAM_STALL_S,
    UNREAD_BODY_S,
    HttpLimits,
    port_number,
    positive_seconds,
)
from agentgate._shown import quoted
from agentgate.dispatch.gateway._errors import protocol_error
from agentgate.dispatch.gateway._stream import LAST_EVENT_S
from agentgate.errors import DispatchError, InputError

if TYPE_CHECKING:
    from agentgate.dispatch.gateway._app import Gateway

_HEAD_CUT = (
    "the gateway is shutting down: the request's head had not all arrived; nothing was decided or charged"
)
"""The 503 ``shutting_down`` message of a request whose head was still arriving when the stop began."""


class _GatewayHttp(BoundedHttpToolsProtocol):
    """The bounded HTTP protocol whose own refusals (431, 408, 400, 501, 505: before the app sees
    the request) are OpenAI-shaped JSON errors, as the app's are (``protocol_error``), counted in
    the gateway's ``agentgate_gateway_errors_total`` as they are."""

    gateway: Gateway
    """The gateway served (``serving``)."""

    @classmethod
    def serving(cls, gateway: Gateway, limits: HttpLimits) -> type[BoundedHttpToolsProtocol]:
        """This protocol with ``limits``, its refusals counted in ``gateway``'s metrics."""
        return type(cls.__name__, (cls.with_limits(limits),), {"gateway": gateway, "__doc__": cls.__doc__})

    def refusal_body(self, status: int, text: str) -> tuple[str, bytes]:
        answer = protocol_error(status, text)
        self.gateway._count_error(status, answer.code)
        return "application/json", bytes(answer.body)

    def shutdown(self) -> None:
        """uvicorn's start of the shutdown for this connection, but a request head partly read,
        with no answer before it still running, is answered 503 ``shutting_down`` (``connection:
        close``) rather than closed with none. uvicorn closes every connection with no request
        running at once: until review R96 a caller that had sent part of its head got EOF, which it
        could not tell from a crash, and a POST is not safe to send again after one. Nothing of it
        was decided, charged or audited, and nothing is now. A head behind an answer still running
        is a pipelined request: the connection closes after that answer (docs/gateway.md). A head
        has begun at its request line: blank lines before one, which HTTP says to ignore, begin
        none (counted as head bytes, they made an idle connection's close a 503 answering nothing)."""
        if self._reading_head and self._head_begun and self._refusal is None and not self._answering():
            self._refuse(503, "Service Unavailable", _HEAD_CUT)
        super().shutdown()


class _Server(uvicorn.Server):
    """uvicorn's server, whose forced exit still cuts and settles the calls in flight.

    A second Ctrl-C during the shutdown grace (or Ctrl-C after SIGTERM) is uvicorn's forced
    exit: it stopped waiting for the calls in flight without cancelling them and skipped the
    app's lifespan shutdown. The calls were then cancelled by the event loop's own end, and
    the lifespan task with them, which uvicorn logged as a traceback on stderr ("Exception in
    'lifespan' protocol"), and the dispatcher and its connections were never closed. Here the
    forced exit ends the grace at once instead: the calls are cancelled as when the grace runs
    out (each settled and answered as docs/gateway.md says, a stream's last event sent within
    ``LAST_EVENT_S``), then the app's lifespan shutdown runs.
    """

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        await super().shutdown(sockets)
        if not self.force_exit:
            return
        tasks = list(self.server_state.tasks)
        for task in tasks:
            task.cancel(msg="Task cancelled, forced exit")
        if tasks:
            await asyncio.wait(tasks, timeout=LAST_EVENT_S + 1.0)
        await self.lifespan.shutdown()


class GatewayServer:
    """Serves a ``Gateway`` with uvicorn, in the foreground (``run``) or a background thread (``start``).

    Stopped by SIGINT or SIGTERM (``run`` in the main thread) or ``stop()``, it lets the calls in
    flight finish for ``shutdown_grace_s``; a second SIGINT meanwhile ends the grace at once.
    Either way the calls still in flight are then cut and settled (docs/gateway.md).
    """

    def __init__(
        self,
        gateway: Gateway,
        *,
        host: str = "127.0.0.1",
        port: int = 8000,
        shutdown_grace_s: int = 10,
        stream_stall_s: float = STREAM_STALL_S,
        head_timeout_s: float = HEAD_TIMEOUT_S,
        max_head_bytes: int = MAX_HEAD_BYTES,
        unread_body_s: float = UNREAD_BODY_S,
    ) -> None:
        """``shutdown_grace_s``: how long stopping waits for calls in flight (a stream whose caller
        stopped reading would otherwise hold the shutdown for as long as it lasts); then they are
        cancelled, and each is settled as a caller that went away (its outcome recorded).

        ``stream_stall_s``: how long an answer may wait for a caller that reads none of it (its
        bytes fill the socket's buffers, nothing leaves them) before the connection is aborted,
        the backend request cancelled and the call settled as abandoned, its outcome audited as
        ``caller_stalled``.

        ``head_timeout_s``: how long a request head (line and headers) may take to arrive, from
        the connection opening or the head's first byte; then it is answered 408 and the
        connection closed.

        ``max_head_bytes``: the most bytes of a request head (line and headers), and of a chunked
        body's framing and trailer fields beyond its own bytes; past it the answer is 431 and the
        connection is closed.

        ``unread_body_s``: how long the rest of a body may take to arrive (read and dropped) once
        its request was answered before it all came (refused: too large, an encoding not
        supported); then the connection is closed.

        Raises ``InputError`` naming the parameter unless ``port`` is a whole number from 0 (any
        free port, chosen by ``start``) to 65535, ``shutdown_grace_s`` is a whole number
        of seconds from 0 to a day, each other time a positive number of seconds, at most a day,
        and ``max_head_bytes`` a whole number from 1024 to 16 MiB
        (``agentgate/_http_limits.py``). (The body's limits are the ``Gateway``'s:
        ``max_body_bytes``, ``body_timeout_s``.)
        """
        self.gateway = gateway
        self.host = host
        # Until review R85 unchecked: uvicorn bound 70000 as 4464 (the port modulo 2**16) while
        # ``port`` and ``url`` said 70000, and -1 or True failed ``start`` with a bare "did not start".
        port = port_number(port)
        # Checked here, as the other limits are (until review R62 only ``agentgate serve`` checked
        # it: ``"10"`` or NaN made a server whose ``stop()`` raised, after it stopped taking calls).
        grace = shutdown_grace_s
        if isinstance(grace, bool) or not isinstance(grace, int) or not 0 <= grace <= MOST_SECONDS:
            raise InputError(
                f"shutdown_grace_s must be a whole number of seconds from 0 to {MOST_SECONDS:g}, not {quoted(grace)}"
            )
        self.shutdown_grace_s = grace
        self.stream_stall_s = positive_seconds(stream_stall_s, "stream_stall_s")
        self.limits = HttpLimits(
            max_head_bytes=max_head_bytes,
            head_timeout_s=head_timeout_s,
            stall_s=self.stream_stall_s,
            unread_body_s=unread_body_s,
        )
        """The bounds of each connection (the protocol's: ``agentgate/_bounded_http.py``)."""
        self.head_timeout_s = self.limits.head_timeout_s
        config = EmbeddedConfig(
            gateway.app,
            host=host,
            port=port,
            access_log=False,
            lifespan="on",
            ws="none",  # no WebSockets served: no websockets import (a DeprecationWarning in old uvicorn)
            # Request heads are bounded in size and time (a chain token, in a header, may be up
            # to 32 KiB: docs/token-format.md); uvicorn's own httptools protocol bounds neither.
            http=_GatewayHttp.serving(gateway, self.limits),
            timeout_graceful_shutdown=shutdown_grace_s,
        )
        self.server: uvicorn.Server = _Server(config)
        self.port = port
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        """The OpenAI base URL, e.g. ``http://127.0.0.1:8000/v1`` (``http://[::1]:8000/v1`` for an
        IPv6 host)."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/v1"

    def run(self) -> None:
        """Serve until interrupted."""
        self.server.run()

    def start(self, timeout: float = 10.0) -> GatewayServer:
        """Serve in a background thread; returns once the port accepts connections (port 0: any
        free port, then in ``port`` and ``url``). Called again while its thread serves (or is
        starting), it starts no other: it waits for that one, as the first call did.

        Raises ``DispatchError`` if it does not start within ``timeout`` seconds, or if the server
        was stopped: a ``GatewayServer`` serves once (a new one serves again).
        """
        if self.server.should_exit:
            raise DispatchError(
                f"the gateway on {self.host}:{self.port} was stopped and does not start again: "
                "serve with a new GatewayServer"
            )
        # Until review R85 each call started another thread on the one uvicorn server: the first
        # was lost to ``stop()``, which waited out its timeout while both threads went on serving.
        if self._thread is None or not self._thread.is_alive():
            self._thread = threading.Thread(target=self.server.run, name=f"gateway-{self.port}", daemon=True)
            self._thread.start()
        deadline = time.monotonic() + timeout
        while not self.server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise DispatchError(f"the gateway on {self.host}:{self.port} did not start")
            time.sleep(0.01)
        if self.port == 0:  # the operating system chose one
            self.port = int(self.server.servers[0].sockets[0].getsockname()[1])
        return self

    def stop(self) -> None:
        """Stop serving and wait for the thread (calls in flight: at most ``shutdown_grace_s``)."""
        self.server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=self.shutdown_grace_s + 10)
            self._thread = None
