"""Review R79: the dispatchers of one process share one TLS context for their probe and scrape
client. Each ``Dispatcher.start`` built its own (httpx loads the CA bundle into a fresh
``ssl.SSLContext`` per client: 45-60 ms of CPU), although most inventories name ``http://``
backends only; the suite, which starts hundreds of dispatchers, spent tens of CPU-seconds on it
(tests/README.md, "How long it takes, and where the time goes")."""

from __future__ import annotations

import ssl
from typing import Any

import pytest

from agentgate.dispatch import inventory_from_mapping
from agentgate.dispatch.dispatcher import Dispatcher, _trust_store
from agentgate.dispatch.router import Router


async def test_dispatchers_started_in_one_process_load_the_ca_bundle_once(
    monkeypatch: pytest.MonkeyPatch, unused_tcp_port: int
) -> None:
    made: list[ssl.SSLContext] = []
    build = ssl.create_default_context

    def counted(*args: Any, **kwargs: Any) -> ssl.SSLContext:
        made.append(build(*args, **kwargs))
        return made[-1]

    monkeypatch.setattr(ssl, "create_default_context", counted)
    _trust_store.cache_clear()  # as in a process that has started none yet
    url = f"http://127.0.0.1:{unused_tcp_port}"  # nothing listens there; the probes' outcome is no matter
    inventory = inventory_from_mapping(
        {"backends": [{"name": "b", "url": url, "engine": "vllm", "models": ["m"]}]}
    )
    for _ in range(3):
        async with Dispatcher(inventory, Router(inventory)):
            pass
    assert len(made) == 1
    # The one context still verifies what an https:// backend presents.
    (context,) = made
    assert context is _trust_store()
    assert context.verify_mode == ssl.CERT_REQUIRED and context.check_hostname
