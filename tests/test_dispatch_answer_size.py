"""An answer larger than any chat completion is refused on every client path.

The gateway's lean pool (``UpstreamPool``) read a non-streamed answer whole, however large, while
``BackendClient.chat`` capped the body at ``MAX_ANSWER_BYTES`` on its own clients (aiohttp,
httpx): a backend answering 65 MiB (or an endless announced body) filled the gateway's memory.
Every path raises ``AnswerTooLarge`` (until review R57 ``BackendFailed``, which the dispatcher
retried on other backends: the call's own doing taken for the backend's failure).
"""

from __future__ import annotations

import http.server

import _http
import pytest
from test_broker_library_use import RawBackend, _inventory, _payload

from agentgate.dispatch.backends import MAX_ANSWER_BYTES, BackendClient, Timeouts
from agentgate.dispatch.gateway._upstream import UpstreamPool
from agentgate.errors import AnswerTooLarge


def _huge_answer(handler: http.server.BaseHTTPRequestHandler) -> None:
    """A well-formed chat completion whose content is MAX_ANSWER_BYTES + 1 MiB of text."""
    head, tail = b'{"choices":[{"message":{"role":"assistant","content":"', b'"},"finish_reason":"stop"}]}'
    size = MAX_ANSWER_BYTES + (1 << 20)
    handler.send_response(200)
    handler.send_header("content-type", "application/json")
    handler.send_header("content-length", str(len(head) + size + len(tail)))
    handler.end_headers()
    handler.wfile.write(head)
    block = b"x" * (1 << 20)
    for _ in range(size >> 20):
        handler.wfile.write(block)
    handler.wfile.write(tail)


@pytest.mark.parametrize("pooled", [False, True], ids=["dispatcher-clients", "gateway-pool"])
async def test_an_answer_larger_than_any_chat_completion_is_refused_on_every_path(pooled: bool) -> None:
    backend = RawBackend(_huge_answer)
    pool = UpstreamPool()
    try:
        async with _http.AsyncClient() as http_client:
            client = BackendClient(
                _inventory(backend.url).backends[0], http_client, Timeouts(first_token_s=20)
            )
            if pooled:
                client.transport = pool
            with pytest.raises(AnswerTooLarge, match="larger than"):
                await client.chat(_payload())
    finally:
        await pool.aclose()
        backend.stop()
