"""Regression review of R91: a transport failure's text (a parser's refusal quoting the line the
backend sent) quotes no piece of the API key at its cut.

R91 moved the key's scrub before the cut for a refused ``Content-Encoding`` and for an answer's
value quoted in a refusal, but ``_failure_text`` still scrubbed only the prompt before cutting the
text to its first ``_QUOTED`` characters: the key was scrubbed after, from the whole message
(``_shown``), where a start of it shorter than 8 characters standing at the cut, or a piece of it
shorter than 16, is too short to be found (only a start is looked for at a cut). A backend echoing the key in a header line the HTTP
parser refuses had it quoted, over httpx and aiohttp, in ``chat`` and ``stream``.
"""

from __future__ import annotations

import httpx
import pytest
from test_dispatch_r91b_inner_key_cut import KEY, _pieces

from agentgate.dispatch.backends import _QUOTED, _failure_text

PAYLOAD = {"model": "m", "messages": [{"role": "user", "content": "hello there"}], "max_tokens": 8}


@pytest.mark.parametrize("before_cut", [3, 5, 7, 12, 15])
def test_a_parser_refusal_quotes_no_start_of_the_key_at_its_cut(before_cut: int) -> None:
    # The echo starts ``before_cut`` characters before the cut: only that much of it is kept.
    refusal = httpx.RemoteProtocolError("illegal header line: " + "x" * (_QUOTED - 21 - before_cut) + KEY)
    said = _failure_text(refusal, PAYLOAD, KEY)
    assert said.startswith("RemoteProtocolError: illegal header line: xxx"), said
    assert not _pieces(said), said


def test_the_key_is_scrubbed_where_the_text_is_whole() -> None:
    said = _failure_text(httpx.RemoteProtocolError(f"illegal header line: x{KEY}y"), PAYLOAD, KEY)
    assert not _pieces(said) and "[redacted]" in said, said
