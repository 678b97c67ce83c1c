"""Review R89 (complexity): redacting the prompt from a backend's words costs the length of the
body plus the length of those words, never their product.

``_prompt_texts`` gave one text for every message (N messages ``aaaaaaaa``, N texts alike), and
``_scrub`` looked for each text on its own, keeping one span for each place its first 8
characters stood: a body of 2,000 short messages and a 400 echoing 1,024 ``a`` of another field
(FastAPI's validation errors quote the ``input``) cost 2 million spans and 2 s of the gateway's
event loop. Now each text is kept once, and each place in the words is measured once against all
of them. What is redacted is unchanged: the property below holds it to a plain reading of the
rule (docs/dispatch.md, "What is redacted").
"""

from __future__ import annotations

import json
from typing import Any, ClassVar, SupportsIndex

from hypothesis import given
from hypothesis import strategies as st

from agentgate.dispatch._redaction import _FRAGMENT, _prompt_texts, _scrub


class _CountedText(str):
    """A backend's words that count how often they are read: each method looked up on them and
    each piece cut from them (what a search or a comparison of them starts with)."""

    reads: ClassVar[int] = 0

    def __getattribute__(self, name: str) -> Any:
        _CountedText.reads += 1
        return super().__getattribute__(name)

    def __getitem__(self, index: SupportsIndex | slice) -> str:
        _CountedText.reads += 1
        return str.__getitem__(self, index)


def _reads(said: str, prompts: list[str]) -> tuple[int, str]:
    """How often ``_scrub`` reads ``said`` to redact ``prompts`` from it, and what it gives."""
    _CountedText.reads = 0
    scrubbed = _scrub(_CountedText(said), None, prompts)
    return _CountedText.reads, scrubbed


def _messages(texts: list[str]) -> dict[str, Any]:
    return {"model": "m", "messages": [{"role": "user", "content": text} for text in texts]}


def test_messages_alike_are_one_prompt_text() -> None:
    assert _prompt_texts(_messages(["a" * _FRAGMENT] * 5_000)) == ["a" * _FRAGMENT]
    said, other = 'say "hi" to é', 'é ot "ih" yas'
    texts = _prompt_texts(_messages([said, other, said] * 1_000))
    assert texts == [
        *(said, json.dumps(said, ensure_ascii=False)[1:-1], json.dumps(said)[1:-1]),
        *(other, json.dumps(other, ensure_ascii=False)[1:-1], json.dumps(other)[1:-1]),
    ]


def test_a_text_that_is_another_texts_escape_keeps_its_own_escapes() -> None:
    """A message that reads as another's JSON escape is a text of its own, escaped in turn."""
    texts = _prompt_texts(_messages(['say "hi" now', 'say \\"hi\\" now']))
    assert 'say \\\\\\"hi\\\\\\" now' in texts


def test_the_words_are_read_as_often_whatever_the_number_of_messages() -> None:
    """Messages that all start alike: each place of the echo is measured once against all of
    them, not once for each (until R89, 200 messages read 256 characters about 130,000 times)."""
    said = "Input should be a valid number: " + "a" * 224
    few, scrubbed = _reads(said, [f"aaaaaaaa{k:05d}" for k in range(3)])
    many, scrubbed_many = _reads(said, [f"aaaaaaaa{k:05d}" for k in range(200)])
    assert scrubbed == scrubbed_many == "Input should be a valid number: [redacted]"
    assert many == few <= 4 * len(said), (few, many)


def test_a_long_echo_of_many_messages_is_one_marker() -> None:
    """2,000 messages alike and an echo of 1,024 characters: the whole echo, one marker."""
    prompts = _prompt_texts(_messages(["a" * _FRAGMENT] * 2_000))
    reads, scrubbed = _reads('{"input": "' + "a" * 1_024 + '"}', prompts)
    assert scrubbed == '{"input": "[redacted]"}'
    assert reads <= 4 * 1_040, reads


def _redacted(text: str, key: str | None, prompts: list[str]) -> str:
    """The rule read plainly: each run of ``text`` covered by a start of ``key`` or of a prompt,
    ``_FRAGMENT`` characters or longer, or by a piece of ``key`` twice that long, as one marker."""
    covered = [False] * len(text)
    starts = [p for p in [*prompts, key or ""] if len(p) >= _FRAGMENT]
    for i in range(len(text)):
        for secret in starts:
            alike = 0
            while i + alike < len(text) and alike < len(secret) and text[i + alike] == secret[alike]:
                alike += 1
            if alike >= _FRAGMENT:
                covered[i : i + alike] = [True] * alike
        size = min(2 * _FRAGMENT, len(key or ""))
        if key and len(key) >= _FRAGMENT and i + size <= len(text) and text[i : i + size] in key:
            covered[i : i + size] = [True] * size
    out, i = "", 0
    while i < len(text):
        if covered[i]:
            while i < len(text) and covered[i]:
                i += 1
            out += "[redacted]"
        else:
            out += text[i]
            i += 1
    return out


_ALPHABET = 'ab"\\'  # few letters, so that starts and pieces meet often; JSON's escapes too


@given(
    text=st.text(alphabet=_ALPHABET, max_size=60),
    prompts=st.lists(st.text(alphabet=_ALPHABET, min_size=1, max_size=24), max_size=6),
    key=st.none() | st.text(alphabet="ab", min_size=1, max_size=24),
)
def test_what_is_redacted_is_the_rule(text: str, prompts: list[str], key: str | None) -> None:
    assert _scrub(text, key, prompts) == _redacted(text, key, prompts)
    assert _scrub(text, key, _prompt_texts(_messages(prompts))) == _redacted(
        text, key, _prompt_texts(_messages(prompts))
    )
