"""What the gateway charges, retries and counts when a call's answer is more than it reads or its
usage comes before its output, over real HTTP on 127.0.0.1 (review R57): each test here failed
on the code it was written against and names what was wrong, or pins down what held.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import time
from collections.abc import Iterator
from pathlib import Path

import _http
import pytest
from test_gateway import MODEL, NAMES, _policy_text
from test_gateway_end_to_end import _body
from test_gateway_hostile_backends import RESERVED, Env, Hostile, _chunk, _head, _settled
from test_gateway_r57_streams import Chattering

from agentgate.dispatch import inventory_from_mapping
from agentgate.dispatch.backends import MAX_ANSWER_BYTES, Timeouts
from agentgate.dispatch.gateway import Gateway, GatewayGate, GatewayServer
from agentgate.keys import SigningKey
from agentgate.policy import parse_policy
from agentgate.store import SQLiteStore

BACKENDS = ("big-a", "big-b", "big-c")
"""Three names of one backend: a call failed over would be sent again under the next one."""
_PIECE = b"x" * (1 << 20)


class Oversized(Chattering):
    """A backend that, in mode ``declared``, answers a JSON call 200 with a ``Content-Length``
    over ``MAX_ANSWER_BYTES`` (and little of that body), and in mode ``chunked`` sends a chunked
    body past it; it counts the chat calls it was sent (``asked``)."""

    def __init__(self) -> None:
        super().__init__()
        self.asked = 0

    async def _answer(self, w: asyncio.StreamWriter, r: asyncio.StreamReader, stream: bool) -> bool:
        self.asked += 1
        if self.mode == "declared" and not stream:
            head = {"content-type": "application/json", "content-length": str(MAX_ANSWER_BYTES + 1)}
            w.write(_head("200 OK", head) + b'{"choices":[{"message":{"content":"')
            await w.drain()
            return False
        if self.mode == "chunked" and not stream:
            w.write(_head("200 OK", {"content-type": "application/json", "transfer-encoding": "chunked"}))
            with contextlib.suppress(ConnectionError):
                for _ in range(MAX_ANSWER_BYTES // len(_PIECE) + 2):
                    w.write(b"%x\r\n%s\r\n" % (len(_PIECE), _PIECE))
                    await w.drain()
            return False
        return await super()._answer(w, r, stream)


@pytest.fixture(scope="module")
def oversized() -> Iterator[Oversized]:
    backend = Oversized()
    yield backend
    backend.close()


@contextlib.contextmanager
def _three_names(tmp_path: Path, backend: Hostile) -> Iterator[Env]:
    """A gateway whose inventory lists ``backend`` under the three names of ``BACKENDS``."""
    keys = {name: SigningKey.generate() for name in NAMES}
    gate = GatewayGate(
        parse_policy(_policy_text({n: k.did for n, k in keys.items()}), source="gateway.yaml"),
        SQLiteStore(tmp_path / "agentgate.db"),
    )
    inventory = inventory_from_mapping(
        {
            "backends": [
                {"name": name, "url": backend.url, "engine": "vllm", "models": [MODEL]} for name in BACKENDS
            ]
        }
    )
    # Health probes are given 5 s: the backend, the gateway and the test share one process (and
    # its GIL), and while a 64 MiB answer is written and read, a probe of 0.5 s timed out on a
    # loaded machine and marked every name down (review R61: the health loop's doing, not the
    # call's, whose ``AnswerTooLarge`` marks nothing down).
    gateway = Gateway(
        gate, inventory, timeouts=Timeouts(connect_s=1.0, first_token_s=5, idle_s=0.8, probe_s=5.0)
    )
    gateway.dispatcher.recovery_wait_s = 0.2
    gateway.dispatcher.cooldown_s = 0.1  # a backend marked down by one test is back for the next
    server = GatewayServer(gateway, port=0).start()
    agent = gate.issue(keys["root"], name="agent", key=keys["agent"], role="chat")
    try:
        yield Env(gate, server, agent, backend, keys["root"], keys["poor"])
    finally:
        server.stop()
        gate.close()


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory, oversized: Oversized) -> Iterator[Env]:
    with _three_names(tmp_path_factory.mktemp("r57-charges"), oversized) as made:
        yield made


def _all_in_service(env: Env, within: float = 10.0) -> None:
    """Wait until no name of the backend is marked down (a test may have marked one down)."""
    dispatcher = env.server.gateway.dispatcher
    deadline = time.monotonic() + within
    while any(dispatcher.is_down(name) for name in BACKENDS):
        assert time.monotonic() < deadline, "a backend is still marked down"
        time.sleep(0.02)


def _tokens_counted(env: Env) -> dict[str, float]:
    """``agentgate_gateway_tokens_total`` by kind, read from the gateway's ``/metrics``."""
    text = _http.get(env.server.url.removesuffix("/v1") + "/metrics", timeout=10).text
    found = re.findall(r'^agentgate_gateway_tokens_total\{kind="(\w+)"\} (\S+)$', text, re.MULTILINE)
    return {kind: float(value) for kind, value in found}


@pytest.mark.parametrize("mode", ["declared", "chunked"])
def test_an_answer_too_large_to_read_is_asked_once_and_charged_its_reservation(
    env: Env, oversized: Oversized, mode: str
) -> None:
    """Review R57, an answer over MAX_ANSWER_BYTES was a backend failure: retried, released, marked down.

    A caller controls its answer's size (many tokens, each with 20 log-probabilities): a 200
    answer over 64 MiB was a ``BackendFailed``, so the dispatcher sent the call to each of its
    three backends in turn (each generated it), marked each down for every other caller, and the
    gateway released the reservation: GPU work for nothing. The call is now asked once, no
    backend is marked down, it is answered 400 ``answer_too_large`` and charged its reservation.
    """
    _all_in_service(env)
    oversized.mode = mode
    oversized.asked = 0
    spent, count = env.spent(), len(env.outcomes())
    try:
        answer = env.post(_body())
    finally:
        oversized.mode = "ok"
    assert answer.status_code == 400, (answer.status_code, answer.text)
    error = answer.json()["error"]
    assert error["code"] == "answer_too_large" and "charged" in error["message"], error
    assert oversized.asked == 1, f"the call was sent {oversized.asked} times"
    dispatcher = env.server.gateway.dispatcher
    assert not any(dispatcher.is_down(name) for name in BACKENDS), "a backend was marked down"
    outcome = _settled(env, count + 1)[-1]
    assert outcome.status == "error" and "AnswerTooLarge" in " ".join(outcome.reasons), outcome
    assert env.spent() == spent + RESERVED
    assert env.held() == []


def test_a_stale_usage_is_not_counted_in_the_gateway_token_counter(env: Env, oversized: Oversized) -> None:
    """Review R57, the gateway's token counter added a usage that the budget did not charge.

    A stream whose usage came before more output is charged its reservation (the usage does not
    count that output), but ``agentgate_gateway_tokens_total`` added the stale usage all the
    same: it said 3 + 4 tokens for a call charged its reservation. It now counts a usage that
    covers the whole answer, and nothing for a stale one.
    """
    _all_in_service(env)
    stale = b'data: {"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":4}}\n\n'
    before = _tokens_counted(env)
    oversized.script = stale + _chunk("a") * 3 + b"data: [DONE]\n\n"
    oversized.mode = "script"
    spent = env.spent()
    try:
        answer = env.post(_body(stream=True))
    finally:
        oversized.mode = "ok"
    assert answer.status_code == 200 and answer.text.count('"content":"a"') == 3, answer.text
    assert _tokens_counted(env) == before
    assert env.spent() == spent + RESERVED
    # The rule's other side: a usage after the output is counted, as it is charged.
    oversized.script = _chunk("a") * 3 + stale + b"data: [DONE]\n\n"
    oversized.mode = "script"
    try:
        answer = env.post(_body(stream=True))
    finally:
        oversized.mode = "ok"
    assert answer.status_code == 200, answer.text
    after = _tokens_counted(env)
    assert (after["prompt"] - before.get("prompt", 0), after["completion"] - before.get("completion", 0)) == (
        3,
        4,
    )


def test_a_stream_over_its_answer_limit_after_output_is_charged_its_reservation(
    env: Env, oversized: Oversized
) -> None:
    """Pins (review R57): the streamed twin of an answer too large is already charged. A stream
    that passes ``MAX_CHARS_PER_TOKEN`` characters per token of ``max_tokens`` after output went
    out ends with an error event, charged its reservation (the backend ignored ``max_tokens``:
    no caller can ask for it, one choice per call, so it is the backend's failure), not retried."""
    _all_in_service(env)
    oversized.asked = 0
    oversized.script = _chunk("a") + _chunk("b" * (8 * 1024 + 1)) + b"data: [DONE]\n\n"
    oversized.mode = "script"
    spent, count = env.spent(), len(env.outcomes())
    try:
        answer = env.post(_body(stream=True))
    finally:
        oversized.mode = "ok"
    assert answer.status_code == 200, answer.text
    events = [line for line in answer.text.splitlines() if line.startswith("data: ")]
    assert '"backend_failed"' in events[-1] and "bbbb" not in answer.text, answer.text[-300:]
    assert oversized.asked == 1
    assert _settled(env, count + 1)[-1].status == "error"
    assert env.spent() == spent + RESERVED
    assert env.held() == []
