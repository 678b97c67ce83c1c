"""Review R94: ``Dispatcher.route_request`` hashed a media part's base64 as prompt text. One 6 MiB
image, estimated at 1,458 prompt tokens, was 131,073 blocks; once dispatched they filled the
backend's prefix index (6,250 blocks at a 100k-token cache) and a shared system prompt that had
matched 2,496 cached tokens matched none. A media part is now hashed as a digest of it spanning
its estimated tokens (``prompt_block_hashes``)."""

from __future__ import annotations

import base64
from typing import Any

from agentgate.dispatch import Dispatcher, estimate_prompt_tokens, inventory_from_mapping
from agentgate.dispatch.prefix import prompt_block_hashes
from agentgate.dispatch.router import Router

INVENTORY = inventory_from_mapping(
    {"backends": [{"name": "b", "url": "http://127.0.0.1:9", "models": ["m"], "kv_capacity_tokens": 100_000}]}
)
SYSTEM = {"role": "system", "content": "You are a helpful agent. " * 400}


def _image_call(data: bytes, question: str = "what is this") -> dict[str, Any]:
    url = "data:image/png;base64," + base64.b64encode(data).decode()
    content = [{"type": "text", "text": question}, {"type": "image_url", "image_url": {"url": url}}]
    return {"model": "m", "messages": [{"role": "user", "content": content}]}


def test_an_image_call_keeps_the_backends_cached_prefixes() -> None:
    router = Router(INVENTORY)
    dispatcher = Dispatcher(INVENTORY, router)
    state = router.states["b"]
    text = dispatcher.route_request({"model": "m", "messages": [SYSTEM, {"role": "user", "content": "hi"}]})
    state.dispatched("t", text.prefix_hashes, text.prompt_tokens, 10, 0, 0.01)
    state.finished("t")
    before = state.cached_tokens(text.prefix_hashes, text.prompt_tokens)
    assert before > 2_000

    image = dispatcher.route_request(_image_call(b"\x89PNG" + bytes(range(256)) * 8_192))  # 2 MiB
    assert len(image.prefix_hashes) <= image.prompt_tokens // router.block_tokens + 1
    state.dispatched("i", image.prefix_hashes, image.prompt_tokens, 10, 0, 0.01)
    state.finished("i")
    assert state.cached_tokens(text.prefix_hashes, text.prompt_tokens) == before


def test_a_media_part_spans_its_estimated_tokens_and_matches_only_itself() -> None:
    block = 16
    one = _image_call(b"one" * 3_000)["messages"]  # 12,000 base64 characters: past IMAGE_TOKENS'
    again = _image_call(b"one" * 3_000, "and this?")["messages"]
    other = _image_call(b"two" * 3_000)["messages"]
    hashes = prompt_block_hashes(one, block)
    assert abs(len(hashes) - estimate_prompt_tokens(one) // block) <= 1
    # The question comes first and differs, so compare with the image first.
    first = [[{"role": "user", "content": m[0]["content"][::-1]}] for m in (one, again, other)]
    a, b, c = (prompt_block_hashes(m, block) for m in first)
    shared = len(a) - 1  # all but the block holding the end of the content list
    assert a[:shared] == b[:shared]
    assert a[0] != c[0]
