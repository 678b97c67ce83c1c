"""Prompt text to token estimates and chained block hashes, shared by the router and the simulator.

agentgate does not ship a tokenizer per model: a token is estimated as four characters of the
canonical prompt text (the usual rule of thumb for English BPE vocabularies). Block hashes are
chained (block ``i``'s hash covers every block before it), so equal hashes mean equal prefixes;
this is what vLLM's prefix cache keys on, at the router's chosen block size.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping

CHARS_PER_TOKEN = 4
"""Characters per estimated token."""


def prompt_text(messages: Iterable[Mapping[str, object]]) -> str:
    """The canonical text of a chat prompt: ``role`` and ``content`` of each message, in order."""
    parts: list[str] = []
    for message in messages:
        content = message.get("content", "")
        text = content if isinstance(content, str) else repr(content)
        parts.append(f"<{message.get('role', '')}>\n{text}\n")
    return "".join(parts)


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
