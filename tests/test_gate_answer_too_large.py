"""What a ``Gate`` charges a model call whose backend answered more than is read
(``AnswerTooLarge``), through an attached dispatcher and a real backend on 127.0.0.1."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_gate_run import Setup
from test_gateway_hostile_backends import _head
from test_gateway_r57_charges import _PIECE, BACKENDS, Oversized

from agentgate import Call
from agentgate.dispatch import inventory_from_mapping
from agentgate.dispatch.backends import MAX_ANSWER_BYTES, Timeouts
from agentgate.dispatch.dispatcher import Dispatcher
from agentgate.dispatch.router import Router
from agentgate.errors import AnswerTooLarge

PAYLOAD = {"model": "small", "messages": [{"role": "user", "content": "hello"}], "max_tokens": 10}
RESERVED = 120
"""What the call below reserves: 100 prompt tokens at 1 and 10 output tokens at 2 micro-dollars."""


class Declared(Oversized):
    """A backend that, in mode ``sent``, answers a JSON call 200 with a ``Content-Length`` over
    ``MAX_ANSWER_BYTES`` and sends that body, while the client reads. (Every client path refuses
    the declared length before any body: since review R58 the dispatcher's own too.)"""

    async def _answer(self, w: asyncio.StreamWriter, r: asyncio.StreamReader, stream: bool) -> bool:
        if self.mode != "sent" or stream:
            return await super()._answer(w, r, stream)
        self.asked += 1
        w.write(
            _head("200 OK", {"content-type": "application/json", "content-length": str(MAX_ANSWER_BYTES + 1)})
        )
        with contextlib.suppress(ConnectionError):
            for _ in range(MAX_ANSWER_BYTES // len(_PIECE)):
                w.write(_PIECE)
                await w.drain()
            w.write(b"x")
            await w.drain()
        return False


@pytest.fixture
def oversized() -> Iterator[Declared]:
    backend = Declared()
    backend.mode = "sent"
    yield backend
    backend.close()


@pytest.fixture
def setup(tmp_path: Path, oversized: Declared) -> Iterator[Setup]:
    made = Setup(tmp_path)
    inventory = inventory_from_mapping(
        {
            "backends": [
                {"name": name, "url": oversized.url, "engine": "vllm", "models": ["small"]}
                for name in BACKENDS
            ]
        }
    )
    made.gate.attach_dispatcher(
        Dispatcher(inventory, Router(inventory), timeouts=Timeouts(connect_s=5, first_token_s=30))
    )
    yield made
    made.gate.close()


@pytest.mark.parametrize("way", ["run", "arun"])
def test_a_model_call_whose_answer_is_too_large_is_charged_its_reservation(
    setup: Setup, oversized: Declared, way: str
) -> None:
    """Review R57, an AnswerTooLarge model call was released in process: each one a free generation.

    A backend that answers 200 with a body over ``MAX_ANSWER_BYTES`` (a call asking for many
    tokens with their log-probabilities) generated what the call asked for; the gateway charges
    such a call its reservation, but ``Gate.run``/``arun`` of ``dispatch``/``adispatch`` settled
    it as any error, released. It is now charged as reserved, its outcome saying so, sent once.
    """
    gate = setup.gate
    auth = gate.authorize(setup.agent, Call.model("small"), tokens=(100, 10))
    assert [amount for _, _, amount in auth.reservations] == [RESERVED]
    with pytest.raises(AnswerTooLarge):
        if way == "run":
            gate.run(auth, lambda: gate.dispatch(PAYLOAD))
        else:
            asyncio.run(gate.arun(auth, lambda: gate.adispatch(PAYLOAD)))
    assert oversized.asked == 1
    assert setup.spent() == RESERVED
    settled = [gate.ledger.reservation(reservation) for reservation, _, _ in auth.reservations]
    assert [(r.state, r.actual) for r in settled] == [("committed", RESERVED)]
    (outcome,) = [e for e in setup.entries() if e.kind == "outcome"]
    assert outcome.status == "error"
    assert outcome.reasons[0] == "AnswerTooLarge"
    assert "charged as reserved" in outcome.reasons[1], outcome.reasons
