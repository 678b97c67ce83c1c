"""Review R48, seventh second look: commit 7582ab3 (``_key_like``: a word is key text when it is
40+ hex digits, or base64 characters with four capitals and four small letters; one
``_start_tail_clock`` for the end of an answer, resumed writing and refusals).

Found, and fixed by the lead in the same session (each was a strict xfail: ``0x`` and grouped
hex or base64 judged whole, absolute paths of CamelCase names shown, a did:key's fragment left
out, a finished answer's tail clock not started while the next answer is written):
- agentgate/keys.py: common renderings of an Ed25519 seed are still quoted whole in the
  ``KeyFileError`` of ``load_signing_key``: hex with a ``0x`` prefix (``x`` is no hex digit and
  hex has no capitals), hex in colon pairs as ``openssl pkey -text`` prints it, and hex or base64
  in groups split by blanks or dashes (each group is a short word).
- agentgate/keys.py: a dot-free path whose directories are CamelCase words
  (``/Users/JohnDoe/Library/ApplicationSupport/AgentGate/Keys``, ``C:/Users/...``) names no file
  and is hidden as key text: the ``/`` is a base64 character, so the whole path is one word with
  four capitals and four small letters.
- agentgate/keys.py: a did:key verification method (``did:key:z6Mk...#z6Mk...``) is taken for key
  text: ``_DID_KEY`` removes the did, and the fragment, a base58 word, is judged alone.
- agentgate/dispatch/gateway/_http.py: ``on_response_complete`` starts the tail clock after
  uvicorn started the next pipelined request (``_start_tail_clock(answered)`` runs after
  ``_started(queued)``), so the clock runs while that next answer writes without pausing: a caller
  that reads steadily, as fast as the next answer writes, never lowers the bytes untaken below
  the mark and is reset.

Holds (passing): a 64-byte secret key in base58 (Solana style), a PKCS#8 DER in base64 and a
64-byte secret in upper-case hex are hidden; a path holding a 40-hex commit id is shown.
"""

from __future__ import annotations

import asyncio
import base64
import threading
import time
from typing import Any

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from test_gateway_stall import STALL_S
from test_gateway_stall_paused import HIGH_WATER, _EndsPaused, connected

from agentgate.errors import KeyFileError
from agentgate.keys import SigningKey, is_key_text, load_signing_key

_SEED = bytes(range(200, 232))
_HEX = _SEED.hex()


def _quoted(value: str, secret: str) -> bool:
    with pytest.raises(KeyFileError) as raised:
        load_signing_key(value)
    shown = str(raised.value).replace(" ", "").replace(":", "").replace("-", "").lower()
    return secret.replace(" ", "").replace(":", "").replace("-", "").lower()[8:40] in shown


@pytest.mark.parametrize(
    "value",
    [
        "0x" + _HEX,
        ":".join(_HEX[i : i + 2] for i in range(0, 64, 2)),
        " ".join(_HEX[i : i + 4] for i in range(0, 64, 4)),
        "-".join(_HEX[i : i + 8] for i in range(0, 64, 8)),
        " ".join(base64.b64encode(_SEED).decode()[i : i + 4] for i in range(0, 44, 4)),
    ],
    ids=["0x-hex", "colon-hex", "spaced-hex", "dashed-hex", "spaced-base64"],
)
def test_a_seed_in_common_hex_or_grouped_renderings_is_not_quoted(value: str) -> None:
    assert not _quoted(value, value)


def _base58(data: bytes) -> str:
    alphabet = "123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz"
    number, text = int.from_bytes(data, "big"), ""
    while number:
        number, digit = divmod(number, 58)
        text = alphabet[digit] + text
    return text


def test_a_solana_key_a_pkcs8_der_and_upper_hex_are_hidden() -> None:
    secret = Ed25519PrivateKey.from_private_bytes(_SEED)
    der = secret.private_bytes(
        serialization.Encoding.DER, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    raw = _SEED + secret.public_key().public_bytes_raw()
    for value in (_base58(raw), base64.b64encode(der).decode(), raw.hex().upper(), f"--key={_base58(raw)}"):
        assert is_key_text(value), value


@pytest.mark.parametrize(
    "path",
    [
        "/Users/JohnDoe/Library/ApplicationSupport/AgentGate/Keys",
        "C:/Users/AliceSmith/Documents/AgentGate/Keys",
    ],
)
def test_a_camel_case_path_that_names_no_file_is_shown(path: str) -> None:
    with pytest.raises(KeyFileError) as raised:
        load_signing_key(path)
    assert "not shown" not in str(raised.value)


def test_a_path_with_a_commit_id_that_names_no_file_is_shown() -> None:
    for path in (
        "/srv/ci/builds/" + "3f2a9c1d" * 5 + "/keys/agent",
        "/srv/ci/" + "3f2a9c1d" * 5 + "/agent.key",
    ):
        with pytest.raises(KeyFileError) as raised:
            load_signing_key(path)
        assert "not shown" not in str(raised.value)


def test_a_did_key_verification_method_is_not_key_text() -> None:
    did = SigningKey.generate().did
    assert not is_key_text(f"{did}#{did.removeprefix('did:key:')}")


# --- the tail clock of a pipelined answer runs during the next one --------------------------------

TAIL = 56 << 10
"""A first answer most of which stays in the transport's buffer (below the high-water mark)."""
CHUNK = 2 << 10
STEPS = 14


class _Drip(_EndsPaused):
    """``/tail`` writes ``TAIL`` bytes at once; ``/drip`` writes ``CHUNK`` bytes each time the
    caller released ``allowed``, ``STEPS`` times."""

    allowed = threading.Semaphore(0)

    async def _app(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["path"] == "/tail":
            body = b"t" * TAIL
            await send(
                {
                    "type": "http.response.start",
                    "status": 200,
                    "headers": [(b"content-length", str(TAIL).encode())],
                }
            )
            await send({"type": "http.response.body", "body": body})
            return
        await send({"type": "http.response.start", "status": 200, "headers": []})
        for _ in range(STEPS):
            while not self.allowed.acquire(blocking=False):
                await asyncio.sleep(0.005)
            await send({"type": "http.response.body", "body": b"d" * CHUNK, "more_body": True})
        await send({"type": "http.response.body", "body": b""})


def _pipelined_scene() -> bool:
    """False when the scene could not be set up (the kernel took the whole tail at once: no
    bytes waited in the transport once the next answer started); else the caller read it all."""
    with _Drip() as served, connected(served) as (sock, protocol, transport):
        _Drip.allowed = threading.Semaphore(0)
        sock.sendall(b"GET /tail HTTP/1.1\r\nHost: x\r\n\r\nGET /drip HTTP/1.1\r\nHost: x\r\n\r\n")
        deadline = time.monotonic() + 2
        while transport.get_write_buffer_size() == 0 or protocol.pipeline:
            if time.monotonic() > deadline:
                for _ in range(STEPS):
                    _Drip.allowed.release()
                return False
            time.sleep(0.002)
        assert 0 < transport.get_write_buffer_size() < HIGH_WATER
        try:
            _read_steadily(sock)
        finally:
            for _ in range(STEPS):
                _Drip.allowed.release()  # a stream cut short ends (and the server with it)
        return True


def test_a_steady_reader_of_a_pipelined_stream_behind_a_tail_is_not_cut() -> None:
    assert any(_pipelined_scene() for _ in range(3)), "the scene was never set up"


def _read_steadily(sock: Any) -> None:
    """Take a chunk every quarter of the stall limit, letting the stream write one after each."""
    received = 0
    for _ in range(STEPS):
        got = 0
        while got < CHUNK:
            data = sock.recv(CHUNK - got)
            assert data, "the connection closed while the caller read steadily"
            got += len(data)
        received += got
        _Drip.allowed.release()
        time.sleep(STALL_S / 4)
    sock.settimeout(5)
    while True:
        data = sock.recv(65536)
        if not data or data.endswith(b"0\r\n\r\n"):
            received += len(data)
            break
        received += len(data)
    assert received >= TAIL + STEPS * CHUNK
