"""The prompt's canonical text and block hashes (agentgate/dispatch/prefix.py): the role is part
of the text, only full blocks are hashed, and each block's hash is chained to the blocks before
it; token estimates round up.
"""

from __future__ import annotations

from agentgate.dispatch.prefix import block_hashes, estimate_tokens, prompt_text
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
