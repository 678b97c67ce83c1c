"""The simulated backend over real HTTP: OpenAI endpoints, SSE, vLLM metrics, cancellation."""

from __future__ import annotations

import contextlib
import json
import socket
import time

import _http
import openai
import pytest

from agentgate._http_limits import HttpLimits
from agentgate.dispatch.metrics import load_from_text
from agentgate.errors import InputError
from agentgate.sim import SimServer
from agentgate.sim import _server as sim_server


def test_openai_client_talks_to_the_simulator() -> None:
    with SimServer(time_scale=0.05) as server:
        client = openai.OpenAI(base_url=server.url + "/v1", api_key="unused")
        assert [m.id for m in client.models.list().data] == ["llama-3.1-8b"]
        reply = client.chat.completions.create(
            model="llama-3.1-8b", messages=[{"role": "user", "content": "hello " * 50}], max_tokens=7
        )
        assert reply.usage is not None and reply.usage.completion_tokens == 7
        stream = client.chat.completions.create(
            model="llama-3.1-8b",
            messages=[{"role": "user", "content": "hello " * 50}],
            max_tokens=5,
            stream=True,
            stream_options={"include_usage": True},
        )
        chunks = list(stream)
        assert sum(1 for c in chunks if c.choices and c.choices[0].delta.content) == 5
        assert chunks[-1].usage is not None and chunks[-1].usage.prompt_tokens_details is not None
        assert chunks[-1].usage.prompt_tokens_details.cached_tokens > 0  # same prompt as before


def test_metrics_use_vllm_names_and_trail_the_engine() -> None:
    with SimServer(time_scale=0.05, scrape_lag_s=0.2) as server, _http.Client() as http:
        http.post(
            server.url + "/v1/chat/completions",
            json={
                "model": "llama-3.1-8b",
                "messages": [{"role": "user", "content": "x " * 400}],
                "max_tokens": 3,
            },
        )
        time.sleep(0.05)
        load = load_from_text(http.get(server.url + "/metrics").text, "vllm")
        assert (
            load.prefix_queries is not None
            and load.kv_capacity_tokens == server.engine.kv.capacity // 16 * 16
        )
        assert load.running == 0 and load.waiting == 0


def test_bad_requests_get_openai_errors() -> None:
    with SimServer(time_scale=0.05) as server, _http.Client() as http:
        url = server.url + "/v1/chat/completions"
        assert http.post(url, content=b"not json").status_code == 400
        assert http.post(url, json={"model": "llama-3.1-8b", "messages": []}).status_code == 400
        assert (
            http.post(
                url, json={"model": "other", "messages": [{"role": "user", "content": "x"}]}
            ).status_code
            == 404
        )


def test_cancelled_stream_frees_the_engine() -> None:
    with SimServer(time_scale=0.05) as server, _http.Client() as http:
        body = {"model": "llama-3.1-8b", "messages": [{"role": "user", "content": "x"}], "max_tokens": 5000}
        with http.stream("POST", server.url + "/v1/chat/completions", json={**body, "stream": True}) as resp:
            for line in resp.iter_lines():
                if line.startswith("data:"):
                    break
        deadline = time.monotonic() + 3
        while server.engine.has_work() and time.monotonic() < deadline:
            time.sleep(0.02)
        assert not server.engine.has_work()


def test_authorizations_are_counted_within_a_bound() -> None:
    """Review R53: ``authorizations`` kept a count for every distinct ``Authorization`` header, so
    a long-running simulator grew with each caller's token. The first ``AUTHORIZATIONS_KEPT``
    pairs are counted one by one, any later one under ``OTHERS``; nothing is lost from the total."""
    from agentgate.sim._server import AUTHORIZATIONS_KEPT, OTHERS

    with SimServer(time_scale=0.05) as server, _http.Client() as http:
        for i in range(AUTHORIZATIONS_KEPT + 5):
            http.get(f"{server.url}/v1/models", headers={"Authorization": f"Bearer k{i}"})
        assert len(server.authorizations) == AUTHORIZATIONS_KEPT + 1
        assert server.authorizations[("/v1/models", OTHERS)] == 5
        assert server.authorizations[("/v1/models", "Bearer k0")] == 1
        assert sum(server.authorizations.values()) == AUTHORIZATIONS_KEPT + 5


def _trickled_answer(port: int, opening: bytes, byte: bytes) -> tuple[bytes, bool]:
    """Open a connection, send ``opening``, then ``byte`` again and again, never ending the
    request; return what the server answered and whether it closed the connection."""
    got, closed = b"", False
    with socket.create_connection(("127.0.0.1", port), timeout=0.05) as conn:
        conn.sendall(opening)
        deadline = time.monotonic() + 10  # a bound on a failing test, not a timing asserted
        while not closed and time.monotonic() < deadline:
            try:
                conn.sendall(byte)
                chunk = conn.recv(65536)
            except TimeoutError:
                continue
            except OSError:  # reset by the server after its answer
                closed = True
                continue
            got += chunk
            closed = not chunk
    return got, closed


def test_a_body_that_trickles_in_is_answered_408_and_the_connection_closed() -> None:
    """Review R54: the chat body was read with no time bound, so a client that sent its headers and
    then one byte a second (or nothing) held a task and up to 16 MiB for ever.

    Rule: a body not in full ``body_timeout_s`` after its headers is answered 408 with an OpenAI
    error body, ``Connection: close``, and the connection is closed."""
    with SimServer(time_scale=0.05, body_timeout_s=0.3) as server:
        got, closed = _trickled_answer(
            server.port,
            b"POST /v1/chat/completions HTTP/1.1\r\nhost: sim\r\ncontent-type: application/json\r\n"
            b"content-length: 100000\r\n\r\n{",
            b" ",
        )
        assert closed
        head, _, body = got.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 408 ")
        assert b"connection: close" in head.lower()
        assert b"did not arrive within 0.3 s" in body and b'"code":408' in body
        assert server.served == 0


@pytest.mark.parametrize("seconds", [0, -1.0, float("nan"), float("inf"), True])
def test_a_body_timeout_that_is_not_a_positive_number_is_refused(seconds: float) -> None:
    """Review R54: ``body_timeout_s`` bounds the wait for a chat body; one that is not a positive
    number of seconds would answer every request 408, or never."""
    with pytest.raises(InputError, match="body_timeout_s must be a positive number"):
        SimServer(body_timeout_s=seconds)


def _answer_to_endless_body(port: int, declared: int) -> tuple[bytes, int]:
    """Send a chat head declaring ``declared`` bytes, then body bytes until an answer comes (or
    the connection closes); return what was read and how many body bytes were sent by then."""
    piece = b" " * 65536
    sent, got = 0, b""
    with socket.create_connection(("127.0.0.1", port), timeout=0.05) as conn:
        conn.sendall(
            b"POST /v1/chat/completions HTTP/1.1\r\nhost: sim\r\ncontent-type: application/json\r\n"
            b"content-length: %d\r\n\r\n" % declared
        )
        deadline = time.monotonic() + 10  # a bound on a failing test, not a timing asserted
        while b"\r\n\r\n" not in got and sent < declared and time.monotonic() < deadline:
            with contextlib.suppress(TimeoutError):
                sent += conn.send(piece[: declared - sent])
            with contextlib.suppress(TimeoutError):
                if not (chunk := conn.recv(65536)):
                    break
                got += chunk
        with contextlib.suppress(TimeoutError, OSError):
            while b'"code":' not in got and (chunk := conn.recv(65536)):
                got += chunk
    return got, sent


def test_a_body_over_the_limit_is_answered_413_before_the_rest_is_read(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Review R55: the simulator answered a body over ``MAX_BODY_BYTES`` 400, where the gateway
    (and OpenAI's API) answer 413: the request may be well formed, only too large.

    Rule: a body that passes the limit is answered 413 with an OpenAI error body as soon as it
    does, long before the rest of a body declared far larger has been sent; nothing is served."""
    monkeypatch.setattr(sim_server, "MAX_BODY_BYTES", 256 * 1024)
    declared = 256 * 1024 * 1024
    with SimServer(time_scale=0.05) as server:
        got, sent = _answer_to_endless_body(server.port, declared)
        assert server.served == 0
    head, _, body = got.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 413 "), got[:300]
    error = json.loads(body)["error"]
    assert error["type"] == "invalid_request_error" and error["code"] == 413
    assert f"larger than {256 * 1024} bytes" in error["message"]
    assert sent < declared // 4


def test_a_head_that_trickles_in_is_answered_408_and_the_connection_closed() -> None:
    """Review R55: the simulator read request heads with no time bound (uvicorn has none), so a
    client that sent a header a byte at a time held its connection for ever.

    Rule: a head not complete ``head_timeout_s`` after the connection opened is answered 408 and
    the connection is closed; nothing is served."""
    with SimServer(time_scale=0.05, head_timeout_s=0.3) as server:
        got, closed = _trickled_answer(server.port, b"GET /health HTTP/1.1\r\nhost: sim\r\nx-slow: ", b"a")
        assert closed
        assert got.startswith(b"HTTP/1.1 408 "), got[:200]
        assert server.served == 0
        assert _http.get(server.url + "/health").status_code == 200


@pytest.mark.parametrize("seconds", [0, -1.0, float("nan"), float("inf"), True])
def test_a_head_timeout_that_is_not_a_positive_number_is_refused(seconds: float) -> None:
    """Review R55: ``head_timeout_s`` bounds the wait for a request head; one that is not a
    positive number of seconds would refuse every request, or wait for ever."""
    with pytest.raises(InputError, match="head_timeout_s must be a positive number"):
        SimServer(head_timeout_s=seconds)


def _answer_to(port: int, request: bytes) -> bytes:
    """Send ``request`` on a new connection and read until the server closes it."""
    got = b""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as conn:
        conn.sendall(request)
        with contextlib.suppress(ConnectionResetError):
            while chunk := conn.recv(65536):
                got += chunk
    return got


def test_the_simulator_has_http_limits_of_its_own_modelled_on_vllm() -> None:
    """Review R56: the simulator served the gateway's HTTP limits (a 64 KiB head, a 30 s stall cut).

    Rule: ``SimServer``'s limits are its own, modelled on a vLLM server (uvicorn): a head of up
    to 4 MiB (vLLM's ``--h11-max-incomplete-event-size``) is served, an answer is never cut for
    a caller that stops reading, and each limit is a setting (a head over ``max_head_bytes``: a
    bare 431, the connection closed). A 100 KiB head was refused 431, as the gateway refuses it."""
    head = b"GET /health HTTP/1.1\r\nhost: sim\r\nconnection: close\r\nx-big: %s\r\n\r\n"
    with SimServer(time_scale=0.05) as server:
        served = _answer_to(server.port, head % (b"a" * 100_000))
        assert served.startswith(b"HTTP/1.1 200 "), served[:200]
        assert server.http_limits == HttpLimits(
            max_head_bytes=4 * 1024 * 1024, head_timeout_s=10.0, stall_s=None, unread_body_s=10.0
        )
    with SimServer(time_scale=0.05, max_head_bytes=2048) as server:
        refused = _answer_to(server.port, head % (b"a" * 4096))
        assert refused.startswith(b"HTTP/1.1 431 "), refused[:200]
        assert server.served == 0


@pytest.mark.parametrize(
    ("setting", "value"),
    [("max_head_bytes", 0), ("max_head_bytes", 16 * 1024 * 1024 + 1), ("stall_s", 0), ("unread_body_s", -1)],
)
def test_an_http_limit_out_of_its_range_is_refused_naming_it(setting: str, value: float) -> None:
    """Review R56: the simulator's HTTP limits are settings, each checked as the gateway's are."""
    with pytest.raises(InputError, match=f"^{setting} must be "):
        SimServer(**{setting: value})
