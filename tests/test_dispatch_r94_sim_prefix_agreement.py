"""Review R94: docs/simulation.md said the simulator's prompt hashes are the leading ones of the
router's, which stopped holding for media once the router hashed a part as a digest
(``prompt_block_hashes``). The docs now say where they agree: a text prompt hashes alike, and a
system prompt shared by a text call and an image call matches on both sides."""

from __future__ import annotations

import base64

from agentgate.dispatch.prefix import estimate_prompt_tokens, prompt_block_hashes, prompt_text
from agentgate.sim._server import _prompt_hashes

SYSTEM = {"role": "system", "content": "You are a helpful assistant. " * 40}
IMAGE = "data:image/png;base64," + base64.b64encode(b"\x89PNG" + bytes(range(256)) * 40).decode()


def _sim(messages: list[dict[str, object]]) -> tuple[int, ...]:
    return _prompt_hashes(prompt_text(messages), estimate_prompt_tokens(messages), 16)


def _shared(a: tuple[int, ...], b: tuple[int, ...]) -> int:
    return next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))


def test_text_prompts_hash_alike_and_a_shared_system_prompt_matches_on_both_sides() -> None:
    text = [SYSTEM, {"role": "user", "content": "What is this?"}]
    media = [SYSTEM, {"role": "user", "content": [{"type": "image_url", "image_url": {"url": IMAGE}}]}]
    assert _sim(text) == prompt_block_hashes(text, 16)
    router = _shared(prompt_block_hashes(text, 16), prompt_block_hashes(media, 16))
    assert router == _shared(_sim(text), _sim(media)) > 0
