"""``GateMiddleware``: every tool call and model call of one agent decided, asked for approval,
scheduled and audited through a ``Gate``, and what this process knows of the Gate's calls that must
run once (``_CallsOfGate``: their answers, ``KEPT_RESULTS`` of them, and their attempts running
now). Its tool-call half is here; it inherits one part per concern: the
approval loop (``_approving._ApprovalLoop``) and the model-call half
(``_model_calls._ModelCalls``). What a tool-call request asks is read by ``_tool_calls``, and what
the model is told (a refusal, a failure) is made by ``_replies``."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import functools
import threading
import weakref
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, TypeVar

from langchain.agents.middleware import AgentMiddleware
from langchain_core.language_models.chat_models import BaseChatModel
from langchain_core.messages import ToolMessage
from langchain_core.tools import BaseTool
from langgraph.errors import GraphBubbleUp
from langgraph.prebuilt.tool_node import ToolCallRequest
from langgraph.types import Command

from agentgate._names import check_agent_name
from agentgate.capabilities import Call
from agentgate.errors import AgentGateError, AuthorityError, Denied, Expired, InputError, Revoked
from agentgate.gate import Authorization, Gate
from agentgate.gate._authorization import expect, shown
from agentgate.gate._checks import _TEXT_OR_NONE
from agentgate.integrations.langgraph._approving import _ApprovalLoop
from agentgate.integrations.langgraph._calls import (
    ToolResult,
    _async_only,
    _AttemptEnd,
    _Deciding,
    _failed,
    _invalid_resume,
    _paused,
    _runs_in_a_thread,
    _ThreadedCall,
)
from agentgate.integrations.langgraph._delegation import _is_delegation, _raised_by_sub_agent
from agentgate.integrations.langgraph._model_calls import (
    _check_model_name,
    _model_name,
    _ModelCalls,
    _output_limit,
)
from agentgate.integrations.langgraph._replies import (
    _answers_a_call,
    _copied,
    _failure,
    _refusal,
    _ToolRaised,
    _undecidable,
)
from agentgate.integrations.langgraph._scope import (
    _RUNNING_HERE,
    _asked_in,
    _checkpoint_serde,
    _request_identity,
    _run_id,
    _running_key,
    _RunningKey,
)
from agentgate.integrations.langgraph._stops import _disowned
from agentgate.integrations.langgraph._tool_calls import (
    _ASYNC_ONLY,
    _NO_CALL_ID,
    _injected_names,
    _no_such_tool,
    _refused_call,
    _storable_result,
    _tool_call_of,
    _unusable_answer,
    _ValueRefused,
)

R = TypeVar("R")
D = TypeVar("D")


def _cancelling() -> tuple[asyncio.Task[Any] | None, int]:
    """The running task and how many cancellations of it are pending (``Task.cancelling``), to be
    compared after a tool call (``_own_cancellation``)."""
    task = asyncio.current_task()
    return task, task.cancelling() if task is not None else 0


def _own_cancellation(task: asyncio.Task[Any] | None, cancelling: int) -> bool:
    """Whether a ``CancelledError`` out of a tool call is the tool's own failure (its HTTP client
    reporting a timeout so, a future another task cancelled), not a cancellation of the run:
    nothing asked to cancel ``task`` since the call began (``cancelling``, as the scheduler
    compares it). Such an error is told to the model as any exception a tool raises; until review
    R67 it ended the whole run in LangGraph's ``NodeCancelledError``. A real cancellation goes on
    (the call is settled by ``Gate.arun`` first)."""
    return task is not None and task.cancelling() <= cancelling


KEPT_RESULTS = 256
"""How many answers of calls that must run once, and ran, this process keeps for each ``Gate`` (the
newest), to answer them again when their tools node is run again (``_answer_again``)."""


class _CallsOfGate:
    """What this process knows of one Gate's calls that must run once, shared by every
    ``GateMiddleware`` on that Gate (``_calls_of``): the answers of those that ran to completion
    (the newest ``KEPT_RESULTS``, by call-once key) and the attempts running now (by
    ``_running_key``). Until review R94 each middleware object kept its own: a run resumed through
    a new graph object (an agent built per request, the same Gate and checkpointer) neither waited
    for a call still running nor got the answer of one that ran, and told the model it failed."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._results: collections.OrderedDict[str, ToolResult] = collections.OrderedDict()
        self._in_flight: dict[_RunningKey, _AttemptEnd] = {}

    def keep(self, once_key: str, result: ToolResult) -> None:
        """Keep ``result`` as the answer of the call ``once_key``, dropping the oldest past
        ``KEPT_RESULTS``."""
        with self._lock:
            self._results[once_key] = result
            while len(self._results) > KEPT_RESULTS:
                self._results.popitem(last=False)

    def kept(self, once_key: str) -> ToolResult | None:
        """The kept answer of the call ``once_key``, if any."""
        with self._lock:
            return self._results.get(once_key)

    def claim(self, key: _RunningKey) -> tuple[_AttemptEnd | None, _AttemptEnd | None]:
        """``(mine, None)``: a new attempt of the call ``key`` registered, its end for the caller
        to ``release``; or ``(None, running)``: the end of the attempt of it that runs now, to wait
        for before claiming again. The check and the registration are one step: of two runs
        deciding one call at once (two resumes of one thread), one waits for the other."""
        with self._lock:
            running = self._in_flight.get(key)
            if running is not None:
                return None, running
            self._in_flight[key] = mine = _AttemptEnd()
            return mine, None

    def release(self, key: _RunningKey, mine: _AttemptEnd) -> None:
        """The attempt ``mine`` of the call ``key`` ended: forget it and wake its waiters."""
        with self._lock:
            if self._in_flight.get(key) is mine:
                del self._in_flight[key]
        mine.set()


_GATES_CALLS: weakref.WeakKeyDictionary[Gate, _CallsOfGate] = weakref.WeakKeyDictionary()
_GATES_CALLS_LOCK = threading.Lock()


def _calls_of(gate: Gate) -> _CallsOfGate:
    """The one ``_CallsOfGate`` of ``gate`` in this process (gone with the Gate)."""
    with _GATES_CALLS_LOCK:
        calls = _GATES_CALLS.get(gate)
        if calls is None:
            calls = _GATES_CALLS[gate] = _CallsOfGate()
        return calls


class GateMiddleware(_ModelCalls, _ApprovalLoop, AgentMiddleware[Any, Any, Any]):
    """Authorizes, schedules and audits every tool and model call of one agent through ``gate``.

    ``agent`` is the name this agent runs under (required, non-empty text: without it the gate could
    not tell the agent's own identity from one it inherited; and a name ``Gate.issue`` would grant,
    ``_names.check_agent_name``, else ``InputError``); a run whose context carries another
    agent's identity (a nested agent that inherited its parent's context) is refused. With
    ``agent_did`` the identity's key must be that key too. ``enforce=True`` raises ``Denied`` instead of
    telling the model. ``model`` names the model resource (``model:NAME``) when the chat model's
    own name is not the one the policy uses; with ``named`` it names that chat model only, and any
    other (one a fallback middleware swaps in) is decided under its own name. ``gate_models=False``
    leaves model calls ungated (for policies that govern tools only).

    Install it last in ``middleware=[...]`` (innermost, as ``create_gated_agent`` does): each call
    a middleware makes (a retry, a fallback model, edited arguments) then reaches the gate and is
    decided as it really runs. A middleware inside it would run under a decision made for another
    call.
    """

    def __init__(
        self,
        gate: Gate,
        *,
        agent: str,
        agent_did: str | None = None,
        enforce: bool = False,
        model: str | None = None,
        max_tokens: int = 1024,
        gate_models: bool = True,
        named: BaseChatModel | None = None,
    ) -> None:
        super().__init__()
        expect(gate, Gate, "gate", "a Gate")
        if not isinstance(agent, str) or not agent:
            # ``None`` would switch off the inherited-identity check (``Gate.authorize`` compares
            # the identity's name with ``agent`` only when there is one).
            raise InputError(
                f"GateMiddleware: agent must be the agent's name, non-empty text, got {shown(agent) if agent != '' else 'empty text'}"
            )
        # Before anything quotes it (``agentgate[NAME]`` opens each refusal and names the
        # middleware): a name the Gate would not grant, and refuses to decide under, is refused
        # here as ``Gate.issue`` refuses it. Until review R88d a name holding a line break was
        # written whole into the refusal of ``max_tokens`` (two lines), and one of 1 MB, 1 MB long.
        check_agent_name(agent, "GateMiddleware: the agent's")
        expect(agent_did, _TEXT_OR_NONE, "agent_did", "a did:key or None")
        expect(model, _TEXT_OR_NONE, "model", "a model name or None")
        # ``512.0`` is 512, as for ``model_settings`` (review R81); refused as the model call's limit
        # is (until review R88c by its whole ``repr``: a bare ``ValueError`` for ``-10**5000``).
        limit = _output_limit(agent, "max_tokens", max_tokens)
        if gate_models and model is not None:
            _check_model_name(agent, model, "the name given for the model")
        elif gate_models and isinstance(named, BaseChatModel):
            _check_model_name(agent, _model_name(named), "the chat model's own name")
        self.named = named
        self.gate_models = gate_models
        self.gate = gate
        self.agent = agent
        self.agent_did = agent_did
        self.enforce = enforce
        self.model = model
        self.max_tokens = limit
        self._usage_copies: dict[int, tuple[weakref.ref[BaseChatModel], BaseChatModel]] = {}
        self._schema_sizes: dict[int, tuple[weakref.ref[BaseTool], int]] = {}
        self._calls = _calls_of(gate)

    @property
    def name(self) -> str:
        return f"agentgate[{self.agent}]"

    # --- tools ----------------------------------------------------------------------------

    def _keep(self, auth: Authorization, result: ToolResult) -> ToolResult:
        """Keep the answer of a call that must run once and ran to completion, by its call-once
        key, for ``_answer_again``: a ``ToolMessage``, or the ``Command`` a tool answered with (its
        state update; until review R42 it was lost when the node ran again), or the list of them a
        tool may answer with (until review R51 not kept); ``result`` as it is."""
        if auth.once_key is not None and _answers_a_call(result) and not _failed(result):
            self._calls.keep(auth.once_key, result)
        return result

    @contextlib.contextmanager
    def _running(self, key: _RunningKey) -> Iterator[None]:
        """Mark the call ``key`` running in this context while the block runs (its decision,
        then the allowed call until its outcome is handed to the gate), its attempt claimed
        (``_ran_here``; released by the caller's ``finally``, which also covers the steps
        between the claim and this block). From the decision on: a call still being decided
        when another call of its node paused the run has its allow recorded (the call started)
        before it runs, and the run resumed meanwhile would decide it between the two (refused
        as started, its outcome not recorded)."""
        own = _RUNNING_HERE.set(_RUNNING_HERE.get() | {key})
        try:
            yield
        finally:
            _RUNNING_HERE.reset(own)

    def _ran_here(self, key: _RunningKey) -> tuple[_AttemptEnd | None, _AttemptEnd | None]:
        """``_CallsOfGate.claim`` for the call ``key``: its attempt claimed, or the end of the
        same call's attempt that runs in this process now, through any middleware object on this
        Gate, for the caller to wait for and claim again: LangGraph's async tools node leaves a
        call running when another call of the node pauses the run (an approval), and the run
        resumed at once (by this graph object or a new one) would decide the call while it runs
        (refused as started, its outcome not recorded yet). ``(None, None)`` inside the call's
        own run (its tool runs the agent again): the attempt is the outer one."""
        if key in _RUNNING_HERE.get():
            return None, None
        return self._calls.claim(key)

    def _answer_again(
        self, auth: Authorization, request: ToolCallRequest, call_id: str, name: str
    ) -> ToolMessage | Command[Any]:
        """The answer to a refused call: its kept answer when it is refused because it already
        ran to completion in this process (a hand-built graph's tools node run again whole on
        resume, after another of its calls paused for an approval: LangGraph re-runs the node, and
        the call that ran would lose its result), else the refusal. The refusal is recorded
        either way (the call does not run again)."""
        if auth.once_key is not None and (kept := self._calls.kept(auth.once_key)) is not None:
            return _copied(kept)
        return _refusal(auth, call_id, name, self.gate, _injected_names(request))

    def _authorize_tool(self, request: ToolCallRequest) -> Authorization:
        identity = _request_identity(request)
        call = _tool_call_of(request)
        return self._authorize(
            identity,
            call,
            call_id=request.tool_call["id"],
            run_id=_run_id(request),
            asked_in=_asked_in(request),
            hidden=lambda: _injected_names(request),
        )

    def _foreign(self, request: ToolCallRequest) -> Authorization | None:
        """The recorded refusal of a delegation asked on an identity that is not this agent's own
        (a nested agent running on its parent's context would hand on the parent's rights).
        Raises ``Denied`` instead with ``enforce``."""
        identity = _request_identity(request)
        # The delegation tool's name (``ask_NAME``) need not be a resource name: the delegation is
        # decided as ``agent:NAME`` (``Gate.delegate``); a sub-agent named "Researcher" is one.
        refused = self.gate.refuse_foreign(
            identity, _refused_call(request)[0], agent=self.agent, agent_did=self.agent_did
        )
        if refused is not None and self.enforce:
            raise Denied(self.gate.explain_redacted(refused), refused.decision)
        return refused

    def _raise_refusal(self, exc: BaseException) -> None:
        """With ``enforce``, raise a refusal that came out of a tool's run: a ``Denied`` as it is
        (its text the gate's redacted one), any other ``AuthorityError`` as ``Denied``. Nothing
        else is raised here: the caller tells the model of it."""
        if self.enforce and isinstance(exc, Denied):
            raise exc
        if self.enforce and isinstance(exc, AuthorityError):
            raise Denied(str(exc)) from exc

    def _tool_failed(self, call_id: str, name: str, exc: AgentGateError, *, tools_own: bool) -> ToolMessage:
        """The model's view of an agentgate error out of a tool call's ``Gate.run``/``arun``
        (``_failure``). ``enforce`` raises the gate's own errors, and a refusal out of the tool's
        run (``_raise_refusal``: a nested gated call it made; until review R90b it was told to the
        model as a failing tool, and the run went on). Any other agentgate error the tool's own
        code raised (``tools_own``) is a failing tool, told by its type (until review R90 it ended
        the run, its text, secrets and all, handed to the caller)."""
        if self.enforce and not tools_own:
            raise exc
        self._raise_refusal(exc)
        return _failure(call_id, name, exc, tools_own=tools_own)

    def _delegation_failed(
        self, request: ToolCallRequest, call_id: str, name: str, exc: Exception
    ) -> ToolMessage:
        """The supervisor's view of a delegation that raised (``_failure``). With ``enforce``, a
        refusal (of the delegation itself, or the sub-agent's own ``Denied``) raises ``Denied``.
        An agentgate error out of the sub-agent's run (``_raised_by_sub_agent``) is the tool's
        own, told by its type (until review R91 its text, a backend's words included). The run
        ends at the model's next turn when no later call can succeed: the delegating grant is
        revoked or expired, or the policy no longer names the supervisor (``_disowned``)."""
        self._raise_refusal(exc)
        dead = isinstance(exc, Revoked | Expired) or (
            isinstance(exc, AuthorityError) and _disowned(self.gate, _request_identity(request))
        )
        # A refusal of the delegation is a ``deny`` entry; a sub-agent's failure (or the store's)
        # leaves none: the delegation's ``allow`` has no outcome entry.
        return _failure(
            call_id,
            name,
            exc,
            ends_run=dead,
            tools_own=_raised_by_sub_agent(exc),
            recorded=isinstance(exc, AuthorityError),
        )

    def _record_undecidable(self, request: ToolCallRequest, exc: InputError) -> None:
        """Record the refusal of a tool call that is refused before the gate decides it
        (``_undecidable``): a ``deny`` entry by the run's identity (``unknown`` without one), on
        the call as asked (``_refused_call``), with ``exc`` as its reason (``_undecidable_reason``:
        without a value of an argument that is not loggable). Every refusal is
        evidence (docs/audit-format.md). A refusal whose entry cannot be encoded (``InputError``)
        is not recorded, and still refused; a store that cannot write raises, as for any
        decision, and nothing runs."""
        identity = _request_identity(request)
        call, extra = _refused_call(request)
        call_id = request.tool_call.get("id")
        with contextlib.suppress(InputError):
            self.gate.record_refusal(
                identity,
                call,
                (self._undecidable_reason(call, exc), *extra),
                call_id=call_id if isinstance(call_id, str) and call_id else None,
                asked_in=_asked_in(request),  # closes this run's request for the call, no other's
            )

    def _undecidable_reason(self, call: Call, exc: InputError) -> str:
        """``exc``'s text as the audit log records the refusal of ``call`` (and a ``Denied`` under
        ``enforce`` words it): for a refusal that quotes a value the model wrote
        (``_ValueRefused``), without it, unless the policy marks its argument loggable; until
        review R82 the value was recorded in clear. The model is told ``exc`` itself."""
        if isinstance(exc, _ValueRefused) and exc.argument not in self.gate._loggable(call):
            return exc.recorded
        return str(exc)

    def _refuse_undecidable(
        self, request: ToolCallRequest, call_id: str, name: str, exc: InputError
    ) -> ToolMessage:
        """``_undecidable``, recorded (``_record_undecidable``); with ``enforce``, ``Denied`` is
        raised instead."""
        self._record_undecidable(request, exc)
        return self._undecided(request, call_id, name, exc)

    async def _arefuse_undecidable(
        self, request: ToolCallRequest, call_id: str, name: str, exc: InputError
    ) -> ToolMessage:
        """The async twin of ``_refuse_undecidable``: the record is written on a worker thread."""
        await self.gate.to_thread(self._record_undecidable, request, exc)
        return self._undecided(request, call_id, name, exc)

    def _unknown_tool(
        self, request: ToolCallRequest, handler: Callable[[ToolCallRequest], R], name: str
    ) -> R:
        """The answer to a call of a tool the agent does not have (recorded first): ToolNode's
        own, which names the tools there are, and runs nothing; with ``enforce``, ``Denied``."""
        if self.enforce:
            raise Denied(f"agentgate refused the call: {_no_such_tool(name)}")
        return handler(request)

    def _undecided(self, request: ToolCallRequest, call_id: str, name: str, exc: InputError) -> ToolMessage:
        if self.enforce:
            said = self._undecidable_reason(_refused_call(request)[0], exc)
            # Not chained to ``exc`` where it quotes a value that is not loggable.
            raise Denied(f"agentgate refused the call: {said}") from (exc if said == str(exc) else None)
        return _undecidable(call_id, name, exc)

    def wrap_tool_call(
        self,
        request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], ToolResult],
    ) -> ToolResult:
        """Decide, ask for approval where needed, run under the scheduler, audit the outcome."""
        call_id, name = request.tool_call["id"] or "", request.tool_call["name"]
        if not isinstance(call_id, str) or not call_id:
            return self._refuse_undecidable(request, "", name, InputError(_NO_CALL_ID))
        if request.tool is None:  # no such tool: ToolNode answers so and runs nothing
            self._record_undecidable(request, _no_such_tool(name))
            return self._unknown_tool(request, handler, name)
        if (unusable := _unusable_answer(request, call_id)) is not None:
            return self._refuse_undecidable(request, call_id, name, unusable)
        if _is_delegation(request, self.gate):
            refused = self._foreign(request)
            if refused is not None:
                return _refusal(refused, call_id, name, self.gate)
            try:
                return handler(request)
            except GraphBubbleUp:
                raise  # the sub-agent's interrupt (an approval) pauses the supervisor's run
            except Exception as exc:  # a failing sub-agent is a failing tool, not the end of the run
                if _invalid_resume(exc):
                    raise  # its interrupt waits for a valid answer: the supervisor's run fails
                return self._delegation_failed(request, call_id, name, exc)
        if _async_only(request.tool):
            return self._refuse_undecidable(request, call_id, name, InputError(_ASYNC_ONLY.format(name=name)))
        key, mine = _running_key(request), None
        try:  # from the claim on: an interrupt anywhere after it releases the attempt
            mine, busy = self._ran_here(key)
            while busy is not None:
                busy.wait()
                mine, busy = self._ran_here(key)
            with self._running(key):  # from its decision on: a run resumed meanwhile waits for it
                return self._decide_and_run(request, handler, call_id, name)
        finally:
            if mine is not None:
                self._calls.release(key, mine)

    def _decide_and_run(
        self,
        request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], ToolResult],
        call_id: str,
        name: str,
    ) -> ToolResult:
        try:
            auth = self._authorize_tool(request)
        except InputError as exc:
            return self._refuse_undecidable(request, call_id, name, exc)
        if not auth.allowed:
            return self._answer_again(auth, request, call_id, name)

        tool, serde = _ToolRaised(), _checkpoint_serde(request)
        try:
            return self.gate.run(
                auth,
                lambda: self._keep(
                    auth, _storable_result(tool.watch(lambda: handler(request)), call_id, name, serde)
                ),
                call_id=call_id,
                run_id=_run_id(request),
                failed=_failed,
                paused=_paused,
            )
        except GraphBubbleUp:
            raise  # interrupt() or Command(graph=PARENT) from inside the tool: LangGraph's to handle
        except AgentGateError as exc:
            return self._tool_failed(call_id, name, exc, tools_own=tool.raised(exc))
        except (Exception, asyncio.CancelledError) as exc:
            if _invalid_resume(exc):
                raise  # settled ``paused``: the run fails, its interrupt to be answered again
            # Under ``invoke`` nothing cancels a call: a ``CancelledError`` is the tool's own
            # failure, told as under ``ainvoke`` (``_own_cancellation``).
            return _failure(call_id, name, exc)

    async def awrap_tool_call(
        self,
        request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], Awaitable[ToolResult]],
    ) -> ToolResult:
        """The async twin of ``wrap_tool_call``; limits hold because the scheduler's slots are async."""
        call_id, name = request.tool_call["id"] or "", request.tool_call["name"]
        if not isinstance(call_id, str) or not call_id:
            return await self._arefuse_undecidable(request, "", name, InputError(_NO_CALL_ID))
        if request.tool is None:  # no such tool: ToolNode answers so and runs nothing
            await self.gate.to_thread(self._record_undecidable, request, _no_such_tool(name))
            return await self._unknown_tool(request, handler, name)
        if (unusable := _unusable_answer(request, call_id)) is not None:
            return await self._arefuse_undecidable(request, call_id, name, unusable)
        if _is_delegation(request, self.gate):
            refused = await self.gate.to_thread(self._foreign, request)
            if refused is not None:
                return _refusal(refused, call_id, name, self.gate)
            try:
                return await handler(request)
            except GraphBubbleUp:
                raise
            except Exception as exc:
                if _invalid_resume(exc):
                    raise
                return self._delegation_failed(request, call_id, name, exc)
        key, mine = _running_key(request), None
        try:  # from the claim on: an interrupt anywhere after it releases the attempt
            mine, busy = self._ran_here(key)
            while busy is not None:
                await busy.until_set()  # holding no worker thread: the call waited for may need one
                mine, busy = self._ran_here(key)
            with self._running(key):  # from its decision on: a run resumed meanwhile waits for it
                return await self._adecide_and_run(request, handler, call_id, name)
        finally:
            if mine is not None:
                self._calls.release(key, mine)

    async def _adecide_and_run(
        self,
        request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], Awaitable[ToolResult]],
        call_id: str,
        name: str,
    ) -> ToolResult:
        try:
            auth = await self._decided(self._authorize_tool, request, lambda auth: auth)
        except InputError as exc:
            return await self._arefuse_undecidable(request, call_id, name, exc)
        if not auth.allowed:
            return self._answer_again(auth, request, call_id, name)

        # A sync tool runs in a worker thread under ainvoke, which no cancellation stops: not
        # preemptible, its attempt ends with its thread (its slot is not given back while it
        # runs, even when the run is cancelled), and past its timeout its result is returned
        # (not a timeout the model would retry), as under invoke.
        # A cancelled run waits for such an attempt and records the call as it ended
        # (``_ThreadedCall``), also when its loop shuts down and cancels the attempt itself (the
        # tool's end is then read from its thread); one cancelled before the tool's thread began
        # it (the executor was busy) is recorded as not started, and its tool does not begin after.
        tool = request.tool  # not None: a call to no such tool was answered before its decision
        threaded = _ThreadedCall(request, tool) if tool is not None and _runs_in_a_thread(tool) else None

        raised, serde = _ToolRaised(), _checkpoint_serde(request)

        async def attempt() -> ToolResult:
            answered = handler(request) if threaded is None else threaded.attempt(handler)
            return self._keep(auth, _storable_result(await raised.awatch(answered), call_id, name, serde))

        task, cancelling = _cancelling()
        try:
            running = self.gate.arun(
                auth,
                attempt,
                call_id=call_id,
                run_id=_run_id(request),
                failed=_failed,
                paused=_paused,
                preemptible=threaded is None,
                began=threaded.began if threaded is not None and threaded.marked else None,
            )
            return await (threaded.outcome(running, lambda: self.gate.abandon(auth)) if threaded else running)
        except GraphBubbleUp:
            raise
        except AgentGateError as exc:
            return self._tool_failed(call_id, name, exc, tools_own=raised.raised(exc))
        except Exception as exc:
            if _invalid_resume(exc):
                raise  # settled ``paused``: the run fails, its interrupt to be answered again
            return _failure(call_id, name, exc)
        except asyncio.CancelledError as exc:
            if not _own_cancellation(task, cancelling):
                raise
            return _failure(call_id, name, exc)

    async def _decided(
        self, decide: Callable[[R], D], request: R, auth_of: Callable[[D], Authorization]
    ) -> D:
        """``decide(request)`` on a worker thread (store I/O stays off the event loop).

        A cancellation of the awaiting task cannot stop a decision under way: it is recorded,
        with what it reserved. So the decision is waited for, an allow is settled as a call that
        did not run (``Gate.abandon``: an ``error`` outcome, ``CancelledError: given up before
        the call started``, its reservation released, a once-only call left to run when its run
        is resumed), and the cancellation goes on, without waiting for a free slot of the tool.
        A decision cancelled before its thread began it is not made. The end of one under way is
        read from its thread (``_Deciding``), not from the task awaiting it, which a loop shutting
        down cancels too. Raises what ``decide`` raises.
        """
        deciding = _Deciding(functools.partial(decide, request))
        future = asyncio.ensure_future(self.gate.to_thread(deciding.run))
        try:
            return await asyncio.shield(future)
        except asyncio.CancelledError:
            if deciding.give_up():
                # Through further cancellations: LangGraph cancels a call's task when a call beside
                # it failed, then the loop's shutdown cancels it again (until review R67 that left
                # the allow with no outcome and its reservation held).
                await deciding.end.until_set(through_cancellations=True)
                if not deciding.failed and deciding.result is not None:
                    auth = auth_of(deciding.result)
                    if auth.allowed:
                        self.gate.abandon(auth)
            raise

    # --- models ---------------------------------------------------------------------------
