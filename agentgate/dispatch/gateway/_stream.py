"""A streamed answer on the wire: its server-sent events (``_sse``; ``_error_event``, the last one
of an answer that is incomplete), the response that closes its events however it ends
(``_EventStream``), and the last event of a stream the shutdown cut, which has ``LAST_EVENT_S`` to
leave the gateway's buffer (``_last_words``).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncGenerator
from typing import Any

import orjson
from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

from agentgate._bounded_http import RESET, UNSENT
from agentgate.dispatch.gateway._cuts import STOPPED, _uncancel_all

LAST_EVENT_S = 3.0
"""Seconds a stream cut at shutdown has to send its last event and see it leave the gateway's buffer."""
_log = logging.getLogger("agentgate.dispatch.gateway._app")  # the gateway's one logger (docs/gateway.md)


def _sse(body: dict[str, Any]) -> bytes:
    """``body`` as one server-sent event of a streamed answer (compact JSON, by orjson, as a JSON
    answer is encoded again: ``_as_read``). A backend's event, which is most of them, is nested
    at most as deep as orjson writes (the stream reader refuses a deeper one, ``_parse_chunk``);
    until review R88 Python's ``json`` wrote them, and overflowed the stack on one ~990 deep."""
    return b"data: " + orjson.dumps(body) + b"\n\n"


def _error_event(message: str, code: str) -> bytes:
    """The server-sent event that ends a stream whose answer is incomplete: an OpenAI-shaped
    ``error`` carrying ``message`` and ``code``."""
    body = {"error": {"message": message, "type": "api_error", "param": None, "code": code}}
    return b"data: " + json.dumps(body).encode() + b"\n\n"


class _EventStream(StreamingResponse):
    """A ``StreamingResponse`` that closes its events when it ends, however it ends.

    Starlette leaves a body iterator that was waiting on ``send`` (a caller that stopped reading,
    then was cut) suspended, to be closed whenever it is collected; closing it here settles the
    call and closes its backend request at once.
    """

    def __init__(self, events: AsyncGenerator[bytes, None], **kwargs: Any) -> None:
        super().__init__(events, **kwargs)
        self._events = events

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        except asyncio.CancelledError:
            # The server stopped and its shutdown grace is over. The stream ends with an error
            # event, as a backend failure does, instead of a cut connection and a traceback in
            # the server's log; its outcome is audited ``GatewayStopped``.
            # Only the server cancels a request's task, and under load it reaches us counted more
            # than once (anyio re-delivers a cancellation to the task its scope runs in): every
            # count is the same shutdown, so all are taken back before the last event is sent.
            task = asyncio.current_task()
            if task is None or task.cancelling() == 0:
                raise
            scope[STOPPED] = True
            _uncancel_all(task)
            _log.warning("agentgate gateway: a stream was cut: the gateway is shutting down")
            message = "the gateway is shutting down; the answer is incomplete"
            await _last_words(task, scope, send, _error_event(message, "shutting_down"))
        finally:
            await self._events.aclose()


async def _last_words(task: asyncio.Task[Any], scope: Scope, send: Send, event: bytes) -> None:
    """Send a stream's last ``event`` and its end, then wait until the connection's buffer has
    handed them to the kernel (which delivers them after the process has exited); a caller that
    does not take them within ``LAST_EVENT_S`` seconds has its connection reset. Never raises: a
    failed send ends the wait, and a cancellation meanwhile (the event loop's own end cancels
    every task again) is taken back, since the wait is bounded."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + LAST_EVENT_S
    messages = [
        {"type": "http.response.body", "body": event, "more_body": True},
        {"type": "http.response.body", "body": b"", "more_body": False},
    ]
    unsent = scope.get(UNSENT)
    while loop.time() < deadline:
        try:
            async with asyncio.timeout_at(deadline):
                while messages:
                    await send(messages[0])
                    del messages[0]
                while callable(unsent) and unsent() > 0:
                    await asyncio.sleep(0.01)
                return
        except asyncio.CancelledError:
            _uncancel_all(task)
        except Exception:
            break
    reset = scope.get(RESET)
    if callable(unsent) and unsent() > 0 and callable(reset):
        # The caller did not take them in time: the connection is reset now rather than left
        # open, with its buffers, past the server's end (an embedded server's loop closed with it).
        reset()
