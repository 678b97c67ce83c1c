"""A stream cut after output gives the same reason in process (a gated agent's
``DispatchedChatModel``) as at the gateway: ``BackendFailed`` and why (review R59).

Real HTTP on 127.0.0.1 to a raw backend that streams the bytes a test sets, then closes the
connection without ``[DONE]`` (``Scripted``, tests/test_gate_r57_stream_usage.py); the agent and
the gateway are those of tests/test_gateway_r58_cut_after_output.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from test_gate_r57_stream_usage import Scripted
from test_gate_r57_stream_usage import backend as backend  # the fixture
from test_gateway_end_to_end import _body
from test_gateway_hostile_backends import _chunk, _gateway, _settled
from test_gateway_r58_cut_after_output import CUT_AFTER, UNREAD, _agent_outcome

CUTS = {**CUT_AFTER, "text": _chunk("Let me")}


@pytest.mark.parametrize("output", sorted(CUTS))
def test_a_stream_cut_after_output_gives_the_same_reason_in_process_as_at_the_gateway(
    tmp_path: Path, backend: Scripted, output: str
) -> None:
    """Review R59, the first reason of a cut stream was ``BackendFailed`` alone in process.

    The gateway's outcome for a stream cut after output says why the backend failed
    (``BackendFailed: stream from ... broke after output: ...: stream ended without [DONE]``);
    the same stream through a gated agent was settled from the middleware's usage reader, which
    gave the class name only. Both now give the class name and the detail, charged alike."""
    backend.script = CUTS[output]
    status, reasons, charged = _agent_outcome(tmp_path / "agent", backend)
    assert (status, reasons[-1], charged) == ("error", UNREAD, True), reasons
    with _gateway(tmp_path / "gateway", backend) as env:
        env.post(_body(stream=True))
        at_gateway = _settled(env, 1)[-1]
    assert at_gateway.status == "error" and at_gateway.reasons[-1] == UNREAD
    assert reasons[0].startswith("BackendFailed: stream from raw broke after output: "), reasons
    # The same backend, named "raw" in the agent's inventory and "hostile" in the gateway's.
    assert reasons[0].replace("raw", "hostile") == at_gateway.reasons[0]
