"""A prompt past ASCII echoed in a parser's refusal (``repr`` of its bytes) is redacted where its
echo reaches a cut, however few characters of it stand before the cut: the scan's window end
(``_failure_text``'s 1,024 characters) or the quote's end (aiohttp quoting only one read)."""

from __future__ import annotations

import httpx

from agentgate.dispatch.backends import _failure_text

CJK = "你好，请总结这份报告：机密收购计划代号北极星"
CYRILLIC = "Пароль от банковского счёта: 7741 2290"


def _payload(prompt: str) -> dict[str, object]:
    return {"model": "m", "messages": [{"role": "user", "content": prompt}]}


def _written(text: str) -> str:
    return repr(text.encode())[2:-1]


def _refusal(line: bytes) -> httpx.RemoteProtocolError:
    return httpx.RemoteProtocolError(f"illegal header line: {bytearray(line)!r}")


def test_an_echo_begun_just_before_the_cut_is_redacted() -> None:
    for prompt in (CJK, CYRILLIC):
        for pad in range(880, 1010, 3):
            line = b"x-echo: " + b"a" * pad + prompt.encode()
            said = _failure_text(_refusal(line), _payload(prompt))
            assert _written(prompt[:1]) not in said, (prompt[:2], pad, said[-80:])


def test_an_echo_cut_by_the_quote_is_redacted() -> None:
    for k in (1, 2, 5, 7):
        refused = httpx.RemoteProtocolError(f"Invalid header token: {(b'x-echo ' + CJK[:k].encode())!r}")
        said = _failure_text(refused, _payload(CJK))
        assert _written(CJK[:1]) not in said
        assert said.endswith("b'x-echo [redacted]'")


def test_the_backends_own_line_sharing_a_first_letter_is_quoted() -> None:
    for prompt, line in [
        ("Пароль от банка 4111", "X-Error: Превышен лимит запросов"),
        ("你好，请总结这份报告", "X-Error: 你的请求太多"),
    ]:
        said = _failure_text(_refusal(line.encode()), _payload(prompt))
        assert "[redacted]" not in said
        assert _written(line) in said
