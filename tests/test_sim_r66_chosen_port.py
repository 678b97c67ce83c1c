"""Review R66 of the port ``SimServer`` chooses itself (``port=0``, the default).

The port was chosen when the server was made (bound and closed at once, ``_free_port``) and bound
again only by ``start``. Another process could take it in between (an outgoing connection's
ephemeral port, another test's server: the machine runs several test sessions at once), and
``start`` then failed with "cannot serve on 127.0.0.1:N: Address already in use", for a port the
caller never asked for. A server that chose its port and has never served chooses again; one
given a port, or one that has served (``revive`` must come back where it was), does not.
"""

from __future__ import annotations

import socket

import _http
import pytest

from agentgate.errors import DispatchError
from agentgate.sim import SimServer


def _squat(port: int) -> socket.socket:
    """Listen on ``port``, as another process that took it would."""
    holder = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    holder.bind(("127.0.0.1", port))
    holder.listen()
    return holder


def test_a_port_it_chose_and_lost_before_starting_is_chosen_again() -> None:
    """Review R66: ``start`` raised ``DispatchError`` (address in use) for the port the server
    had chosen itself when another listener took it before ``start``."""
    server = SimServer(time_scale=0.01)
    chosen = server.port
    with _squat(chosen):
        server.start()
        try:
            assert server.port != chosen
            assert _http.get(f"{server.url}/health", timeout=30).text == "ok"
        finally:
            server.stop()


def test_a_port_it_was_given_or_has_served_on_is_kept() -> None:
    """Review R66 (checked, right already): a port the caller named, or the one a server that
    served is revived on, is never swapped: taken, it is a ``DispatchError`` naming it."""
    server = SimServer(time_scale=0.01).start()
    port = server.port
    server.kill()
    with _squat(port), pytest.raises(DispatchError, match=rf"127\.0\.0\.1:{port}\b"):
        server.revive()
    assert server.port == port
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        given = probe.getsockname()[1]
    named = SimServer(time_scale=0.01, port=given)
    with _squat(given), pytest.raises(DispatchError, match=rf"127\.0\.0\.1:{given}\b"):
        named.start()
