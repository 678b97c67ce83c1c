"""The prompt's canonical text and block hashes (agentgate/dispatch/prefix.py): the role is part
of the text, only full blocks are hashed, and each block's hash is chained to the blocks before
it; token estimates round up.
"""

from __future__ import annotations

from agentgate.dispatch.prefix import (
    IMAGE_TOKENS,
    block_hashes,
    estimate_prompt_tokens,
    estimate_tokens,
    prompt_text,
)
from agentgate.dispatch.prefix_index import PrefixIndex


def test_block_hashes_are_chained_so_a_shared_middle_block_is_no_match() -> None:
    """Kills: ``block_hashes`` hashing each block alone (not chained to the blocks before it: two
    prompts that differ in their first block but share the second would match there). Rule: equal
    hashes mean equal prefixes."""
    a = block_hashes("A" * 64 + "B" * 64, 16)
    b = block_hashes("C" * 64 + "B" * 64, 16)
    assert len(a) == len(b) == 2
    assert a[1] != b[1]
    index = PrefixIndex(100)
    index.record(a)
    assert index.match(b) == 0


def test_only_full_blocks_are_hashed() -> None:
    """Kills: ``block_hashes`` hashing a partial trailing block. Rule: a block is ``block_tokens``
    x 4 characters; a tail shorter than that is no block (the engine caches full blocks only)."""
    assert len(block_hashes("x" * (64 * 3 - 1), 16)) == 2
    assert len(block_hashes("x" * 64 * 3, 16)) == 3


def test_the_role_is_part_of_the_prompt_text() -> None:
    """Kills: ``prompt_text`` leaving the role out (a system prompt and a user message of the
    same words would share a cache prefix they do not share on the engine). Rule: the canonical
    text carries each message's role."""
    assert prompt_text([{"role": "system", "content": "x"}]) != prompt_text(
        [{"role": "user", "content": "x"}]
    )


def test_token_estimates_round_up() -> None:
    """Kills: ``estimate_tokens`` rounding down (a 5-character prompt estimated at 1 token, an
    estimate that reserves too little). Rule: a partial token counts as a token."""
    assert estimate_tokens("abcde") == 2
    assert estimate_tokens("a" * 400 + "b") == 101


def test_an_image_part_is_estimated_at_a_fixed_count_whatever_its_size() -> None:
    """Kills: a prompt's estimate counting an image content part by its characters (the base64 of
    a photo: hundreds of thousands of tokens reserved, routed and checked against the context).

    Rule: each ``image_url`` part is ``IMAGE_TOKENS``, a small one and a large one alike, an http
    URL as a data URL; text parts and messages without images are estimated as before."""
    text = {"type": "text", "text": "What is in this photo?"}

    def image(url: str) -> dict[str, object]:
        return {"type": "image_url", "image_url": {"url": url}}

    def prompt(*parts: dict[str, object]) -> list[dict[str, object]]:
        return [{"role": "system", "content": "Be brief."}, {"role": "user", "content": list(parts)}]

    base = estimate_prompt_tokens(prompt(text))
    assert base == estimate_tokens(prompt_text(prompt(text)))  # no image: as before
    small = estimate_prompt_tokens(prompt(text, image("data:image/png;base64,AAAA")))
    large = estimate_prompt_tokens(prompt(text, image("data:image/png;base64," + "A" * 4_000_000)))
    linked = estimate_prompt_tokens(prompt(image("https://example.com/cat.png"), text))
    assert small == large == linked == base + IMAGE_TOKENS
    assert estimate_prompt_tokens(prompt(text, image("x"), image("y"))) == base + 2 * IMAGE_TOKENS
