"""The prompt's canonical text and block hashes (agentgate/dispatch/prefix.py): the role is part
of the text, only full blocks are hashed, and each block's hash is chained to the blocks before
it; token estimates round up.
"""

from __future__ import annotations

import base64
import io
import math
import wave

import pytest

from agentgate.dispatch.prefix import (
    AUDIO_FLOOR_BYTES_PER_SECOND,
    AUDIO_TOKENS_PER_SECOND,
    FILE_TOKENS,
    IMAGE_TOKENS,
    audio_tokens,
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


def _wav(seconds: float, rate: int = 16_000, channels: int = 1, width: int = 2) -> bytes:
    """A PCM WAV file of ``seconds`` of silence, as the standard library writes it."""
    out = io.BytesIO()
    with wave.open(out, "wb") as writer:
        writer.setnchannels(channels)
        writer.setsampwidth(width)
        writer.setframerate(rate)
        writer.writeframes(b"\0" * int(seconds * rate) * channels * width)
    return out.getvalue()


def _audio(data: bytes, fmt: str = "wav") -> dict[str, object]:
    return {"type": "input_audio", "input_audio": {"data": base64.b64encode(data).decode(), "format": fmt}}


def _with(*parts: object) -> list[dict[str, object]]:
    return [{"role": "user", "content": [{"type": "text", "text": "Transcribe this."}, *parts]}]


BASE = estimate_prompt_tokens(_with())


@pytest.mark.parametrize(("rate", "channels", "width"), [(16_000, 1, 2), (44_100, 2, 2), (48_000, 1, 4)])
def test_a_wav_recording_is_estimated_by_its_duration_never_by_its_base64(
    rate: int, channels: int, width: int
) -> None:
    """Kills: an ``input_audio`` part counted by the characters of its base64 data: 30 s of 16 kHz
    speech (a WAV of 960 KB) reserved some 320,000 prompt tokens, where an audio model takes some
    750 (and a budget that pays for the call many times over refused it).

    Rule: a PCM WAV recording is its duration (decoded size over the byte rate its header states)
    at ``AUDIO_TOKENS_PER_SECOND``, rounded up: the same seconds are the same tokens whatever
    the rate, channels or sample width."""
    data = _wav(30.0, rate, channels, width)
    estimate = estimate_prompt_tokens(_with(_audio(data)))
    assert estimate - BASE == math.ceil(len(data) / (rate * channels * width) * AUDIO_TOKENS_PER_SECOND)
    assert 30 * AUDIO_TOKENS_PER_SECOND <= estimate - BASE <= 30 * AUDIO_TOKENS_PER_SECOND + 1
    assert audio_tokens(base64.b64encode(data).decode()) == estimate - BASE


def test_audio_of_no_readable_header_is_estimated_at_the_floor_byte_rate() -> None:
    """Rule: audio whose length its header does not give (MP3, a WAV of compressed samples or a
    broken header, bytes that are no audio at all) is its decoded size at
    ``AUDIO_FLOOR_BYTES_PER_SECOND``, never by its characters; a part whose data is not a string
    counts by its characters, as any part the estimate does not know; nothing raises."""
    mp3 = b"ID3\x04" + bytes(range(256)) * 1_000  # 256 KB
    expected = math.ceil(len(mp3) / AUDIO_FLOOR_BYTES_PER_SECOND * AUDIO_TOKENS_PER_SECOND)
    assert estimate_prompt_tokens(_with(_audio(mp3, "mp3"))) - BASE == expected
    adpcm = bytearray(_wav(1.0))
    adpcm[20:22] = (2).to_bytes(2, "little")  # format tag 2: MS ADPCM, its byte rate not the samples'
    broken = _wav(1.0)[:30]  # the fmt chunk cut short
    for data in (bytes(adpcm), broken, b"RIFF"):
        floor = max(1, math.ceil(len(data) / AUDIO_FLOOR_BYTES_PER_SECOND * AUDIO_TOKENS_PER_SECOND))
        assert estimate_prompt_tokens(_with(_audio(data))) - BASE == floor
    odd = {"type": "input_audio", "input_audio": {"data": 12345}}
    assert estimate_prompt_tokens(_with(odd)) == estimate_tokens(prompt_text(_with(odd)))


def test_an_audio_data_url_counts_as_its_audio_and_a_file_at_its_fixed_count() -> None:
    """Kills: vLLM's ``audio_url`` with a base64 ``data:`` URL, and OpenAI's ``file`` part (a PDF
    by its base64 ``file_data``), counted by their characters.

    Rule: an ``audio_url`` data URL is ``audio_tokens`` of its data; a remote audio URL counts by
    its characters (a short text); a ``file`` part is ``FILE_TOKENS`` whatever its size; a part
    of a type the estimate does not know (vLLM's ``video_url``) counts by its characters."""
    data = _wav(10.0)
    url = {
        "type": "audio_url",
        "audio_url": {"url": "data:audio/wav;base64," + base64.b64encode(data).decode()},
    }
    assert estimate_prompt_tokens(_with(url)) - BASE == estimate_prompt_tokens(_with(_audio(data))) - BASE
    remote = {"type": "audio_url", "audio_url": {"url": "https://example.com/a.wav"}}
    assert estimate_prompt_tokens(_with(remote)) == estimate_tokens(prompt_text(_with(remote)))
    pdf = "data:application/pdf;base64," + base64.b64encode(b"%PDF-1.7" + b"x" * 3_000_000).decode()
    small = {"type": "file", "file": {"file_id": "file-abc"}}
    large = {"type": "file", "file": {"filename": "report.pdf", "file_data": pdf}}
    assert estimate_prompt_tokens(_with(small)) == estimate_prompt_tokens(_with(large)) == BASE + FILE_TOKENS
    video = {"type": "video_url", "video_url": {"url": "https://example.com/v.mp4"}}
    assert estimate_prompt_tokens(_with(video)) == estimate_tokens(prompt_text(_with(video)))
