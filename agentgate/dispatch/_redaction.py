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
    its input, cut), replaced by ``[redacted]``."""
    if key:
        text = _redact(_redact(text, key, anywhere=False), key, anywhere=True)
    for prompt in prompts:
        text = _redact(text, prompt, anywhere=False)
    return text


def _redact(text: str, secret: str, *, anywhere: bool) -> str:
    """``text`` with each run of characters that stands in ``secret``, ``2 * _FRAGMENT`` or more
    long (``anywhere``: a key, short), or that starts it, ``_FRAGMENT`` or more long (a key, or a
    prompt's message of any length: found with ``str.find``, so a long conversation costs
    little), as ``[redacted]``."""
    text = text.replace(secret, "[redacted]")
    size = min(2 * _FRAGMENT if anywhere else _FRAGMENT, len(secret))
    heads = {secret[k : k + size] for k in range(len(secret) - size + 1)} if anywhere else set()
    head = secret[:size]
    parts: list[str] = []
    start = i = 0
    while True:
        if anywhere:
            while i + size <= len(text) and text[i : i + size] not in heads:
                i += 1
            if i + size > len(text):
                break
        elif (i := text.find(head, i)) < 0:
            break
        end = i + size
        while end < len(text) and (
            text[i : end + 1] in secret if anywhere else secret.startswith(text[i : end + 1])
        ):
            end += 1
        parts += [text[start:i], "[redacted]"]
        start = i = end
    return "".join(parts) + text[start:]


def _prompt_texts(payload: Mapping[str, Any]) -> list[str]:
    """The texts of the request's messages that ``_scrub`` redacts: each ``_FRAGMENT`` characters
    or longer, as sent and as JSON writes it (an echo inside a JSON body keeps its escapes)."""
    messages = payload.get("messages")
    found: list[str] = []
    for message in messages if isinstance(messages, list) else ():
        content = message.get("content") if isinstance(message, Mapping) else None
        parts = content if isinstance(content, list) else [content]
        for part in parts:
            text = part.get("text") if isinstance(part, Mapping) else part
            if isinstance(text, str) and len(text) >= _FRAGMENT:
                found.append(text)
                escaped = json.dumps(text, ensure_ascii=False)[1:-1]
                if escaped != text:
                    found.append(escaped)
    return found
