"""Observability defects fixed in the Gate and the LangGraph middleware: delegation
spans, approval and outcome spans, lease spans, pauses, tool names that are no resource names,
and refusals raised as ``Denied`` without the values the policy keeps out of logs. Each test
failed on the code before its fix."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import test_observability
from langchain_core.messages import AIMessage, ToolMessage
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import StatusCode
from test_gate_run import closing_while_running
from test_observability import Sweep, _calls

from agentgate.capabilities import Call
from agentgate.errors import Denied, InputError, SchedulingError, ScopeCreep
from agentgate.gate import Approval
from agentgate.integrations.langgraph import ScriptedChatModel, create_gated_agent, delegation_tool
from agentgate.keys import SigningKey

scripted = test_observability.scripted  # the fixtures, shared
sweep = test_observability.sweep


def _ancestors(span: ReadableSpan, spans: list[ReadableSpan]) -> list[str]:
    by_id = {s.context.span_id: s for s in spans}
    names, parent = [], span.parent
    while parent is not None and parent.span_id in by_id:
        names.append(by_id[parent.span_id].name)
        parent = by_id[parent.span_id].parent
    return names


def _team(sweep: Sweep) -> Any:
    tools = sweep.tools()
    helper = create_gated_agent(
        sweep.gate,
        name="helper",
        model=ScriptedChatModel(turns=[_calls(("lookup", {"id": "h"})), AIMessage(content="helped")]),
        tools=tools[:1],
    )
    ask = delegation_tool(
        sweep.gate,
        name="helper",
        agent=helper,
        key=sweep.keys["helper"],
        capabilities=["tool:lookup", "model:scripted"],
        ttl=timedelta(minutes=5),
    )
    model = ScriptedChatModel(turns=[_calls(("ask_helper", {"task": "help"})), AIMessage(content="done")])
    return create_gated_agent(sweep.gate, name="boss", model=model, tools=[*tools, ask])


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_sub_agents_calls_are_under_the_supervisors_delegation_span(sweep: Sweep, mode: str) -> None:
    """A delegation (the supervisor's ``ask_helper`` call) has no span at all, and the sub-agent's
    model and tool calls are siblings of the supervisor's: a trace cannot tell who called what."""
    boss = _team(sweep)
    start = {"messages": [{"role": "user", "content": "go"}]}
    if mode == "sync":
        boss.invoke(start, context=sweep.boss)
    else:
        asyncio.run(boss.ainvoke(start, context=sweep.boss))
    spans = list(sweep.exporter.get_finished_spans())
    names = [s.name for s in spans]
    assert "execute_tool ask_helper" in names, names
    helper_lookup = next(s for s in spans if s.name == "execute_tool lookup")
    assert "execute_tool ask_helper" in _ancestors(helper_lookup, spans)


def test_an_approval_request_is_a_span_too(sweep: Sweep) -> None:
    """Every decision has a span: allow (UNSET), deny (ERROR) - and approval_required had none, so
    a trace showed nothing of a call waiting for a human."""
    asked = sweep.gate.authorize(sweep.boss, Call.tool("transfer", {"to": "acct-7"}), call_id="t1")
    assert asked.needs_approval
    spans = [s for s in sweep.exporter.get_finished_spans() if s.name == "execute_tool transfer"]
    assert len(spans) == 1
    assert spans[0].attributes is not None
    assert spans[0].attributes["agentgate.decision"] == "approval_required"
    assert spans[0].attributes["agentgate.audit.index"] == asked.audit_index


def test_a_call_whose_outcome_is_an_error_has_an_error_span(sweep: Sweep) -> None:
    """A call that ran and failed by its result (``failed``: a LangGraph tool answering an error
    ToolMessage) is audited as an ``error`` outcome, but its span stayed UNSET with no error.type."""
    auth = sweep.gate.authorize(sweep.boss, Call.tool("lookup", {"id": "1"}), call_id="c1")
    sweep.gate.run(auth, lambda: "no such id", call_id="c1", failed=lambda _: True)
    sweep.gate.flush()  # a call's span ends once its outcome is written (review R69)
    (span,) = [s for s in sweep.exporter.get_finished_spans() if s.name == "execute_tool lookup"]
    assert span.status.status_code == StatusCode.ERROR
    assert span.attributes is not None and "error.type" in span.attributes


def test_a_tool_name_that_is_not_a_resource_name_is_a_tool_error_not_a_crash(sweep: Sweep) -> None:
    """A model naming a tool that cannot be a resource name (too long, spaces, capitals) ended the
    whole agent run with a CapabilityError raised out of ``invoke``; LangGraph alone answers an
    unknown tool with an error ToolMessage, and so should the gated agent."""
    model = ScriptedChatModel(
        turns=[_calls(("Lookup Everything " + "x" * 300, {"id": "1"})), AIMessage(content="done")]
    )
    agent = create_gated_agent(sweep.gate, name="boss", model=model, tools=sweep.tools())
    result = agent.invoke({"messages": [{"role": "user", "content": "go"}]}, context=sweep.boss)
    (message,) = [m for m in result["messages"] if isinstance(m, ToolMessage)]
    assert message.status == "error"


def test_a_refusal_raised_as_denied_does_not_carry_a_non_loggable_argument(sweep: Sweep) -> None:
    """``Denied`` (``Gate.run`` of a refusal; the middleware with ``enforce=True``) carried
    ``Authorization.explain()``, which quotes the refused argument values: the exception reaches
    the application's logs and error reports, where a value the policy keeps out of the audit log
    and the spans (``pin``) landed in clear. The model may be told its own argument; a log may not."""
    from agentgate.errors import Denied

    refused = sweep.gate.authorize(sweep.boss, Call.tool("vault", {"pin": "99-CANARY-PIN"}))
    with pytest.raises(Denied) as raised:
        sweep.gate.run(refused, lambda: "open")
    assert "pin" in str(raised.value) and "CANARY-PIN" not in str(raised.value)
    model = ScriptedChatModel(turns=[_calls(("vault", {"pin": "99-CANARY-PIN"}))])
    agent = create_gated_agent(sweep.gate, name="boss", model=model, tools=sweep.tools(), enforce=True)
    with pytest.raises(Denied) as enforced:
        agent.invoke({"messages": [{"role": "user", "content": "go"}]}, context=sweep.boss)
    assert "CANARY-PIN" not in str(enforced.value)


def test_a_gpu_lease_decision_is_not_exported_as_a_chat_model_call(tmp_path: Path) -> None:
    """Gate._open_span opened ``chat {name}`` (CLIENT, gen_ai.operation.name=chat,
    gen_ai.request.model=h100) for every resource that is not a tool: a refused GPU lease of the
    GatedBroker showed in GenAI dashboards as a model call to a model named 'h100'."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from test_broker_gated import Setup

    from agentgate.dispatch.broker import GangRequest

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    made = Setup(tmp_path)
    made.gate.tracer = provider.get_tracer("r9")
    made.gate._global_tracer = False
    try:
        refused = made.gated.submit(made.ids["chat"], GangRequest("x", "team-a", 4, 0, gpu_type="H100"))
        assert not refused.allowed
    finally:
        made.gate.close()
    (span,) = exporter.get_finished_spans()
    assert span.attributes is not None
    assert span.attributes.get("gen_ai.operation.name") != "chat" and not span.name.startswith("chat ")


def test_a_paused_call_is_not_an_error_span(sweep: Sweep) -> None:
    """A tool that pauses (LangGraph's interrupt() raises GraphInterrupt through ``Gate.run``,
    ``paused=`` says so) is audited ``paused``, but its span was ERROR with
    error.type=GraphInterrupt: every human-in-the-loop pause showed as a failed tool call."""

    class Interrupt(Exception):
        pass

    auth = sweep.gate.authorize(sweep.boss, Call.tool("lookup", {"id": "1"}), call_id="p1")
    with pytest.raises(Interrupt):
        sweep.gate.run(auth, lambda: (_ for _ in ()).throw(Interrupt()), call_id="p1", paused=lambda e: True)
    sweep.gate.flush()  # a call's span ends once its outcome is written (review R69)
    (span,) = [s for s in sweep.exporter.get_finished_spans() if s.name == "execute_tool lookup"]
    assert span.status.status_code == StatusCode.UNSET
    assert span.attributes is not None and span.attributes.get("agentgate.outcome") == "paused"


def test_a_refused_tool_calls_span_carries_its_tool_call_id(sweep: Sweep) -> None:
    """A refusal could not be matched to the model's tool call in a trace: its span had no
    ``gen_ai.tool.call.id``, though ``authorize`` was given one."""
    refused = sweep.gate.authorize(sweep.boss, Call.tool("vault", {"pin": "99"}), call_id="call-7")
    assert not refused.allowed
    (span,) = [s for s in sweep.exporter.get_finished_spans() if s.name == "execute_tool vault"]
    assert span.attributes is not None and span.attributes["gen_ai.tool.call.id"] == "call-7"


def test_the_gates_schedulers_export_to_one_registry_it_exposes(sweep: Sweep) -> None:
    """Each scheduler the Gate made had a private registry nobody could reach: the Gate's
    metrics could not be scraped. Sync and async calls now count in ``Gate.registry``."""
    tool = Call.tool("lookup", {"id": "1"})
    auth = sweep.gate.authorize(sweep.boss, tool, call_id="s1")
    sweep.gate.run(auth, lambda: "found", call_id="s1", run_id="r")

    async def async_call() -> None:
        auth = sweep.gate.authorize(sweep.boss, tool, call_id="a1")

        async def found() -> str:
            return "found"

        await sweep.gate.arun(auth, found, call_id="a1", run_id="r")

    asyncio.run(async_call())
    started = sweep.gate.registry.get_sample_value(
        "agentgate_tasks_events_total", {"event": "started", "tool": "lookup"}
    )
    assert started == 2


def test_a_tools_exception_text_is_not_kept_in_its_dead_letter(sweep: Sweep, tmp_path: Path) -> None:
    """Spans, ToolMessages and audit outcomes name a failing tool's exception by its type only (its
    text may quote arguments or the environment), but the dead letter the Gate persists kept the
    text (``AttemptError.message``), and ``agentgate tasks dead-letters`` printed it."""
    import subprocess
    import sys

    auth = sweep.gate.authorize(
        sweep.boss, Call.tool("explode", {"password": "CANARY-PASSWORD"}), call_id="x"
    )

    def explode() -> str:
        raise RuntimeError("login failed with CANARY-PASSWORD")

    with pytest.raises(RuntimeError):
        sweep.gate.run(auth, explode, call_id="x")
    sweep.gate.close()
    url = f"sqlite:///{tmp_path / 'agentgate.db'}"
    shown = subprocess.run(
        [sys.executable, "-m", "agentgate.cli.main", "tasks", "dead-letters", "--json", "--store", url],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert shown.returncode == 0, shown.stderr
    assert "RuntimeError" in shown.stdout
    assert "CANARY-PASSWORD" not in shown.stdout


def _grant_spans(sweep: Sweep) -> list[ReadableSpan]:
    return [s for s in sweep.exporter.get_finished_spans() if " agent:" in s.name]


def test_a_grant_made_or_refused_directly_is_a_span_linked_to_its_entry(sweep: Sweep) -> None:
    """``Gate.issue`` and ``Gate.delegate`` audited each grant and each refusal to make one, but
    made no span: a trace showed nothing of who handed authority to whom, nor of a refused
    delegation (ScopeCreep) or an issue by a key that is no trust anchor."""
    gate, keys = sweep.gate, sweep.keys
    helper = gate.delegate(
        sweep.boss, name="helper", key=keys["helper"], capabilities=["tool:lookup"], ttl=timedelta(minutes=5)
    )
    with pytest.raises(ScopeCreep) as creep:
        gate.delegate(
            sweep.boss,
            name="helper",
            key=keys["helper"],
            capabilities=["tool:vault"],
            ttl=timedelta(minutes=5),
        )
    with pytest.raises(Denied) as untrusted:
        gate.issue(SigningKey.generate(), name="rogue", key=keys["helper"], role="helper")
    with pytest.raises(Denied) as nobody:
        gate.delegate(
            None, name="orphan", key=keys["helper"], capabilities=["tool:lookup"], ttl=timedelta(minutes=5)
        )
    issued, made, scoped, rogue, orphan = _grant_spans(sweep)
    entries = list(gate.audit.entries())
    for span, index, decision in (
        (issued, sweep.boss.audit_index, "allow"),
        (made, helper.audit_index, "allow"),
        (scoped, creep.value.audit_index, "deny"),
        (rogue, untrusted.value.audit_index, "deny"),
        (orphan, nobody.value.audit_index, "deny"),
    ):
        attributes = dict(span.attributes or {})
        assert index is not None and attributes["agentgate.audit.index"] == index, span.name
        entry = entries[index]
        assert attributes["agentgate.decision"] == entry.kind == decision
        assert attributes["agentgate.resource"] == entry.resource and span.name.endswith(str(entry.resource))
        assert attributes["agentgate.grant.issuer"] == entry.principal
        if decision == "deny":
            assert (
                span.status.status_code == StatusCode.ERROR and attributes["error.type"] == "agentgate.denied"
            )
        else:
            assert span.status.status_code == StatusCode.UNSET
    assert issued.name == "issue agent:boss" and made.name == "delegate agent:helper"
    assert dict(issued.attributes or {})["agentgate.capability.id"] == sweep.boss.grant_id
    assert dict(issued.attributes or {})["agentgate.grant.audience"] == keys["boss"].did
    made_attributes = dict(made.attributes or {})
    assert made_attributes["agentgate.capability.id"] == helper.grant_id
    assert (
        made_attributes["agentgate.grant.parent"]
        == sweep.boss.grant_id
        == entries[helper.audit_index or 0].chain_hash
    )
    assert made_attributes["agentgate.grant.audience"] == keys["helper"].did
    assert made_attributes["agentgate.grant.resources"] == ("tool:lookup",)
    assert dict(scoped.attributes or {})["agentgate.grant.resources"] == ("tool:vault",)
    exported = test_observability._span_bytes(sweep.exporter)
    assert helper.chain.token not in exported and sweep.boss.chain.token not in exported


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_delegation_tools_grant_span_is_a_child_of_its_tool_span(sweep: Sweep, mode: str) -> None:
    """Under LangGraph the grant's span is the one ``Gate.delegate`` makes, under the supervisor's
    ``execute_tool ask_helper`` span (async: on the worker thread the decision runs on), before
    the sub-agent's run. The decision and its entry are on the grant's span alone (review R54:
    the tool's span carried them too, one decision on two spans)."""
    start = {"messages": [{"role": "user", "content": "go"}]}
    if mode == "sync":
        _team(sweep).invoke(start, context=sweep.boss)
    else:
        asyncio.run(_team(sweep).ainvoke(start, context=sweep.boss))
    spans = list(sweep.exporter.get_finished_spans())
    (made,) = [s for s in spans if s.name == "delegate agent:helper"]
    assert _ancestors(made, spans)[0] == "execute_tool ask_helper"
    (run,) = [s for s in spans if s.name == "invoke_agent helper"]
    assert _ancestors(run, spans)[0] == "execute_tool ask_helper"  # after the grant, not in it
    (ask,) = [s for s in spans if s.name == "execute_tool ask_helper"]
    assert "agentgate.audit.index" in dict(made.attributes or {})
    assert not {"agentgate.decision", "agentgate.audit.index"} & set(ask.attributes or {})


def test_an_allowed_call_that_never_runs_has_its_span_with_its_outcome(sweep: Sweep) -> None:
    """An allow ended by ``Gate.abandon``, or refused at run time because the gate is closing, has
    an ``error`` outcome in the audit log but had no span (a call's span was made as it ran)."""
    gate = sweep.gate
    dropped = gate.authorize(sweep.boss, Call.tool("lookup", {"id": "1"}), call_id="d1")
    gate.abandon(dropped)
    first = gate.authorize(sweep.boss, Call.tool("lookup", {"id": "2"}), call_id="d2")
    late = gate.authorize(sweep.boss, Call.model("scripted", {}), tokens=(10, 10))
    with closing_while_running(gate, first, call_id="d2"), pytest.raises(SchedulingError):
        gate.run(late, lambda: "late")
    by_index = {
        dict(s.attributes or {}).get("agentgate.audit.index"): s for s in sweep.exporter.get_finished_spans()
    }
    for auth, name, error in (
        (dropped, "execute_tool lookup", "CancelledError"),
        (late, "chat scripted", "SchedulingError"),
    ):
        span = by_index[auth.audit_index]
        attributes = dict(span.attributes or {})
        assert span.name == name and attributes["agentgate.decision"] == "allow"
        assert attributes["agentgate.outcome"] == "error" and attributes["error.type"] == error
        assert span.status.status_code == StatusCode.ERROR


def test_a_grant_handed_on_again_is_a_span_without_an_entry_of_its_own(sweep: Sweep) -> None:
    """``Gate.delegate(call=...)`` hands the grant made for the same call on again, unaudited: its
    span names the same grant and links no entry (the grant's is the one recorded when made)."""
    asked: dict[str, Any] = {"name": "helper", "key": sweep.keys["helper"], "ttl": timedelta(minutes=5)}
    first = sweep.gate.delegate(sweep.boss, capabilities=["tool:lookup"], call="t|1", **asked)
    again = sweep.gate.delegate(sweep.boss, capabilities=["tool:lookup"], call="t|1", **asked)
    assert again.grant_id == first.grant_id and again.audit_index is None
    made, handed = (dict(s.attributes or {}) for s in _grant_spans(sweep)[1:])
    assert made["agentgate.audit.index"] == first.audit_index and "agentgate.audit.index" not in handed
    assert made["agentgate.capability.id"] == handed["agentgate.capability.id"] == first.grant_id
    assert handed["agentgate.decision"] == "allow"


def test_a_run_refused_after_close_returned_says_its_outcome_is_lost(sweep: Sweep) -> None:
    """Review R54: a run refused after ``Gate.close()`` returned had a span saying outcome
    ``error``, like a call that ran and failed, though no outcome entry was written (logged as
    lost): the span now says ``agentgate.outcome.lost``. One refused while the gate was still
    closing (its outcome written) does not."""
    gate = sweep.gate
    first = gate.authorize(sweep.boss, Call.tool("lookup", {"id": "1"}), call_id="c1")
    closing = gate.authorize(sweep.boss, Call.tool("lookup", {"id": "2"}), call_id="c2")
    late = gate.authorize(sweep.boss, Call.tool("lookup", {"id": "3"}), call_id="c3")
    with closing_while_running(gate, first, call_id="c1"), pytest.raises(SchedulingError):
        gate.run(closing, lambda: "never")
    with pytest.raises(SchedulingError):
        gate.run(late, lambda: "never")
    by_index = {
        dict(s.attributes or {}).get("agentgate.audit.index"): dict(s.attributes or {})
        for s in sweep.exporter.get_finished_spans()
    }
    assert by_index[late.audit_index]["agentgate.outcome.lost"] is True
    assert "agentgate.outcome.lost" not in by_index[closing.audit_index]
    assert "agentgate.outcome.lost" not in by_index[first.audit_index]


def test_a_call_still_running_when_close_returned_says_its_outcome_is_lost(sweep: Sweep) -> None:
    """Review R54: a call that settles after ``Gate.close()`` returned (close stopped waiting for
    it) has no outcome entry (logged as lost), yet its span said ``agentgate.outcome=ok`` as if
    it were recorded: it now says ``agentgate.outcome.lost`` too, and (review R69) ERROR and no
    ``agentgate.outcome``: a span says an outcome only once the log holds it."""
    gate = sweep.gate
    auth = gate.authorize(sweep.boss, Call.tool("lookup", {"id": "1"}), call_id="r1")

    async def main() -> str:
        started, release = asyncio.Event(), asyncio.Event()

        async def tool() -> str:
            started.set()
            await release.wait()
            return "done"

        task = asyncio.create_task(gate.arun(auth, tool))
        await started.wait()
        gate.close(timeout_s=0.0)  # from the loop's own thread: it cannot wait for the call
        release.set()
        return await task

    assert asyncio.run(main()) == "done"
    (span,) = [
        s
        for s in sweep.exporter.get_finished_spans()
        if dict(s.attributes or {}).get("agentgate.audit.index") == auth.audit_index
    ]
    attributes = dict(span.attributes or {})
    assert "agentgate.outcome" not in attributes and attributes["agentgate.outcome.lost"] is True
    assert attributes["error.type"] == "agentgate.outcome_lost"
    assert span.status.status_code == StatusCode.ERROR


def test_a_revocation_is_a_span_linking_its_revoke_entry(sweep: Sweep) -> None:
    """Review R54: a revocation (``Gate.revoke``, ``Gate.revoke_holder``), an audited act of
    authority, had no span: a trace showed the grants made and refused, never one taken back.
    Each grant revoked is now a ``revoke grant`` span with the grant, whether it was revoked
    already, the recorded grants dead with it and its ``revoke`` entry's index."""
    gate = sweep.gate
    asked: dict[str, Any] = {"key": sweep.keys["helper"], "ttl": timedelta(minutes=5)}
    helper = gate.delegate(sweep.boss, name="helper", capabilities=["tool:lookup"], **asked)
    gate.revoke(sweep.boss, by="ops", reason="leaked")
    gate.revoke(sweep.boss, by="ops")  # already: nothing written
    dana = gate.issue(sweep.keys["root"], name="dana", key=sweep.keys["dana"], role="owner")
    gate.revoke_holder(sweep.keys["dana"].public, by="ops")
    revokes = [e for e in gate.audit.entries() if e.kind == "revoke"]
    spans = list(sweep.exporter.get_finished_spans())
    made = [dict(s.attributes or {}) for s in spans if s.name == "revoke grant"]
    assert [(a["agentgate.capability.id"], a["agentgate.revoke.already"]) for a in made] == [
        (sweep.boss.grant_id, False),
        (sweep.boss.grant_id, True),
        (dana.grant_id, False),
    ]
    assert [a.get("agentgate.audit.index") for a in made] == [revokes[0].index, None, revokes[1].index]
    assert made[0]["agentgate.revoke.descendants"] == 1  # the helper's grant, dead with it
    assert made[0]["agentgate.revoke.by"] == "ops" and made[0]["agentgate.action"] == "revoke"
    assert helper.grant_id not in {a["agentgate.capability.id"] for a in made}
    (holder,) = [s for s in spans if s.name == "revoke holder"]
    assert dict(holder.attributes or {})["agentgate.grant.audience"] == sweep.keys["dana"].did
    assert dict(holder.attributes or {})["agentgate.revoke.revoked_count"] == 1
    (last,) = [s for s in spans if dict(s.attributes or {}).get("agentgate.audit.index") == revokes[1].index]
    assert last.parent is not None and last.parent.span_id == holder.context.span_id


def test_an_approval_request_asked_again_is_linked_by_one_span(sweep: Sweep) -> None:
    """Review R54: a call asked again while its approval request is pending (LangGraph re-runs
    a node when it resumes) is handed the same request and its one ``approval_required`` entry,
    and both spans named that entry: approval requests counted by span were counted twice. The
    span of the asking again links none, as a grant handed on again; one asked again with an
    approval that does not count (another principal's signature) records an entry of its own,
    which no span linked: its span links that one."""
    gate = sweep.gate
    call = Call.tool("transfer", {"to": "x"})
    first = gate.authorize(sweep.boss, call, call_id="t1")
    again = gate.authorize(sweep.boss, call, call_id="t1")
    assert first.needs_approval and again.needs_approval and again.audit_index == first.audit_index
    forged = Approval.sign(dict(first.request or {}), sweep.keys["helper"])
    assert gate.authorize(sweep.boss, call, call_id="t1", approval=forged).needs_approval
    (uncounted,) = [e for e in gate.audit.entries() if e.kind == "approval_required" and e.ref is not None]
    asked = [dict(s.attributes or {}) for s in sweep.exporter.get_finished_spans()]
    asked = [a for a in asked if a.get("agentgate.decision") == "approval_required"]
    assert [a.get("agentgate.audit.index") for a in asked] == [first.audit_index, None, uncounted.index]


def test_trace_allowed_traces_a_recorded_allow_and_refuses_anything_else(sweep: Sweep) -> None:
    """Review R54: ``Gate.trace_allowed`` (the span of an allow no run follows: a GPU lease)
    links the allow's entry once; a refusal, whose span the Gate made already, or an object that
    is no ``Authorization`` is an ``InputError`` and makes no span."""
    gate = sweep.gate
    allowed = gate.authorize(sweep.boss, Call.tool("lookup", {"id": "1"}))
    refused = gate.authorize(sweep.boss, Call.tool("nosuch", {}))
    before = len(sweep.exporter.get_finished_spans())
    for wrong in (refused, "allow"):
        with pytest.raises(InputError):
            gate.trace_allowed(wrong)  # type: ignore[arg-type]
    assert len(sweep.exporter.get_finished_spans()) == before
    gate.trace_allowed(allowed)
    span = sweep.exporter.get_finished_spans()[-1]
    assert span.name == "execute_tool lookup"
    assert dict(span.attributes or {})["agentgate.audit.index"] == allowed.audit_index


def test_trace_allowed_links_an_entry_once_and_uses_the_allow_up(sweep: Sweep) -> None:
    """Review R55: ``Gate.trace_allowed`` called twice on one allow, or followed by a ``run`` of
    it, made two spans naming the same ``allow`` entry (one span per entry was documented, not
    enforced). It now uses the allow up: a second trace is an ``InputError``, a run or an
    abandon after it is refused as already used, and an allow already run is not traced; none of
    these makes a span."""
    gate = sweep.gate
    traced = gate.authorize(sweep.boss, Call.tool("lookup", {"id": "1"}))
    gate.trace_allowed(traced)
    ran = gate.authorize(sweep.boss, Call.tool("lookup", {"id": "2"}))
    assert gate.run(ran, lambda: "found") == "found"
    gate.flush()  # a call's span ends once its outcome is written (review R69)
    before = len(sweep.exporter.get_finished_spans())
    with pytest.raises(InputError, match="already used"):
        gate.trace_allowed(traced)
    with pytest.raises(Denied, match="already used"):
        gate.run(traced, lambda: "found")
    with pytest.raises(Denied, match="already used"):
        gate.abandon(traced)
    with pytest.raises(InputError, match="already used"):
        gate.trace_allowed(ran)
    assert len(sweep.exporter.get_finished_spans()) == before
    linked = [
        dict(s.attributes or {}).get("agentgate.audit.index") for s in sweep.exporter.get_finished_spans()
    ]
    assert linked.count(traced.audit_index) == 1 and linked.count(ran.audit_index) == 1
