"""Review R60 of ``SimServer``'s ``time_scale``: one so small that the engine's clock overflows.

The engine's clock is the wall clock divided by ``time_scale``. At 1e-320 (a positive number, so
taken) it was infinite within a second, the runner slept for ever, and the server took requests
and never answered them; at 1e-300 every step took no time. A ``time_scale`` under
``MIN_TIME_SCALE`` (1e-6, a million times faster than real time) is refused when the server is
made.
"""

from __future__ import annotations

import _http
import pytest

from agentgate.errors import InputError
from agentgate.sim import SimServer
from agentgate.sim._server import MIN_TIME_SCALE


@pytest.mark.parametrize("time_scale", [5e-324, 1e-320, 1e-300, 1e-9, 9.9e-7, float("inf")])
def test_a_time_scale_under_a_millionth_is_refused_when_the_server_is_made(time_scale: float) -> None:
    """Review R60: SimServer(time_scale=1e-320) started, took a chat request and never answered it."""
    with pytest.raises(InputError, match="time_scale must be a finite number of at least 1e-06"):
        SimServer(time_scale=time_scale)


def test_the_smallest_time_scale_answers() -> None:
    """At ``MIN_TIME_SCALE`` the server answers as at any other (a million times faster)."""
    assert MIN_TIME_SCALE == 1e-6
    with SimServer(time_scale=MIN_TIME_SCALE) as server:
        response = _http.post(
            server.url + "/v1/chat/completions",
            json={"messages": [{"role": "user", "content": "hi"}], "max_tokens": 3},
            timeout=5.0,
        )
    assert response.status_code == 200
    assert response.json()["usage"]["completion_tokens"] == 3
