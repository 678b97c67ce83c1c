"""A stream that breaks after output is counted as an error answer (review R62, second round).

Its 200 went out, then an error event ``backend_failed``: ``agentgate_gateway_errors_total``
counts it under status 200 and that code, so that a scrape shows streams that failed mid-answer.
The hostile backend is ``test_gateway_r62_hostile_streams``'s (``no_done``: output, then the
connection closed without ``[DONE]``), on loopback."""

from __future__ import annotations

from collections.abc import Iterator

import _http
import pytest
from prometheus_client.parser import text_string_to_metric_families
from test_gateway_end_to_end import _body
from test_gateway_hostile_backends import Env, _gateway, _in_service
from test_gateway_r62_hostile_streams import _Streams


@pytest.fixture
def broken(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    backend = _Streams()
    try:
        with _gateway(tmp_path_factory.mktemp("r62b"), backend) as made:
            yield made
    finally:
        backend.close()


def test_a_stream_that_breaks_after_output_is_counted_as_an_error(broken: Env) -> None:
    """Review R62: a stream that ended with a ``backend_failed`` event after its 200 was counted
    only as a 200; it is also an error answer, counted under 200 and ``backend_failed``."""
    _in_service(broken)
    broken.backend.mode = "no_done"
    answer = broken.post(_body(stream=True))
    assert answer.status_code == 200 and '"backend_failed"' in answer.text, answer.text[-300:]
    root = broken.server.url.removesuffix("/v1")
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(_http.get(f"{root}/metrics").text)
        for s in family.samples
    }
    assert samples[("agentgate_gateway_errors_total", (("code", "backend_failed"), ("status", "200")))] == 1
    assert samples[("agentgate_gateway_requests_total", (("status", "200"),))] == 1
