"""Redaction of what a backend's words must not carry out of the client: its API key, whole or a
piece of it, and the start of a prompt's message it echoed (``_scrub``)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

_FRAGMENT = 8
"""The shortest piece of a key, or start of a prompt's message, that ``_scrub`` redacts."""


def _scrub(text: str, key: str | None, prompts: Sequence[str] = ()) -> str:
    """``text`` with ``key``, every start of it ``_FRAGMENT`` or more characters long (what a quote
    cut mid-key, or a masked key, shows) and every other piece of it twice that long (a quote that
    cut the key's start: a shorter piece may be a word of ours, ``credentials``, that a key holds),
    and each of ``prompts`` with every start of it ``_FRAGMENT`` long or more (a backend's echo of
    its input, cut), replaced by ``[redacted]``: each run of ``text`` that any of these cover, as
    one marker.

    A key or prompt shorter than ``_FRAGMENT`` is left where it stands: a key that short is no
    secret (``ollama``, ``EMPTY``, ``1``: the words an endpoint's own message holds), and redacting
    it garbled that message (``Error code: 40[redacted]``). The runs are found in ``text`` as it
    came, never in what redaction wrote: until review R87b a second pass rescanned the markers
    the first had written (``Inv[red[red[redacted]cted]cted]lid API key`` for the key ``a``)."""
    spans: list[tuple[int, int]] = []
    if key and len(key) >= _FRAGMENT:
        spans += _starts(text, key)
        spans += _pieces(text, key, 2 * _FRAGMENT)
    for prompt in prompts:
        if len(prompt) >= _FRAGMENT:
            spans += _starts(text, prompt)
    if not spans:
        return text
    parts: list[str] = []
    done = 0
    for start, end in sorted(spans):
        if end <= done:
            continue
        if start > done or not parts:
            parts += [text[done:start], "[redacted]"]
        done = end
    return "".join(parts) + text[done:]


def _starts(text: str, secret: str) -> list[tuple[int, int]]:
    """Where in ``text`` a start of ``secret``, ``_FRAGMENT`` characters or longer, stands, as
    ``(start, end)`` spans, each as long as ``text`` goes on as ``secret`` does: found with
    ``str.find`` and measured by halving, so a long conversation's message costs little."""
    head = secret[:_FRAGMENT]
    spans = []
    i = text.find(head)
    while i >= 0:
        low, high = _FRAGMENT, min(len(secret), len(text) - i)  # text goes on as secret[:low] does
        while low < high:
            middle = (low + high + 1) // 2
            if text.startswith(secret[low:middle], i + low):
                low = middle
            else:
                high = middle - 1
        spans.append((i, i + low))
        i = text.find(head, i + 1)
    return spans


def _pieces(text: str, secret: str, size: int) -> list[tuple[int, int]]:
    """Where in ``text`` a piece of ``secret``, ``size`` characters or longer (all of it, where
    it is shorter), stands, as ``(start, end)`` spans: one for each ``size`` characters of ``text``
    that stand in ``secret``, whose union is every longer piece too."""
    size = min(size, len(secret))
    pieces = {secret[k : k + size] for k in range(len(secret) - size + 1)}
    return [(i, i + size) for i in range(len(text) - size + 1) if text[i : i + size] in pieces]


def _prompt_texts(payload: Mapping[str, Any]) -> list[str]:
    """The texts of the request's messages that ``_scrub`` redacts: each ``_FRAGMENT`` characters
    or longer, as sent and as JSON writes it (an echo inside a JSON body keeps its escapes), with
    characters past ASCII as they are (FastAPI's, vLLM's) and escaped (Python's ``json`` by
    default, Flask's)."""
    messages = payload.get("messages")
    found: list[str] = []
    for message in messages if isinstance(messages, list) else ():
        content = message.get("content") if isinstance(message, Mapping) else None
        parts = content if isinstance(content, list) else [content]
        for part in parts:
            text = part.get("text") if isinstance(part, Mapping) else part
            if isinstance(text, str) and len(text) >= _FRAGMENT:
                found += dict.fromkeys(
                    (text, json.dumps(text, ensure_ascii=False)[1:-1], json.dumps(text)[1:-1])
                )
    return found
