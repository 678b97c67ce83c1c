"""Review R84 of the bounded HTTP protocol's head timeout (agentgate/_bounded_http.py): 408 when a
head is not complete ``head_timeout_s`` after its first byte arrived.

A head begun in the read that ended the request before it (pipelined: sent in one write with
it) got no clock: the clock starts when a read arrives while a head is awaited, and that read had
started the request before. The connection was left to uvicorn's keep-alive, armed when the
answer before it ended, which closed it with no answer (after 5 s; where ``head_timeout_s`` is
the longer, as the gateway's 10 s, a head arriving behind an answer met the same silent close).
Both are answered 408 now. The simulator serves the same protocol, with limits of its own.
"""

from __future__ import annotations

from _raw_statuses import statuses

from agentgate.sim import SimServer

GET = b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n"
PARTIAL = b"GET /health HTTP/1.1\r\nHo"
"""The first bytes of a head whose rest never comes."""


def test_a_head_begun_in_the_read_that_ended_the_request_before_it_gets_408() -> None:
    """Review R84: the partial head after a whole request in one write got no 408; the
    connection closed with the first answer alone, when uvicorn's keep-alive ran out."""
    with SimServer(time_scale=1e-3, head_timeout_s=0.3) as sim:
        assert statuses(sim.port, GET + PARTIAL, timeout=10) == [b"200", b"408"]


def test_a_head_arriving_behind_an_answer_is_not_cut_by_the_keep_alive() -> None:
    """Review R84: with uvicorn's keep-alive (here 0.1 s) shorter than ``head_timeout_s`` (as the
    gateway's 5 s against 10 s), the keep-alive armed at the end of the answer closed the
    connection, without an answer, while the next head was arriving; its own clock bounds it."""
    with SimServer(time_scale=1e-3, head_timeout_s=0.5) as sim:
        assert sim._server is not None
        sim._server.config.timeout_keep_alive = 0.1  # each connection's protocol reads it when made
        assert statuses(sim.port, GET + PARTIAL, timeout=10) == [b"200", b"408"]
