"""A call's ids as the caller passes them (``call_id``, ``run_id``) to ``Gate.authorize`` and
``Gate.run``/``arun``: anything but valid text is an ``InputError`` naming the parameter, before
anything is written or used up, never an exception from inside, an allow spent with no outcome, or
a value on a span that an exporter cannot send. Each test failed on the code before its fix."""

from __future__ import annotations

import asyncio

import pytest
import test_observability
from test_observability import Sweep

from agentgate.capabilities import Call
from agentgate.errors import InputError

sweep = test_observability.sweep  # the fixture, shared

NOT_VALID_TEXT = [
    pytest.param("call-\ud800", id="lone-surrogate"),
    pytest.param(123, id="int"),
    pytest.param(b"call-1", id="bytes"),
]


def _tool_spans(sweep: Sweep) -> list[object]:
    return [s for s in sweep.exporter.get_finished_spans() if s.name == "execute_tool lookup"]


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


@pytest.mark.parametrize("parameter", ["call_id", "run_id"])
@pytest.mark.parametrize("value", NOT_VALID_TEXT)
@pytest.mark.parametrize("mode", ["sync", "async"])
def test_run_refuses_an_id_that_is_not_valid_text_before_using_the_allow(
    sweep: Sweep, value: object, parameter: str, mode: str
) -> None:
    """Review R56: Gate.run/arun took the allow before looking at call_id and run_id: a call_id
    of 123 raised TypeError out of the span's making, leaving the allow used up, its entry with
    no outcome and no span; bytes or a lone surrogate used it up too, recorded a bogus error
    outcome and put the value on the call's span, where OTLP cannot encode it."""
    auth = sweep.gate.authorize(sweep.boss, Call.tool("lookup", {"id": "1"}), call_id="c1")
    assert auth.allowed
    ran: list[str] = []

    def tool() -> str:
        ran.append("ran")
        return "found 1"

    async def atool() -> str:
        return tool()

    def run(**ids: object) -> str:
        if mode == "sync":
            return sweep.gate.run(auth, tool, **ids)  # type: ignore[arg-type]
        return asyncio.run(sweep.gate.arun(auth, atool, **ids))  # type: ignore[arg-type]

    with pytest.raises(InputError, match=parameter):
        run(**{parameter: value})
    assert ran == [] and _tool_spans(sweep) == []
    # The allow is left unused: the same call runs once with good ids, one span, one outcome.
    assert run(call_id="c1", run_id="r1") == "found 1"
    sweep.gate.flush()
    (span,) = _tool_spans(sweep)
    assert span.attributes["agentgate.audit.index"] == auth.audit_index  # type: ignore[attr-defined]
    assert span.attributes["agentgate.outcome"] == "ok"  # type: ignore[attr-defined]
    assert ran == ["ran"]
