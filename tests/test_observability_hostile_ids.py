"""A call's ids as the caller passes them (``call_id``, ``run_id``) to ``Gate.authorize`` and
``Gate.run``/``arun``: anything but valid text is an ``InputError`` naming the parameter, before
anything is written or used up, never an exception from inside, an allow spent with no outcome, or
a value on a span that an exporter cannot send. Each test failed on the code before its fix."""

from __future__ import annotations

import pytest
import test_observability
from test_observability import Sweep

from agentgate.capabilities import Call
from agentgate.errors import InputError

sweep = test_observability.sweep  # the fixture, shared

@pytest.mark.parametrize("parameter", ["call_id", "run_id"])
@pytest.mark.parametrize("tool", ["lookup", "vault", "transfer"])
def test_authorize_refuses_an_id_that_is_not_valid_text_before_writing(
    sweep: Sweep, tool: str, parameter: str
) -> None:
    """Review R56: a call_id or run_id holding a lone surrogate made Gate.authorize of an allowed
    call raise UnicodeEncodeError (hashing the once-only key), a bare exception from inside."""
    call = {
        "lookup": Call.tool("lookup", {"id": "1"}),  # allowed
        "vault": Call.tool("vault", {"pin": "99"}),  # refused
        "transfer": Call.tool("transfer", {"to": "acct-7"}),  # approval required
    }[tool]
    before = sweep.gate.audit.size()
    spans = len(sweep.exporter.get_finished_spans())
    with pytest.raises(InputError, match=parameter):
        sweep.gate.authorize(sweep.boss, call, **{parameter: "id-\ud800"})
    sweep.gate.flush()
    assert sweep.gate.audit.size() == before
    assert len(sweep.exporter.get_finished_spans()) == spans
