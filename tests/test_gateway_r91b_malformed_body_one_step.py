"""A chat body refused once read (400 ``invalid_request``) is audited in the worker step that read
it: one hand-off to a worker thread, as before review R91 (a regression review of R91).

R91 moved the body's reading into the decision's worker step (``Gateway._read_and_decide``), but
a body refused there raised out of the step, and its refusal was then handed to a worker again
(``_refuse_body``): two hand-offs for each malformed body where one did before, a second wait
for a worker when every one is busy."""

from __future__ import annotations

import asyncio
import itertools
import json
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import httpx
import pytest
from test_gateway import Env, _body

from agentgate.dispatch.gateway import Gateway, GatewayServer, _app

pytest_plugins = ("test_gateway",)  # its ``backends`` and ``env`` fixtures


class _Steps(ThreadPoolExecutor):
    """The serving loop's default executor, numbering the steps handed to it: ``current`` is the
    number of the step running in the calling worker thread."""

    def __init__(self) -> None:
        super().__init__(max_workers=4)
        self._numbers = itertools.count()
        self._running = threading.local()

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        number = next(self._numbers)

        def numbered() -> Any:
            self._running.step = number
            try:
                return fn(*args, **kwargs)
            finally:
                self._running.step = None

        return super().submit(numbered)

    def current(self) -> int | None:
        return getattr(self._running, "step", None)


@pytest.fixture
def served(env: Env, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[str, _Steps]]:
    """A gateway on ``env``'s gate whose loop hands its steps to a ``_Steps``: its URL, and that."""
    gateway = Gateway(env.gate, env.server.gateway.inventory)
    steps = _Steps()
    started = gateway.dispatcher.start

    async def start_numbering() -> None:
        asyncio.get_running_loop().set_default_executor(steps)
        await started()

    monkeypatch.setattr(gateway.dispatcher, "start", start_numbering)
    server = GatewayServer(gateway, port=0).start()
    try:
        yield server.url, steps
    finally:
        server.stop()
        steps.shutdown()


@pytest.mark.parametrize(
    ("raw", "param"),
    [(json.dumps(_body(n=2)).encode(), "n"), (b"{not json", None)],
    ids=["a_field_at_fault", "not_json"],
)
def test_a_malformed_body_is_refused_in_the_step_that_read_it(
    env: Env,
    served: tuple[str, _Steps],
    monkeypatch: pytest.MonkeyPatch,
    raw: bytes,
    param: str | None,
) -> None:
    url, steps = served
    ran: dict[str, list[int | None]] = {"read": [], "refuse": []}
    read, refuse = _app.read_chat_request, env.gate.refuse

    def reading(body: bytes) -> Any:
        ran["read"].append(steps.current())
        return read(body)

    def refusing(*args: Any, **kwargs: Any) -> Any:
        ran["refuse"].append(steps.current())
        return refuse(*args, **kwargs)

    monkeypatch.setattr(_app, "read_chat_request", reading)
    monkeypatch.setattr(env.gate, "refuse", refusing)
    before = len(env.entries())
    answer = httpx.post(
        f"{url}/chat/completions",
        content=raw,
        headers={"content-type": "application/json", "Authorization": f"Bearer {env.agent.chain.token}"},
        timeout=10,
    )
    assert answer.status_code == 400, answer.text
    error = answer.json()["error"]
    assert (error["code"], error["param"]) == ("invalid_request", param)
    assert error["message"].startswith("malformed chat completion request: ")
    assert [e.kind for e in env.entries()[before:]] == ["deny"]
    # One step: the refusal audited by the worker step that read the body, never handed off again.
    assert ran["read"] == ran["refuse"] and len(ran["read"]) == 1 and ran["read"][0] is not None, ran
