"""Review r10: attacks on backend credentials and on nested calls borrowing an ancestor's slot.

Credentials: a backend that echoes the ``Authorization`` it was sent into an answer agentgate
cannot parse (a bad status line, a bad header, usage that is not an object) must not get the key,
whole or cut, into any error agentgate raises, nor into the exceptions chained to it (a logger or
error tracker that walks ``__context__`` prints those). Real HTTP on 127.0.0.1 throughout: a raw
socket server that answers whatever bytes a test gives it.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Callable, Iterator

import aiohttp
import httpx
import pytest

from agentgate.dispatch import inventory_from_mapping
from agentgate.dispatch.backends import BackendClient
from agentgate.dispatch.inventory import parse_inventory
from agentgate.errors import BackendCredentialError, DispatchError

MODEL = "llama-3.1-8b"
KEY = "sk-r10-4c1d9a7e2b6f-backend-secret"
"""The backend key: every leak check looks for any 8 characters of it in a row."""
ENV = "AGENTGATE_R10_BACKEND_KEY"
BODY = {"model": MODEL, "messages": [{"role": "user", "content": "hello"}], "max_tokens": 3}


def _fragments(text: str) -> list[str]:
    """Every run of 8 characters of ``KEY`` found in ``text``."""
    return [KEY[i : i + 8] for i in range(len(KEY) - 7) if KEY[i : i + 8] in text]


def _chain(exc: BaseException) -> list[BaseException]:
    """``exc`` and every exception chained to it (cause or context, shown or suppressed)."""
    seen: list[BaseException] = []
    todo: list[BaseException | None] = [exc]
    while todo:
        current = todo.pop()
        if current is None or any(current is known for known in seen):
            continue
        seen.append(current)
        todo += [current.__cause__, current.__context__]
    return seen


class _RawServer:
    """A real TCP server on 127.0.0.1 that reads one request head and answers the bytes
    ``answer(authorization)`` returns, then closes the connection."""

    def __init__(self, answer: Callable[[bytes], bytes]) -> None:
        self.answer = answer
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.sock.getsockname()[1]}"

    def _serve(self) -> None:
        while True:
            try:
                connection, _ = self.sock.accept()
            except OSError:
                return
            with connection:
                data = b""
                while b"\r\n\r\n" not in data:
                    piece = connection.recv(65536)
                    if not piece:
                        break
                    data += piece
                head = data.partition(b"\r\n\r\n")[0].split(b"\r\n")
                auth = next(
                    (line.split(b": ", 1)[1] for line in head if line.lower().startswith(b"authorization:")),
                    b"",
                )
                with contextlib.suppress(OSError):  # the client may have hung up
                    connection.sendall(self.answer(auth))

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def key_env(monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv(ENV, KEY)
    return ENV


def _json_answer(body: bytes) -> bytes:
    return b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (
        len(body),
        body,
    )


def _sse_answer(body: bytes) -> bytes:
    return b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: %d\r\n\r\n%s" % (
        len(body),
        body,
    )


ECHOES: dict[str, Callable[[bytes], bytes]] = {
    # The transport's own parsers quote the bytes they refuse (h11, aiohttp's llhttp).
    "bad status line": lambda auth: b"HTTP/1.1 2x0 " + b"y" * 30 + auth + b"\r\nContent-Length: 0\r\n\r\n",
    "bad header": lambda auth: (
        b"HTTP/1.1 200 OK\r\nX-E" + b"y" * 30 + auth + b"\x01: v\r\nContent-Length: 0\r\n\r\n"
    ),
    "not http": lambda auth: b"zz" + b"y" * 40 + auth + b"\r\n\r\n",
    # Usage that is not an object is quoted cut at 80 characters: the key straddles the cut.
    "usage cut": lambda auth: _json_answer(
        b'{"choices":[{"message":{"content":"x"},"delta":{"content":"x"}}],"usage":"'
        + b"x" * 60
        + auth
        + b'"}'
    ),
    "stream usage cut": lambda auth: _sse_answer(
        b'data: {"choices":[],"usage":"' + b"x" * 60 + auth + b'"}\n\n'
    ),
}


@pytest.fixture(params=sorted(ECHOES))
def echo(request: pytest.FixtureRequest) -> Iterator[_RawServer]:
    server = _RawServer(ECHOES[request.param])
    yield server
    server.close()


@pytest.mark.parametrize("transport", ["httpx", "aiohttp"])
async def test_an_echoed_key_is_in_no_error_nor_any_exception_chained_to_it(
    key_env: str, echo: _RawServer, transport: str
) -> None:
    backend = inventory_from_mapping(
        {
            "backends": [
                {"name": "b0", "url": echo.url, "engine": "vllm", "models": [MODEL], "api_key_env": key_env}
            ]
        }
    ).backends[0]
    errors: list[BaseException] = []
    async with httpx.AsyncClient() as http, aiohttp.ClientSession() as session:
        client = BackendClient(backend, http, session=session if transport == "aiohttp" else None)
        for call in ("chat", "stream"):
            with pytest.raises(DispatchError) as info:
                if call == "chat":
                    await client.chat(BODY)
                else:
                    async for _ in client.stream(BODY):
                        pass
            errors.append(info.value)
    assert len(errors) == 2
    for error in errors:
        for linked in _chain(error):
            shown = f"{linked!s} {linked!r} {linked.args!r}"
            assert not _fragments(shown), (type(linked).__name__, shown)


@pytest.mark.parametrize(
    "field",
    [
        {"api_key_file": KEY},  # the key pasted where its file's path goes
        {"api_key_env": "Ab3" + KEY[7:].replace("-", "")},  # an alphanumeric key fits a variable's name
    ],
)
def test_a_key_pasted_in_place_of_its_file_or_variable_is_not_quoted_by_the_refusal(
    field: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    pasted = next(iter(field.values()))
    monkeypatch.delenv(pasted, raising=False)
    text = "backends:\n  - name: b0\n    url: http://10.0.0.1:8000\n    models: [m]\n"
    text += "".join(f"    {name}: {value}\n" for name, value in field.items())
    with pytest.raises(BackendCredentialError) as info:
        parse_inventory(text, source="inv.yaml")
    message = str(info.value)
    assert message.startswith("inv.yaml:5: backend 'b0': ")
    assert pasted[:8] not in message and pasted[-8:] not in message


def test_a_conventional_variable_name_is_still_named_when_unset(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("VLLM_API_KEY_2", raising=False)
    text = "backends:\n  - name: b0\n    url: http://10.0.0.1:8000\n    models: [m]\n    api_key_env: VLLM_API_KEY_2\n"
    with pytest.raises(BackendCredentialError, match="the environment variable VLLM_API_KEY_2 is not set"):
        parse_inventory(text, source="inv.yaml")
