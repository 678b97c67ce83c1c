"""Review R93 of the simulated backend's prefix hashing: only the blocks the engine can read.

An image content part counts as a fixed 1,445 tokens, but the prompt's text holds its whole data
URL: the server hashed all of it into 64-character blocks, on its event loop, a 15 MiB image
245,761 chained hashes (half a second, 10 MB kept per request in flight) of which the engine
read at most 90. The server now hashes the prompt's first ``prompt_tokens // block_tokens``
blocks only: the leading hashes of the prompt's whole text. For a text prompt those are the
router's (``prompt_block_hashes``); for a media part they are not, as the router hashes a digest
of the part since review R94 (tests/test_dispatch_r94_sim_prefix_agreement.py, where they agree).
"""

from __future__ import annotations

from typing import Any

import _http
import pytest

from agentgate.dispatch.prefix import block_hashes, estimate_prompt_tokens, prompt_block_hashes, prompt_text
from agentgate.sim import SimServer
from agentgate.sim._engine import SimRequest

_IMAGE = "data:image/png;base64," + "A" * 400_000
"""A data URL of 400,000 characters: 6,250 blocks of text, an image of 1,445 tokens."""


def _served_hashes(messages: list[dict[str, Any]], monkeypatch: pytest.MonkeyPatch) -> tuple[int, ...]:
    """The hashes of the request the server hands its engine for a chat of ``messages``."""
    seen: list[SimRequest] = []
    with SimServer(time_scale=1e-6) as server:
        add = server.engine.add

        def recording(sim: SimRequest) -> None:
            seen.append(sim)
            add(sim)

        monkeypatch.setattr(server.engine, "add", recording)
        response = _http.post(
            server.url + "/v1/chat/completions", json={"messages": messages, "max_tokens": 1}, timeout=5.0
        )
    assert response.status_code == 200
    (sim,) = seen
    return sim.hashes


def test_an_image_prompt_is_hashed_no_further_than_its_tokens(monkeypatch: pytest.MonkeyPatch) -> None:
    messages = [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "x" * 200},
                {"type": "image_url", "image_url": {"url": _IMAGE}},
            ],
        }
    ]
    tokens = estimate_prompt_tokens(messages)
    hashes = _served_hashes(messages, monkeypatch)
    assert len(hashes) == tokens // 16
    # The whole text's hashes, data URL included (the router's differ there since R94): the
    # server's are their leading ones.
    assert hashes == block_hashes(prompt_text(messages), 16)[: len(hashes)]


def test_a_text_prompt_is_hashed_as_the_router_hashes_it(monkeypatch: pytest.MonkeyPatch) -> None:
    messages = [{"role": "system", "content": "s" * 1000}, {"role": "user", "content": "é" * 3001}]
    assert _served_hashes(messages, monkeypatch) == prompt_block_hashes(messages, 16)
