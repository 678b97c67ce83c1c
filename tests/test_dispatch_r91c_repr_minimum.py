"""Regression review of R91b: an echo of the prompt in a parser's ``repr`` is redacted from 8 of
its characters, not 8 of their escapes, and the marker ends where a character does.

R91b looked for the prompt as ``repr`` writes its bytes (``\\xd0\\x9f`` for ``П``) and measured
the 8 characters a start of it must reach in the escapes: one letter past ASCII was enough (8
escape characters for a Cyrillic one, 12 for a CJK one), so a backend's own header line that
shared its first letter with the prompt was redacted there, and the marker cut an escape in two
(``X-Error: [redacted]1\\x80\\xd0\\xb5...``, a garbled ``\\xd1\\x80``). A run is now measured in
the characters written (an escape, with those of the bytes that go on its character, is one),
and ends where one does.
"""

from __future__ import annotations

import httpx
import pytest

from agentgate.dispatch.backends import _failure_text

OWN_LINES = {
    "one-cyrillic-letter": ("Пароль от банка 4111", "X-Error: Превышен лимит запросов"),
    "one-cjk-character": ("你好，请总结这份报告", "X-Error: 你的请求太多"),
    "three-letters": ("Привет, как дела у тебя?", "X-Status: Прием запросов закрыт"),
    "seven-letters": ("Пароль от банка 4111", "X-Status: Пароль устарел"),
}


def _refused(line: str) -> httpx.RemoteProtocolError:
    return httpx.RemoteProtocolError(f"illegal header line: {bytearray(line.encode())!r}")


def _said(prompt: str, line: str) -> str:
    payload = {"model": "m", "messages": [{"role": "user", "content": prompt}]}
    return _failure_text(_refused(line), payload)


@pytest.mark.parametrize(("prompt", "line"), OWN_LINES.values(), ids=OWN_LINES.keys())
def test_a_line_sharing_under_8_characters_with_the_prompt_is_quoted_whole(prompt: str, line: str) -> None:
    assert _said(prompt, line) == f"RemoteProtocolError: {_refused(line)}"


def test_an_echo_of_8_characters_past_ascii_is_redacted() -> None:
    said = _said("Пароль от банка 4111", "X-Status: Пароль о")
    assert said == "RemoteProtocolError: illegal header line: bytearray(b'X-Status: [redacted]')", said


@pytest.mark.parametrize(
    ("prompt", "line", "after"),
    [
        ("Пароль от банка: секрет", "x-echo Пароль от банка: сейф", "\\xd0\\xb9\\xd1\\x84"),
        ("你好，请总结这份报告吧", "x-echo 你好，请总结这份文件", "\\xe6\\x96\\x87\\xe4\\xbb\\xb6"),
    ],
    ids=["cyrillic", "cjk"],
)
def test_the_marker_ends_where_a_character_does(prompt: str, line: str, after: str) -> None:
    said = _said(prompt, line)
    assert said == f"RemoteProtocolError: illegal header line: bytearray(b'x-echo [redacted]{after}')", said
