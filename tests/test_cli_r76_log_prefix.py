"""Review R76: a log record of agentgate's that a command says as its warning is said once with the
command's prefix, not twice. The library's records begin ``agentgate: `` (so that a program's log
tells them apart: the Gate's "agentgate: audit entry 3: ...", the spans' "agentgate: span ...
was not started"), and the command said them as ``agentgate: warning: agentgate: audit entry
3: ...``. A record without that prefix is said as it was, and one whose text only contains it
keeps it.
"""

from __future__ import annotations

import logging

import pytest

from agentgate.cli import _warnings


@pytest.mark.parametrize(
    ("logged", "said"),
    [
        (
            "agentgate: audit entry 3: the backend reported no usage",
            "audit entry 3: the backend reported no usage",
        ),
        ("agentgate:  span 'x' was not started", "span 'x' was not started"),
        ("a protection trigger was put back", "a protection trigger was put back"),
        ("the key agentgate: is odd", "the key agentgate: is odd"),
        ("agentgate gateway: a stream was cut", "agentgate gateway: a stream was cut"),
    ],
)
def test_a_record_said_as_a_warning_carries_one_agentgate_prefix(logged: str, said: str) -> None:
    with _warnings.running(), _warnings.log_records_said(True):
        logging.getLogger("agentgate.gate._costs").warning("%s", logged)
        assert _warnings.said(last=True) == [f"agentgate: warning: {said}\n"]
