"""Review R71 of r71-stream's change (772d916e): what the gateway's token counter counts of a
stream, against what the ``Gate`` charges it.

Real HTTP on 127.0.0.1 (a raw asyncio backend, an httpx caller), real Gate, real SQLite store,
the gateway's own registry.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import _http
from test_dispatch_r70_stream_charged import _tokens, _usage
from test_gateway import MODEL, NAMES, _policy_text
from test_gateway_end_to_end import _body
from test_gateway_hostile_backends import _SSE, Env, Hostile, _chunk

from agentgate.dispatch import inventory_from_mapping
from agentgate.dispatch.backends import Timeouts
from agentgate.dispatch.gateway import Gateway, GatewayGate, GatewayServer, invocation_headers
from agentgate.keys import SigningKey
from agentgate.policy import parse_policy
from agentgate.store import SQLiteStore


class _HeldAfterUsage(Hostile):
    """A backend that streams two chunks and a usage covering them (5 prompt, 2 completion
    tokens), then holds the stream open, no ``[DONE]``, until the gateway closes it (``cut``)."""

    def __init__(self) -> None:
        super().__init__()
        self.cut = threading.Event()

    async def _answer(self, w: asyncio.StreamWriter, r: asyncio.StreamReader, stream: bool) -> bool:
        w.write(_SSE + _chunk("h") + _chunk("i") + _usage(5, 2))
        await w.drain()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(r.read(), 60)
        self.cut.set()
        return False


@contextlib.contextmanager
def _patient_gateway(tmp_path: Path, backend: Hostile) -> Iterator[Env]:
    """``test_gateway_hostile_backends._gateway`` with a backend idle limit of a minute: the
    stream held open ends by the caller leaving, never by the backend timing out."""
    keys = {name: SigningKey.generate() for name in NAMES}
    text = _policy_text({n: k.did for n, k in keys.items()})
    gate = GatewayGate(parse_policy(text, source="gateway.yaml"), SQLiteStore(tmp_path / "agentgate.db"))
    inventory = inventory_from_mapping(
        {"backends": [{"name": "held", "url": backend.url, "engine": "vllm", "models": [MODEL]}]}
    )
    timeouts = Timeouts(connect_s=1.0, first_token_s=60.0, idle_s=60.0, probe_s=0.5)
    server = GatewayServer(Gateway(gate, inventory, timeouts=timeouts), port=0).start()
    agent = gate.issue(keys["root"], name="agent", key=keys["agent"], role="chat")
    try:
        yield Env(gate, server, agent, backend, keys["root"], keys["poor"])
    finally:
        server.stop()
        gate.close()


def test_a_caller_gone_after_the_usage_event_counts_the_tokens_it_is_charged(tmp_path: Path) -> None:
    """Review R71: a caller that hangs up after the usage event (one covering the output) but
    before ``[DONE]`` is charged that usage (``GatewayGate._pump`` settles the cut call with
    it), but ``agentgate_gateway_tokens_total`` counted nothing: the counter was counted by
    ``Gateway._events``, which a caller's leaving closes before its end. It counts them, once."""
    backend = _HeldAfterUsage()
    try:
        with _patient_gateway(tmp_path, backend) as env:
            before, counted, settled = env.spent(), _tokens(env), len(env.outcomes())
            body = _body(stream=True, stream_options={"include_usage": True})
            headers = invocation_headers(env.agent.key, env.agent.chain, body)
            with _http.stream("POST", env.url, json=body, headers=headers, timeout=20) as answer:
                assert answer.status_code == 200
                assert any('"usage"' in line for line in answer.iter_lines())  # then hang up
            assert backend.cut.wait(10), "the backend request was not cut"
            deadline = time.monotonic() + 10
            while len(outcomes := env.outcomes()) == settled:
                assert time.monotonic() < deadline, "the call was not settled"
                time.sleep(0.02)
            assert outcomes[-1].status == "error" and "CallerGone" in outcomes[-1].reasons, outcomes[-1]
            assert env.spent() - before == 5 + 2  # charged the usage, not its reservation
            assert _tokens(env) == (counted[0] + 5, counted[1] + 2)
    finally:
        backend.close()
