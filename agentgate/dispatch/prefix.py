"""Prompt text to token estimates and chained block hashes, shared by the router and the simulator.

agentgate does not ship a tokenizer per model: a token is estimated as four characters of the
canonical prompt text (the usual rule of thumb for English BPE vocabularies). A content part
that carries media is never counted by the characters of its base64 data (a recording of 1 MB
was some 330,000 tokens): an image is ``IMAGE_TOKENS`` whatever its size, audio is counted by
its duration (``audio_tokens``), a file (OpenAI's ``file`` part, a PDF) is ``FILE_TOKENS``
(``estimate_prompt_tokens``). Parts of any other type count by their characters. Block hashes are
chained (block ``i``'s hash covers every block before it), so equal hashes mean equal prefixes;
this is what vLLM's prefix cache keys on, at the router's chosen block size. A media part is
hashed as a digest of it spanning its estimated tokens, or its written length where shorter
(``prompt_block_hashes``), never as its base64 text.
"""

from __future__ import annotations

import binascii
import hashlib
import math
import struct
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from agentgate.errors import InputError

CHARS_PER_TOKEN = 4
"""Characters per estimated token."""
IMAGE_TOKENS = 1445
"""Tokens an image content part of a prompt is estimated at, whatever its size, encoding or
source: OpenAI's high-detail maximum (an image scaled to 768 x 2048: 8 tiles of 170 tokens plus
85). A base64 data URL is never counted by its characters (a photo of a few MB would reserve a
million tokens); an engine whose vision encoder takes more tokens an image (Qwen2-VL at its
largest) reports them in its usage, which is what is charged."""
AUDIO_TOKENS_PER_SECOND = 25
"""Tokens a second of audio in a prompt is estimated at: the most of the common audio encoders
(Qwen2-Audio and Qwen2.5-Omni: one token per 40 ms; Voxtral and Phi-4-multimodal take 12.5 a
second, OpenAI's audio models about 10). What the engine reports is what is charged."""
AUDIO_FLOOR_BYTES_PER_SECOND = 4_000
"""The bytes a second of audio is taken to hold when its length cannot be read from its header
(MP3, or anything but PCM WAV): 32 kbit/s, low for speech, so its duration is rather over- than
underestimated."""
FILE_TOKENS = 4_096
"""Tokens a ``file`` content part (OpenAI's, a PDF by data or id) is estimated at, whatever its
size: a few pages as OpenAI reads a PDF (each page's text and an image of it, 1,000 to 2,000
tokens a page). Its bytes say little of its pages (a scanned page weighs a hundred text pages),
and its base64 read as text reserved a token per three bytes; a longer document's tokens are in
the usage the backend reports, which is what is charged."""


PROMPT_TEMPLATE_TOKENS = 4096
"""The prompt tokens a chat template may add to a call's messages and tools (role markers, a
default system prompt, tool-use instructions), beyond one token a byte of its payload
(``prompt_tokens_most``)."""
MEDIA_PART_TOKENS_MOST = 65536
"""The prompt tokens a content part that is not text (an image, audio, a video, a file, each
perhaps by URL: its bytes are not in the payload) may become (``prompt_tokens_most``): a
high-resolution image is thousands of tokens, a video tens of thousands."""


def prompt_tokens_most(size: int, payload: Mapping[str, Any]) -> int:
    """The most prompt tokens a chat payload of ``size`` bytes (its ``messages`` checked: a list
    of objects) can become: one a byte (a tokenizer makes at most one token of each byte of text:
    byte-level BPE, or SentencePiece with byte fallback), plus ``PROMPT_TEMPLATE_TOKENS``, plus
    ``MEDIA_PART_TOKENS_MOST`` for each content part that is not text. A backend's report of more
    is not the call's prompt: its outcome is charged this (``Authorization.prompt_tokens``: the
    gateway's bound of a request body, the LangGraph middleware's of a dispatched call's
    payload), the report recorded."""
    media = sum(
        1
        for message in payload["messages"]
        if isinstance(content := message.get("content"), list)
        for part in content
        if not (isinstance(part, Mapping) and part.get("type") == "text")
    )
    return size + PROMPT_TEMPLATE_TOKENS + MEDIA_PART_TOKENS_MOST * media


def prompt_text(messages: Iterable[object]) -> str:
    """The canonical text of a chat prompt: ``role`` and ``content`` of each message, in order
    (a role that is not text as its ``str``, content that is not text as its ``repr``); an entry
    that is not an object is no message and adds nothing, but keeps its position (the gateway
    refuses such a body; ``Dispatcher.chat`` takes its caller's list as it is).

    Raises ``InputError`` naming the message (its position in ``messages``) and the field whose
    value cannot be written: lists or objects nested deeper than the interpreter's recursion
    allows, or an integer too long for Python to write (until review R84 the ``RecursionError``
    or ``ValueError`` left ``Dispatcher.chat`` as it was, for the content and then for the role;
    the gateway refuses such a body before, as nested more than 254 levels deep or not JSON)."""
    parts: list[str] = []
    for i, message in enumerate(messages):
        if not isinstance(message, Mapping):
            continue
        role = message.get("role", "")
        content = message.get("content", "")
        role_text = role if isinstance(role, str) else _written(role, str, i, "role")
        text = content if isinstance(content, str) else _written(content, repr, i, "content")
        parts.append(f"<{role_text}>\n{text}\n")
    return "".join(parts)


def _written(value: object, write: Callable[[object], str], position: int, field: str) -> str:
    """``write(value)``, message ``position``'s ``field``; ``InputError`` naming both where the
    value cannot be written. The value is written, not walked first: for a message of a few parts
    that is the whole cost, and it refuses only what no caller sends (a prompt's parts nest a few
    levels)."""
    try:
        return write(value)
    except RecursionError:
        raise InputError(f"message {position}'s {field} is nested too deeply") from None
    except ValueError:  # an integer past Python's 4,300 digits
        raise InputError(f"message {position}'s {field} holds an integer too long to write") from None


def estimate_prompt_tokens(messages: Iterable[object]) -> int:
    """Estimated prompt tokens of chat ``messages``: ``estimate_tokens`` of their ``prompt_text``
    with every media content part left out, plus each of those at ``media_part_tokens`` (an entry
    that is not an object kept in its place, for ``prompt_text`` to pass over)."""
    media = 0
    kept: list[object] = []
    for message in messages:
        if isinstance(message, Mapping) and isinstance(content := message.get("content"), list):
            parts, tokens = split_media(content)
            if len(parts) < len(content):
                media += tokens
                message = {**message, "content": parts}
        kept.append(message)
    return estimate_tokens(prompt_text(kept)) + media


def split_media(
    content: Iterable[object], tokens_of: Callable[[Mapping[str, object]], int | None] | None = None
) -> tuple[list[object], int]:
    """The parts of a message's ``content`` that carry no media, and the tokens of those that do,
    each at ``tokens_of(part)`` (``media_part_tokens`` unless given; ``None`` for a part that is
    counted by its characters)."""
    count = media_part_tokens if tokens_of is None else tokens_of
    kept: list[object] = []
    media = 0
    for part in content:
        tokens = count(part) if isinstance(part, Mapping) else None
        if tokens is None:
            kept.append(part)
        else:
            media += tokens
    return kept, media


def media_part_tokens(part: Mapping[str, object]) -> int | None:
    """The tokens of a content part that carries media, never counted by its characters: an
    image (``image_url``) ``IMAGE_TOKENS``; audio (OpenAI's ``input_audio`` with its base64
    ``data``, vLLM's ``audio_url`` with a base64 ``data:`` URL) ``audio_tokens`` of its data; a
    ``file`` ``FILE_TOKENS``. ``None`` for any other part (text, an audio URL to fetch, a type
    not known here, one whose data is not a string), which counts by its characters."""
    kind = part.get("type")
    if kind == "image_url":
        return IMAGE_TOKENS
    if kind == "file":
        return FILE_TOKENS
    if kind == "input_audio":
        audio = part.get("input_audio")
        data = audio.get("data") if isinstance(audio, Mapping) else None
        return audio_tokens(data) if isinstance(data, str) else None
    if kind == "audio_url":
        audio = part.get("audio_url")
        url = audio.get("url") if isinstance(audio, Mapping) else None
        if isinstance(url, str) and url[:5].lower() == "data:":
            media_type, comma, data = url.partition(",")
            if comma and media_type.lower().endswith(";base64"):
                return audio_tokens(data)
    return None


def audio_tokens(data: str) -> int:
    """Estimated tokens of base64 audio ``data``: its duration times ``AUDIO_TOKENS_PER_SECOND``,
    at least one. The duration is its decoded size over the byte rate its header states when it
    is a PCM WAV file (RIFF ``WAVE`` with a ``fmt `` chunk of PCM or float samples: channels x
    sample rate x bytes a sample), else over ``AUDIO_FLOOR_BYTES_PER_SECOND``. Only the first
    few KiB are decoded (the header); malformed base64 is read as audio of no known format."""
    size = len(data) * 3 // 4
    rate = _wav_bytes_per_second(data) or AUDIO_FLOOR_BYTES_PER_SECOND
    return max(1, math.ceil(size / rate * AUDIO_TOKENS_PER_SECOND))


_WAV_HEAD_CHARS = 5_460
"""The base64 characters decoded to find a WAV file's ``fmt `` chunk: 4,095 bytes, past the
chunks some writers put before it (``JUNK``, ``LIST``)."""
_PCM_FORMATS = frozenset({1, 3, 0xFFFE})
"""WAV format tags whose byte rate follows from the samples: PCM, IEEE float, extensible."""


def _wav_bytes_per_second(data: str) -> int | None:
    """The bytes a second of PCM WAV audio ``data`` (base64) holds, from its ``fmt `` chunk;
    ``None`` when it is not PCM WAV, or its header cannot be read."""
    head = "".join(data[: _WAV_HEAD_CHARS + 256].split())[:_WAV_HEAD_CHARS]
    try:
        raw = binascii.a2b_base64(head[: len(head) - len(head) % 4])
    except (binascii.Error, ValueError):
        return None
    if raw[:4] != b"RIFF" or raw[8:12] != b"WAVE":
        return None
    at = 12
    while at + 8 <= len(raw):
        chunk, size = raw[at : at + 4], int.from_bytes(raw[at + 4 : at + 8], "little")
        if chunk == b"fmt ":
            if size < 16 or at + 24 > len(raw):
                return None
            fields: tuple[int, ...] = struct.unpack_from("<HHIIHH", raw, at + 8)
            tag, channels, rate, _, _, bits = fields
            if tag not in _PCM_FORMATS or not (channels and rate and bits):
                return None
            return channels * rate * -(-bits // 8)
        at += 8 + size + (size & 1)
    return None


def prompt_block_hashes(messages: Iterable[object], block_tokens: int) -> tuple[int, ...]:
    """``block_hashes`` of chat ``messages``: their ``prompt_text`` with each media content part
    (``media_part_tokens``) standing as text of its estimated tokens (``CHARS_PER_TOKEN`` a
    token), or of its written length where shorter (below), that opens with a digest of the
    part, so that a repeated image matches and another one does not, and the blocks number at
    most about ``estimate_prompt_tokens``'s. Until review R94 the
    router hashed a part's base64 as text: one 6 MiB image, estimated at 1,458 tokens, was 131,073
    blocks, which filled the backend's prefix index and pushed every other prompt out of it.

    A part spans no more characters than it is written with (its ``repr``, as ``prompt_text``
    writes it), so the text hashed, and the blocks, stay bounded by the prompt's size as plain
    text is: its estimate is the client's to state (a bare ``{"type": "image_url"}`` is
    ``IMAGE_TOKENS``, a WAV header may claim a byte a second), and until review R94 a 460 KB
    body of bare image parts was 1.8 million blocks. A part by URL, or a small one, therefore
    spans fewer blocks than its estimate; an image as a data URL of more than about 6 KB spans all.

    Raises ``InputError`` as ``prompt_text`` does, a media part that cannot be written named as
    its message's content."""
    kept: list[object] = []
    for position, message in enumerate(messages):
        if isinstance(message, Mapping) and isinstance(content := message.get("content"), list):
            message = {**message, "content": [_media_stand_in(part, position) for part in content]}
        kept.append(message)
    return block_hashes(prompt_text(kept), block_tokens)


def _media_stand_in(part: object, position: int) -> object:
    """``part`` itself unless it carries media; else text of its tokens' characters, or of its
    own where fewer, opening with a digest of the part as written (cut to that length: a part
    written in fewer characters than the digest's) (message ``position``'s content, for
    ``_written``)."""
    tokens = media_part_tokens(part) if isinstance(part, Mapping) else None
    if tokens is None:
        return part
    written = _written(part, repr, position, "content")
    digest = hashlib.blake2b(written.encode("utf-8", "surrogatepass"), digest_size=16).hexdigest()
    width = min(tokens * CHARS_PER_TOKEN, len(written))
    return f"<media {digest}>".ljust(width, ".")[:width]


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
