"""Review R48, sixth second look: commit 04b27b3 (a value ending in a file name with an extension
after a slash is never word-based key text; a new answer stops the last answer's tail clock
unless writing is paused).

Found, and fixed by the lead in the same session (each was a strict xfail): ``is_key_text`` no
longer exempts values by how they end; a word counts as key text only when it is 40 or more hex
digits, or base64 characters with four capitals and four small letters at least (``_key_like``),
so names made of words are shown and a seed anywhere is hidden; a refusal that closes the
connection starts the stall clock for the bytes still waiting (``_start_tail_clock``, shared
with the end of an answer and resumed writing).
- agentgate/keys.py: ``_FILE_NAME_END`` is searched over the whole value and its ``[^/\\\\]*``
  spans blanks, so any value that merely *ends* like a path is exempt from the word check: a
  seed followed by a path (``SEED /tmp/x.key``, ``export KEY=SEED # from /etc/agent.key``) or a
  seed that contains a ``/`` followed by words ending in a file name (``SEED from agent.key``) is
  quoted whole in the ``KeyFileError`` of ``load_signing_key`` / ``load_public_key``.
- agentgate/keys.py: the fifth look's defect (a plain path that names no file hidden because a
  blank splits off a dot-free run of 40+ characters of its directories) still holds for a file
  name without an extension (``.../agentgate-production-signing-keys (1)/id_ed25519``) and a
  directory given with a trailing slash.
- agentgate/dispatch/gateway/_http.py: a keep-alive request whose head completes while the last
  answer's tail waits in the transport (writing not paused) stops the tail clock
  (``_started``); if that request's body is then refused by the parser (a bad chunk: 400 through
  ``_refuse``, which marks the request disconnected and closes), no answer of the app ever
  completes, so ``on_response_complete`` starts no clock again: a caller that stopped reading
  holds its connection for ever (asyncio and uvloop).

Holds (passing): after a tail clock was stopped by a next request, a clock starts again when
that request is answered with a few bytes, a 204, a 500 for an app that answered nothing, an
upgrade that was ignored; a CONNECT refused, and a pipelined request refused behind another,
leave or restart a clock; a Windows path with backslashes is quoted.
"""

from __future__ import annotations

import base64
import time
from typing import Any

import pytest
from test_gateway_stall import STALL_S
from test_gateway_stall_paused import HIGH_WATER, _EndsPaused, answered, connected

from agentgate.errors import KeyFileError
from agentgate.keys import is_key_text, load_public_key, load_signing_key

# --- is_key_text: key text that ends like a path ------------------------------------------------

_SEED = base64.b64encode(bytes(range(7, 39))).decode()
_SLASHED_SEED = base64.b64encode(bytes(range(190, 222))).decode()
assert "/" in _SLASHED_SEED


@pytest.mark.parametrize(
    "value",
    [
        f"{_SEED} /tmp/x.key",
        f"{_SEED} https://example.com/keys/agent.pub",
        f"export AGENT_KEY={_SEED} # from /etc/agentgate/agent.key",
        f"SEED={_SEED} KEYFILE=/srv/keys/agent.pem",
        f"{_SLASHED_SEED} from agent.key",
    ],
)
@pytest.mark.parametrize("load", [load_signing_key, load_public_key])
def test_a_seed_followed_by_a_path_is_not_quoted(value: str, load: Any) -> None:
    with pytest.raises(KeyFileError) as raised:
        load(value)
    assert _SEED not in str(raised.value) and _SLASHED_SEED not in str(raised.value)


def test_a_seed_alone_or_as_a_pem_line_is_still_hidden() -> None:
    assert is_key_text(_SLASHED_SEED)
    assert is_key_text(f"my key: {_SEED}.")
    assert is_key_text(f"{_SLASHED_SEED} (see agent.key)")  # ends in ')': no file name end


@pytest.mark.parametrize(
    "path",
    [
        "/srv/no-such/Downloads/agentgate-production-signing-keys (1)/id_ed25519",
        "/srv/no-such/My Keys/agentgate-production-signing-key-2026/",
        "/srv/no-such/tenant=acme/agentgate-production-signing-keys/agent",
    ],
)
def test_a_dotless_plain_path_that_names_no_file_is_quoted(path: str) -> None:
    with pytest.raises(KeyFileError) as raised:
        load_signing_key(path)
    assert "not shown" not in str(raised.value)


def test_a_windows_path_with_a_long_directory_is_quoted() -> None:
    path = "C:\\Users\\alice\\My Keys\\agentgate-production-signing-keys-2026\\agent"
    assert not is_key_text(path)


# --- the tail clock stopped by a next request ---------------------------------------------------

TAIL = 36 << 10
"""A first answer of which some KiB stay in the transport's buffer (below the high-water mark)."""


class _Next(_EndsPaused):
    """``/tail`` writes ``TAIL`` bytes at once; ``/few`` a few bytes; ``/204`` a 204; ``/none``
    answers nothing (uvicorn answers 500); ``/body`` reads its body and answers a few bytes."""

    async def _app(self, scope: Any, receive: Any, send: Any) -> None:
        path = scope["path"]
        if path == "/none":
            return
        if path == "/body":
            while True:
                message = await receive()
                if message["type"] == "http.disconnect" or not message.get("more_body"):
                    break
        body = b"t" * TAIL if path == "/tail" else b"" if path == "/204" else b"ok"
        status = 204 if path == "/204" else 200
        headers = [(b"content-length", str(len(body)).encode())] if status != 204 else []
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body, "more_body": False})


def _held(loop: str, follow: bytes, pipelined: bool = False) -> bool | None:
    """Whether the connection outlives four stall limits after the caller, which never reads,
    sent ``follow`` behind ``/tail`` (None: the tail was not left in the buffer)."""
    with _Next(loop) as served, connected(served) as (sock, protocol, transport):
        server = served.server
        first = b"GET /tail HTTP/1.1\r\nHost: x\r\n\r\n"
        if pipelined:
            sock.sendall(first + follow)
        else:
            sock.sendall(first)
            answered(protocol)
            # The tail's clock runs: bytes in the transport's buffer, writing not paused.
            if not (0 < transport.get_write_buffer_size() <= HIGH_WATER and not protocol.flow.write_paused):
                return None
            sock.sendall(follow)
        deadline = time.monotonic() + 4 * STALL_S
        while server.server_state.connections and time.monotonic() < deadline:
            time.sleep(0.02)
        return bool(server.server_state.connections)


def _assert_cut(loop: str, follow: bytes, pipelined: bool = False) -> None:
    for _ in range(3):
        held = _held(loop, follow, pipelined)
        if held is not None:
            assert not held, "a caller that stopped reading holds its connection"
            return
    raise AssertionError("the scene was never set up")


_BAD_CHUNK = b"POST /body HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n"


@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
def test_a_next_request_whose_body_is_refused_does_not_hold_the_connection(loop: str) -> None:
    _assert_cut(loop, _BAD_CHUNK)


@pytest.mark.parametrize(
    "follow",
    [b"GET /few HTTP/1.1\r\nHost: x\r\n\r\n", b"CONNECT x:443 HTTP/1.1\r\nHost: x\r\n\r\n"],
    ids=["few", "connect"],
)
def test_on_uvloop_a_next_keep_alive_request_leaves_a_clock_running(follow: bytes) -> None:
    _assert_cut("uvloop", follow)


@pytest.mark.parametrize(
    "follow",
    [
        b"GET /few HTTP/1.1\r\nHost: x\r\n\r\n",
        b"GET /204 HTTP/1.1\r\nHost: x\r\n\r\n",
        b"GET /none HTTP/1.1\r\nHost: x\r\n\r\n",
        b"GET /few HTTP/1.1\r\nHost: x\r\nConnection: upgrade\r\nUpgrade: websocket\r\n\r\n",
        b"POST /body HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\nhi",
        b"CONNECT x:443 HTTP/1.1\r\nHost: x\r\n\r\n",
        b"GET /few HTTP/1.1\r\nHost: \x01\r\n\r\n",
    ],
    ids=["few", "204", "none", "upgrade", "body", "connect", "bad-head"],
)
def test_a_next_keep_alive_request_leaves_a_clock_running(follow: bytes) -> None:
    _assert_cut("asyncio", follow)


@pytest.mark.parametrize(
    "follow",
    [
        b"GET /few HTTP/1.1\r\nHost: x\r\n\r\n",
        b"GET /few HTTP/1.1\r\nHost: x\r\n\r\nGET /x HTTP/1.1\r\nHost: \x01\r\n\r\n",
        b"GET /204 HTTP/1.1\r\nHost: x\r\n\r\nCONNECT x:443 HTTP/1.1\r\nHost: x\r\n\r\n",
    ],
    ids=["few", "few-then-refused", "204-then-connect"],
)
def test_a_pipelined_request_behind_a_tail_leaves_a_clock_running(follow: bytes) -> None:
    _assert_cut("asyncio", follow, pipelined=True)
