"""Review R61: garbage metrics from a backend name the backend.

``BackendClient.scrape`` names the backend in every ``BackendFailed`` it raises for a transport
failure or a body over its limit, but metrics it read and could not use (a count of 1e308
requests, NaN, a negative gauge, a page of HTML) were refused by ``load_from_text`` with no name:
a caller scraping several backends could not tell which one sent them. Real HTTP on 127.0.0.1.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import _http
import pytest
from test_gateway_hostile_backends import Hostile, _head

from agentgate.dispatch import inventory_from_mapping
from agentgate.dispatch.backends import BackendClient, Timeouts
from agentgate.errors import BackendFailed


class Metrics(Hostile):
    """Answers every request 200 with ``reply`` as its body, then closes the connection."""

    def __init__(self) -> None:
        super().__init__()
        self.reply = b""

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await reader.readuntil(b"\r\n\r\n")
            length = str(len(self.reply))
            writer.write(
                _head("200 OK", {"content-type": "text/plain", "content-length": length}) + self.reply
            )
            await writer.drain()
        finally:
            writer.close()


@pytest.fixture
def metrics() -> Iterator[Metrics]:
    made = Metrics()
    yield made
    made.close()


@pytest.mark.parametrize(
    "body",
    [
        b"vllm:num_requests_running 1e308\n",
        b"vllm:num_requests_running NaN\n",
        b"vllm:num_requests_waiting -3\n",
        b"<html><body>502 Bad Gateway</body></html>",
        b"",
    ],
    ids=["huge", "nan", "negative", "html", "empty"],
)
async def test_metrics_that_cannot_be_used_are_backend_failed_naming_the_backend(
    metrics: Metrics, body: bytes
) -> None:
    """Review R61: each is a ``BackendFailed`` whose message starts with the backend's name."""
    metrics.reply = body
    inventory = inventory_from_mapping(
        {
            "backends": [
                {
                    "name": "gauges",
                    "url": metrics.url,
                    "engine": "vllm",
                    "models": ["m"],
                    "metrics_url": metrics.url,
                }
            ]
        }
    )
    async with _http.AsyncClient() as http:
        client = BackendClient(inventory.backends[0], http, Timeouts())
        with pytest.raises(BackendFailed, match=r"^gauges: "):
            await client.scrape(0.0)
