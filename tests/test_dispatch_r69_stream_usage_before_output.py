"""Review R69: a stream whose usage cannot be read arrives before any output.

R68 made a whole answer with a usage that is not token counts ``UsageUnreadable``: the call ran,
so it is sent to no other backend and charged its reservation. A stream whose garbage usage came
before any output (an answer of no text: the role, a finish reason, then the usage) was still a
plain ``BackendFailed`` before output: the dispatcher sent the call to the next backend, which ran
it again (every backend of the model, ``max_attempts`` in all), and through ``Gate.run`` the
reservation was released, nothing charged for any run. Now it is ``UsageUnreadable`` as a whole
answer's is. Real HTTP on 127.0.0.1, real Gate, real SQLite store.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_dispatch_r61_backend_garbage import BAD_USAGE, PAYLOAD, TIMEOUTS, Garbage, _usage_event
from test_gate_run import Setup
from test_gateway_end_to_end import _body
from test_gateway_hostile_backends import _SSE, _gateway

from agentgate.capabilities import Call
from agentgate.dispatch import inventory_from_mapping
from agentgate.dispatch.dispatcher import Dispatcher
from agentgate.dispatch.inventory import Inventory
from agentgate.dispatch.router import Router
from agentgate.errors import UsageUnreadable


def _event(delta: dict[str, str], finish: str | None = None) -> bytes:
    event = {"id": "c", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
    return b"data: " + json.dumps(event).encode() + b"\n\n"


def _no_output_then(usage: object) -> bytes:
    """A stream of no output (the role, then a finish reason) whose usage is ``usage``."""
    return (
        _SSE + _event({"role": "assistant"}) + _event({}, "stop") + _usage_event(usage) + b"data: [DONE]\n\n"
    )


@pytest.fixture(params=range(len(BAD_USAGE)), ids=["negative", "2_70", "text"])
def backends(request: pytest.FixtureRequest) -> Iterator[list[Garbage]]:
    made = [Garbage(), Garbage()]
    for backend in made:
        backend.reply = _no_output_then(BAD_USAGE[request.param])
    yield made
    for backend in made:
        backend.close()


def _inventory(backends: list[Garbage]) -> Inventory:
    served = [
        {"name": f"b{n}", "url": b.url, "engine": "vllm", "models": ["small"]} for n, b in enumerate(backends)
    ]
    return inventory_from_mapping({"backends": served})


async def test_a_stream_with_garbage_usage_before_output_is_not_sent_to_another_backend(
    backends: list[Garbage],
) -> None:
    """Review R69: before, the call failed over (both backends ran it, ``BackendFailed`` after
    every attempt); now the one that ran it is marked down and ``UsageUnreadable`` says why."""
    inventory = _inventory(backends)
    quiet = {"scrape_interval_s": 60.0, "health_interval_s": 60.0}
    async with Dispatcher(inventory, Router(inventory), timeouts=TIMEOUTS, **quiet) as dispatcher:
        with pytest.raises(UsageUnreadable, match="malformed stream event: usage"):
            async for _ in dispatcher.stream({**PAYLOAD, "stream": True}):
                pass
        assert sum(b.asked for b in backends) == 1
        assert dispatcher.is_down("b0" if backends[0].asked else "b1")


def test_a_gated_stream_with_garbage_usage_before_output_is_charged_as_reserved(
    tmp_path: Path, backends: list[Garbage]
) -> None:
    """Review R69: through ``Gate.run`` of ``Gate.dispatch_stream`` the reservation was released
    (each backend ran the call, none of it charged); now it is committed as reserved."""
    setup = Setup(tmp_path)
    try:
        inventory = _inventory(backends)
        setup.gate.attach_dispatcher(Dispatcher(inventory, Router(inventory), timeouts=TIMEOUTS))
        auth = setup.gate.authorize(setup.agent, Call.model("small"), tokens=(100, 10))
        with pytest.raises(UsageUnreadable):
            setup.gate.run(auth, lambda: list(setup.gate.dispatch_stream({**PAYLOAD, "stream": True})))
        setup.gate.flush()
        assert sum(b.asked for b in backends) == 1
        settled = [setup.gate.ledger.reservation(r) for r, _, _ in auth.reservations]
        assert [(r.state, r.actual) for r in settled] == [
            ("committed", amount) for _, _, amount in auth.reservations
        ]
    finally:
        setup.gate.close()


def test_the_gateway_charges_such_a_stream_its_reservation(tmp_path: Path) -> None:
    """Review R69: the gateway's streamed call failed over on such a stream (502 "nothing was
    charged" once the attempts ran out); now the one backend that ran it is charged for, 502
    saying the call was charged its reservation."""
    backend = Garbage()
    backend.reply = _no_output_then(BAD_USAGE[0])
    try:
        with _gateway(tmp_path, backend) as env:
            before = env.spent()
            answer = env.post(_body(stream=True))
            assert answer.status_code == 502, answer.text
            assert "charged its reservation" in answer.json()["error"]["message"]
            assert backend.asked == 1
            [allow] = [
                e for e in env.gate.audit.entries() if e.kind == "allow" and e.resource.startswith("model:")
            ]
            assert env.spent() - before == allow.budget_delta > 0
            assert env.held() == []
    finally:
        backend.close()
