"""A streamed call whose usage is stale (followed by more output) or missing gets one outcome reason,
in process (a gated agent's ``DispatchedChatModel``) and through the gateway (review R58).

Real HTTP on 127.0.0.1 to a raw backend that streams the bytes a test sets (``Scripted``,
tests/test_gate_r57_stream_usage.py), once behind a gated agent and once behind a gateway.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from test_gate_r57_stream_usage import DONE, STALE, Scripted, _agent_spends
from test_gateway_end_to_end import _body
from test_gateway_hostile_backends import _chunk, _gateway, _settled

UNREAD = "the call ran but its usage could not be read; charged as reserved"
NONE_REPORTED = "no usage was reported; charged as reserved"


@pytest.fixture
def backend() -> Iterator[Scripted]:
    made = Scripted()
    made.mode = "script"
    yield made
    made.close()


def _gateway_reasons(tmp_path: Path, backend: Scripted, script: bytes) -> tuple[str, list[str]]:
    """The status and reasons of the outcome of one streamed call through a gateway to ``script``."""
    backend.script = script
    with _gateway(tmp_path, backend) as env:
        answer = env.post(_body(stream=True))
        assert answer.status_code == 200 and answer.text.count('"content":"a"') == 5, answer.text
        outcome = _settled(env, 1)[-1]
    return outcome.status, list(outcome.reasons)


def _agent_reasons(tmp_path: Path, backend: Scripted, script: bytes) -> list[str]:
    """The reasons of the outcome of a gated agent's one model call streaming ``script``."""
    return _agent_spends(tmp_path, backend, script)[1]


def test_a_stale_streamed_usage_has_the_gateways_reason_in_process(tmp_path: Path, backend: Scripted) -> None:
    """Review R58, a stream whose usage was followed by more output was audited "no usage was
    reported" in process, where the gateway audits the same stream "its usage could not be read"
    (the same charge: the reservation). The backend did report a usage; both now say the latter."""
    script = STALE["zero_usage_first"]
    in_process = _agent_reasons(tmp_path / "agent", backend, script)
    at_gateway = _gateway_reasons(tmp_path / "gateway", backend, script)
    assert at_gateway == ("ok", [UNREAD])
    assert in_process == [UNREAD]


def test_a_stream_without_usage_has_one_reason_on_both_paths(tmp_path: Path, backend: Scripted) -> None:
    """The rule's other side: a stream that reported no usage at all says so on both paths."""
    script = _chunk("a") * 5 + DONE
    in_process = _agent_reasons(tmp_path / "agent", backend, script)
    at_gateway = _gateway_reasons(tmp_path / "gateway", backend, script)
    assert at_gateway == ("ok", [NONE_REPORTED])
    assert in_process == [NONE_REPORTED]
