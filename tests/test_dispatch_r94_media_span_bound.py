"""Review R94: ``prompt_block_hashes`` stood each media part in as text of its estimated tokens,
which the client states: a bare ``{"type": "image_url"}`` (21 characters) was 5,780, and a WAV
header claiming a byte a second made 266 KB of base64 five million tokens. A 460 KB body of bare
image parts was 1.8 million blocks, built on the event loop before the context check. A part now
spans no more characters than it is written with, so the blocks stay bounded by the prompt's
size as plain text is."""

from __future__ import annotations

import base64
import struct

from agentgate.dispatch.prefix import (
    CHARS_PER_TOKEN,
    estimate_prompt_tokens,
    prompt_block_hashes,
    prompt_text,
)

BLOCK = 16


def _bound(messages: list[dict[str, object]]) -> int:
    """The blocks of the prompt's text as written (as before media parts were stood in), plus
    the two quotes each stand-in is written with."""
    parts = sum(len(m["content"]) for m in messages if isinstance(m["content"], list))
    return (len(prompt_text(messages)) + 2 * parts) // (BLOCK * CHARS_PER_TOKEN) + 1


def test_bare_image_parts_make_no_more_blocks_than_their_text() -> None:
    messages: list[dict[str, object]] = [{"role": "user", "content": [{"type": "image_url"}] * 2_000}]
    assert estimate_prompt_tokens(messages) > 2_000_000
    assert len(prompt_block_hashes(messages, BLOCK)) <= _bound(messages)


def test_a_wav_header_claiming_a_byte_a_second_makes_no_more_blocks_than_its_data() -> None:
    fmt = struct.pack("<4sI", b"fmt ", 16) + struct.pack("<HHIIHH", 1, 1, 1, 1, 1, 8)
    data = base64.b64encode(b"RIFF\0\0\0\0WAVE" + fmt + b"\0" * 30_000).decode()
    part = {"type": "input_audio", "input_audio": {"data": data, "format": "wav"}}
    messages: list[dict[str, object]] = [{"role": "user", "content": [part]}]
    assert estimate_prompt_tokens(messages) > 500_000
    assert len(prompt_block_hashes(messages, BLOCK)) <= _bound(messages)


def _parts(part: dict[str, object], count: int) -> list[dict[str, object]]:
    return [{"role": "user", "content": [part] * count}]


def test_bare_image_parts_still_differ_from_other_media_and_match_themselves() -> None:
    images = prompt_block_hashes(_parts({"type": "image_url"}, 8), BLOCK)
    assert images  # a prompt of them makes full blocks to compare
    # One more image after them: its prompt opens with the same blocks.
    assert prompt_block_hashes(_parts({"type": "image_url"}, 9), BLOCK)[: len(images)] == images
    assert images[0] != prompt_block_hashes(_parts({"type": "file"}, 8), BLOCK)[0]
