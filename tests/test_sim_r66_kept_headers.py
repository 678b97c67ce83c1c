"""Review R66 of what ``SimServer`` keeps of each request's headers.

``trace_headers`` keeps the trace context headers of the latest 1,024 chat requests and
``authorizations`` counts the first 1,024 distinct ``Authorization`` headers (review R53 bounded
how many), but each value was kept whole: a head may be 4 MiB (``MAX_HEAD_BYTES``), so a client
sending 1,024 requests, each with a 4 MiB ``tracestate`` or its own 4 MiB ``Authorization``, held
some 4 GiB in each. Each value is now kept up to ``KEPT_HEADER_CHARS`` (8,192: W3C Baggage's
limit, the longest of the trace headers; far above any API key), a longer one cut and marked
with its length.
"""

from __future__ import annotations

from collections.abc import Iterator

import _http
import pytest

from agentgate.sim import SimServer
from agentgate.sim._server import KEPT_HEADER_CHARS

_BODY = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 1}
_LONG = 1024 * 1024


@pytest.fixture(scope="module")
def server() -> Iterator[SimServer]:
    with SimServer(time_scale=1e-3) as sim:
        yield sim


def test_an_oversized_trace_header_is_kept_cut_and_marked(server: SimServer) -> None:
    """Review R66: a 1 MiB ``tracestate`` was kept whole in ``trace_headers``."""
    answer = _http.post(
        f"{server.url}/v1/chat/completions", json=_BODY, headers={"tracestate": "a" * _LONG}, timeout=30
    )
    assert answer.status_code == 200
    kept = server.trace_headers[-1]["tracestate"]
    assert kept == "a" * KEPT_HEADER_CHARS + f"...({_LONG} characters)"


def test_an_oversized_authorization_is_counted_cut_and_marked(server: SimServer) -> None:
    """Review R66: a 1 MiB ``Authorization`` was a key of ``authorizations`` whole."""
    _http.get(f"{server.url}/v1/models", headers={"authorization": "b" * _LONG}, timeout=30)
    cut = "b" * KEPT_HEADER_CHARS + f"...({_LONG} characters)"
    assert server.authorizations[("/v1/models", cut)] == 1
    assert max(len(value or "") for _, value in server.authorizations) < KEPT_HEADER_CHARS + 40


def test_real_headers_are_kept_exactly(server: SimServer) -> None:
    """Review R66 (checked, right already): a W3C traceparent, a baggage of 8,192 characters and a
    bearer key are kept as sent."""
    traceparent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    baggage = "k=" + "v" * (KEPT_HEADER_CHARS - 2)
    headers = {"traceparent": traceparent, "baggage": baggage, "authorization": "Bearer sk-123"}
    assert (
        _http.post(f"{server.url}/v1/chat/completions", json=_BODY, headers=headers, timeout=30).status_code
        == 200
    )
    assert server.trace_headers[-1] == {"traceparent": traceparent, "baggage": baggage}
    assert server.authorizations[("/v1/chat/completions", "Bearer sk-123")] == 1
