"""Regression review of R90 (found beside the pool's twin): a refused ``Content-Encoding`` whose
bytes are not UTF-8 is scrubbed of the prompt over aiohttp as over httpx and the gateway's pool.

aiohttp reads a header as UTF-8, each byte that is not kept as a lone surrogate: an echo of the
prompt ``José SSN ...`` sent in Latin-1 reached ``_encoding_shown`` as ``Jos\\udce9 SSN ...``,
which is not the prompt's text, so it was redacted only up to ``é`` and the SSN quoted. httpx and
the pool read such a header as Latin-1; so does ``_encoding_shown`` now, before the scrub.
"""

from __future__ import annotations

import pytest
from test_dispatch_r90b_pool_encoding import CASES, SECRET, _refusal

PROMPT, HEADER = CASES["latin-1-byte"]


@pytest.mark.parametrize("stream", [False, True], ids=["chat", "stream"])
@pytest.mark.parametrize("status", [b"200 OK", b"500 Internal Server Error"], ids=["refused", "error-answer"])
async def test_a_latin_1_echo_in_a_content_encoding_is_redacted_over_aiohttp(
    status: bytes, stream: bool
) -> None:
    message = await _refusal("aiohttp", PROMPT, HEADER, stream, status)
    assert "Content-Encoding: x, [redacted]" in message, message
    assert SECRET[:5] not in message and "4111" not in message, message
    assert message == await _refusal("httpx", PROMPT, HEADER, stream, status)
