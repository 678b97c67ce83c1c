"""Prompt text to token estimates and chained block hashes, shared by the router and the simulator.

agentgate does not ship a tokenizer per model: a token is estimated as four characters of the
canonical prompt text (the usual rule of thumb for English BPE vocabularies), and an image as
``IMAGE_TOKENS`` whatever its size (``estimate_prompt_tokens``). Block hashes are
chained (block ``i``'s hash covers every block before it), so equal hashes mean equal prefixes;
this is what vLLM's prefix cache keys on, at the router's chosen block size.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping

CHARS_PER_TOKEN = 4
"""Characters per estimated token."""
IMAGE_TOKENS = 1445
"""Tokens an image content part of a prompt is estimated at, whatever its size, encoding or
source: OpenAI's high-detail maximum (an image scaled to 768 x 2048: 8 tiles of 170 tokens plus
85). A base64 data URL is never counted by its characters (a photo of a few MB would reserve a
million tokens); an engine whose vision encoder takes more tokens an image (Qwen2-VL at its
largest) reports them in its usage, which is what is charged."""


def prompt_text(messages: Iterable[Mapping[str, object]]) -> str:
    """The canonical text of a chat prompt: ``role`` and ``content`` of each message, in order."""
    parts: list[str] = []
    for message in messages:
        content = message.get("content", "")
        text = content if isinstance(content, str) else repr(content)
        parts.append(f"<{message.get('role', '')}>\n{text}\n")
    return "".join(parts)


def estimate_prompt_tokens(messages: Iterable[Mapping[str, object]]) -> int:
    """Estimated prompt tokens of chat ``messages``: ``estimate_tokens`` of their ``prompt_text``
    with every image content part (``{"type": "image_url", ...}``) left out, plus
    ``IMAGE_TOKENS`` for each of those."""
    images = 0
    kept: list[Mapping[str, object]] = []
    for message in messages:
        content = message.get("content")
        if isinstance(content, list):
            parts = [p for p in content if not (isinstance(p, Mapping) and p.get("type") == "image_url")]
            if len(parts) < len(content):
                images += len(content) - len(parts)
                message = {**message, "content": parts}
        kept.append(message)
    return estimate_tokens(prompt_text(kept)) + images * IMAGE_TOKENS


def estimate_tokens(text: str) -> int:
    """Estimated token count of ``text`` (at least one)."""
    return max(1, -(-len(text) // CHARS_PER_TOKEN))


def block_hashes(text: str, block_tokens: int) -> tuple[int, ...]:
    """Chained 63-bit hashes of the full ``block_tokens``-token blocks of ``text``.

    A block is ``block_tokens`` x ``CHARS_PER_TOKEN`` characters, the unit ``estimate_tokens``
    counts (not as many bytes: outside ASCII that is fewer characters, and two Chinese prompts
    sharing a third of their text looked all but fully shared). The router and the simulated
    backend cut prompts alike with it.
    """
    width = block_tokens * CHARS_PER_TOKEN
    out: list[int] = []
    prev = b""
    for start in range(0, len(text) - width + 1, width):
        block = text[start : start + width].encode("utf-8", "surrogatepass")
        prev = hashlib.blake2b(prev + block, digest_size=8).digest()
        out.append(int.from_bytes(prev, "big") >> 1)
    return tuple(out)
