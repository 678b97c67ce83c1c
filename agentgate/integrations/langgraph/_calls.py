"""A call under way under the Gate: a sync tool under ``ainvoke``, whose worker thread no
cancellation stops (``_ThreadedCall``, ``_runs_in_a_thread``, ``_marked_in_its_thread``); what a
tool's result says (``_failed``, ``_paused``, and the messages of a ``Command``'s update:
``_update_messages``, ``_read_message``); a model call's streamed output watched
(``_Streamed``, ``_WATCHED``) so that a stream cut after output is charged as reserved (``_Cut``);
and the tokens a model answer reports using (``_tokens_used``)."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import inspect
import json
import threading
from collections.abc import Awaitable, Callable, Coroutine, Mapping, Sequence
from contextvars import ContextVar
from typing import Any, Generic, TypeVar, cast

from langchain.agents.middleware import ModelResponse
from langchain.agents.structured_output import StructuredOutputError
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage, convert_to_messages
from langchain_core.tools import BaseTool, StructuredTool, Tool, ToolException
from langchain_core.tracers.context import register_configure_hook
from langgraph.errors import GraphInterrupt
from langgraph.prebuilt.tool_node import ToolCallRequest
from langgraph.types import Command

from agentgate.dispatch._answers import Usage
from agentgate.dispatch._sse import counts_answer, text_chars
from agentgate.gate._outcomes import USAGE_UNREAD
from agentgate.tasks import settled

ToolResult = ToolMessage | Command[Any]
D = TypeVar("D")


def _runs_in_a_thread(tool: BaseTool) -> bool:
    """Whether LangChain runs ``tool`` in a worker thread when it is awaited: a sync function
    with no coroutine of its own."""
    if isinstance(tool, StructuredTool | Tool):
        return tool.coroutine is None
    return type(tool)._arun is BaseTool._arun


def _async_only(tool: BaseTool) -> bool:
    """Whether ``tool`` has no sync implementation: a ``StructuredTool`` or ``Tool`` made from a
    coroutine alone, whose sync run (``invoke``, ``stream``) raises LangChain's
    ``NotImplementedError`` before any of the tool's code runs."""
    if not isinstance(tool, StructuredTool | Tool) or tool.func is not None or tool.coroutine is None:
        return False
    kind = type(tool)
    return (
        kind._run in (StructuredTool._run, Tool._run)
        and kind.invoke is BaseTool.invoke
        and kind.run is BaseTool.run
    )


def _marked_in_its_thread(
    tool: BaseTool, begin: Callable[[], None], end: Callable[[list[Any], BaseException | None], None]
) -> BaseTool | None:
    """A shallow copy of ``tool`` (a sync tool ``_runs_in_a_thread``) whose work calls ``begin()``
    in its worker thread before it begins (``tool._run``, bound to ``tool`` itself: what the work
    changes on its tool changes ``tool``), and ``end([answer], None)`` after it ended, or
    ``end([], error)`` when it raised ``error``; ``None`` for a tool that does not reach
    ``_run`` by LangChain's own path from ``ainvoke`` (a subclass that overrides it may begin its
    work some other way, which ``begin`` would not see).

    For a ``StructuredTool`` or ``Tool`` the end is that of LangChain's ``run`` of it, which
    ``ainvoke`` runs in the same thread: ``answer`` is LangChain's own answer, and ``error``
    what ``run`` raised, also after the work returned (a ``content_and_artifact`` tool's value
    that is not a pair, a callback's error). For another tool, ``run`` is not in the thread
    (``arun`` makes its answer on the loop): the end is that of ``_run``, ``answer`` the value it
    returned, which ``_ThreadedCall._answer`` makes the answer of."""
    kind = type(tool)
    if isinstance(tool, StructuredTool | Tool):  # ``ainvoke`` runs ``invoke`` in the executor
        own = kind.ainvoke in (StructuredTool.ainvoke, Tool.ainvoke) and kind.invoke is BaseTool.invoke
    else:  # ``arun`` awaits ``_arun``, which runs ``_run`` in the executor
        own = kind.ainvoke is BaseTool.ainvoke and kind.arun is BaseTool.arun
    if not own or kind.run is not BaseTool.run:
        return None

    def ended(work: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(work)
        def marked(*args: Any, **kwargs: Any) -> Any:
            try:
                value = work(*args, **kwargs)
            except BaseException as exc:
                end([], exc)
                raise
            end([value], None)
            return value

        return marked

    work = tool._run

    @functools.wraps(work)
    def beginning(*args: Any, **kwargs: Any) -> Any:
        begin()
        return work(*args, **kwargs)

    try:
        copy = tool.model_copy()
        # The copy's own, found before its class's.
        if isinstance(tool, StructuredTool | Tool):
            object.__setattr__(copy, "_run", beginning)
            object.__setattr__(copy, "run", ended(copy.run))
        else:
            object.__setattr__(copy, "_run", ended(beginning))
    except Exception:  # a tool that cannot be copied: its attempt marks its start
        return None
    return copy


THREAD_END_WAIT_S = 30.0
"""How long a sync tool's attempt cancelled with its task (an event loop shutting down cancels
every task left, the one awaiting the tool's worker thread too) waits for the tool to end in its
thread, to be recorded as it ended there (``_ThreadedCall.attempt``). A tool still running then is
recorded as cancelled while it ran (``error``, ``CancelledError``): started, so a call that must
run once is not run again, and its resumed run is told it may have had its effect."""


class _ThreadedCall:
    """One call of a sync tool under ``ainvoke``, whose attempts run in worker threads that no
    cancellation stops: whether an attempt runs now, whether the tool's work began in its thread
    (``request``'s tool marks it, ``_marked_in_its_thread``: an attempt may wait for a free thread
    of a busy executor, and a call cancelled then never ran, ``began``), and how the work ended
    there (``attempt`` reads it when the task awaiting the thread is cancelled)."""

    def __init__(self, request: ToolCallRequest, tool: BaseTool) -> None:
        self._idle = asyncio.Event()
        self._idle.set()
        self._lock = threading.Lock()
        self._began = False
        self._given_up = False
        self._tool = tool
        self._worked = _AttemptEnd()
        self._returned: list[Any] = []  # what the work returned in its thread, once it did
        self._raised: BaseException | None = None  # what it raised there, once it did
        self._answered = isinstance(tool, StructuredTool | Tool)  # ``_returned`` is LangChain's answer
        marked = _marked_in_its_thread(tool, self._begin, self._end)
        self.marked = marked is not None
        """Whether ``request``'s tool (``tool``) marks the start and the end of its work (else
        ``began`` says nothing, and a cancelled attempt is not read from its thread)."""
        self.request = request if marked is None else request.override(tool=marked)
        """The request to run: its tool marks the start and the end of its work."""

    def _begin(self) -> None:
        """In the tool's worker thread, before its work: note it began, unless the call was given
        up (``began``), in which case the work does not begin."""
        with self._lock:
            if self._given_up:
                raise asyncio.CancelledError("the call was given up before its tool began")
            self._began = True
            self._worked = _AttemptEnd()
            self._returned = []
            self._raised = None

    def _end(self, returned: list[Any], raised: BaseException | None) -> None:
        """In the tool's worker thread, after its work: what it returned (``[value]``; ``[]``
        when it raised ``raised``), and wake the attempt waiting for its end."""
        with self._lock:
            self._returned, self._raised, worked = returned, raised, self._worked
        worked.set()

    def began(self) -> bool:
        """Whether the tool's work began in any attempt; from now on it does not begin (for
        ``Gate.arun``, once the call is cancelled and its attempt ended). Under one lock with
        ``_begin``: a thread that was about to begin the work either did (and this says so) or
        will not."""
        with self._lock:
            self._given_up = True
            return self._began

    async def attempt(self, handler: Callable[[ToolCallRequest], Awaitable[ToolResult]]) -> ToolResult:
        """One attempt: ``handler(request)`` awaited, its start and end noted. Cancelled itself
        (not only the call awaiting it: an event loop shutting down cancels both at once), an
        attempt whose tool began in its thread waits for the tool's end there, at most
        ``THREAD_END_WAIT_S``, and ends as the tool did: with its answer (what LangChain makes of
        the work's end: ``_answer``, ``_handled``) when there is one; else with the cancellation,
        carrying the tool's failure as its ``__cause__`` when the work failed (``Gate.arun``
        records that failure, as it records a tool's error when nothing is cancelled: raised
        here, it would end a task that nothing awaits at the loop's shutdown), and alone while
        the work still runs. One whose tool had not begun gives the call up: its tool does not
        begin after."""
        self._idle.clear()
        try:
            return await handler(self.request)
        except asyncio.CancelledError as cancelled:
            if not self.marked or not self.began():
                raise
            with self._lock:
                worked = self._worked
            if not await worked.within(THREAD_END_WAIT_S):
                raise
            with self._lock:
                returned, raised = self._returned, self._raised
            ended = self._answer(returned[0]) if returned else self._handled(raised)
            if isinstance(ended, BaseException):  # until review R58 recorded as CancelledError
                raise cancelled from ended
            return ended
        finally:
            self._idle.set()

    def _answer(self, value: object) -> ToolResult | ValueError:
        """The answer of the work that returned ``value`` in its thread, or the failure of
        LangChain's run of it. For a ``StructuredTool`` or ``Tool``, ``value`` is what its ``run``
        returned: LangChain's own answer. For another tool, what ``BaseTool.arun`` makes of the
        value its ``_run`` returned: the ``ValueError`` it raises for a ``content_and_artifact``
        tool's value that is not a pair (until review R58 the answer was the value, recorded
        ``ok``), a ``ToolMessage`` or ``Command`` (or a list of them) as it is, else a
        ``ToolMessage`` of the call holding its content (and artifact), as text unless it is a
        list of blocks."""
        content, artifact = value, None
        if not self._answered and self._tool.response_format == "content_and_artifact":
            if not isinstance(value, tuple) or len(value) != 2:
                return ValueError(
                    "Since response_format='content_and_artifact' a two-tuple of the message content "
                    f"and raw tool output is expected. Instead, generated response is of type: {type(value)}."
                )
            content, artifact = value
        if isinstance(content, ToolMessage | Command):
            return content
        if (
            isinstance(content, list)
            and content
            and all(isinstance(i, ToolMessage | Command) for i in content)
        ):
            return content  # type: ignore[return-value]  # a list of answers, as LangChain passes it
        if not isinstance(content, str | list):
            try:
                content = json.dumps(content, ensure_ascii=False)
            except (TypeError, ValueError):
                content = str(content)
        call = self.request.tool_call
        return ToolMessage(content, artifact=artifact, tool_call_id=call["id"], name=self._tool.name)

    def _handled(self, error: BaseException | None) -> ToolResult | BaseException:
        """The answer ``BaseTool.arun`` makes of ``error``, which the work of a tool other than a
        ``StructuredTool`` or ``Tool`` raised in its thread: the error answer of a ``ToolException``
        when the tool handles its errors (``handle_tool_error``); else ``error`` (the work failed).
        A ``StructuredTool``'s or ``Tool``'s ``run`` handled it already: what it raised is
        returned. (``error`` is None only for a work that neither returned nor raised, which
        cannot end: a cancellation stands for it.)"""
        if error is None:  # pragma: no cover
            return asyncio.CancelledError()
        flag = self._tool.handle_tool_error
        if self._answered or not isinstance(error, ToolException) or not flag:
            return error
        if isinstance(flag, str):
            content: Any = flag
        elif callable(flag):
            content = flag(error)
        else:
            content = error.args[0] if error.args else "Tool execution error"
        call = self.request.tool_call
        return ToolMessage(content, tool_call_id=call["id"], name=self._tool.name, status="error")

    async def outcome(
        self, running: Coroutine[Any, Any, ToolResult], abandon: Callable[[], None]
    ) -> ToolResult:
        """Await ``running`` (``Gate.arun`` over ``attempt``). Cancelled while an attempt runs,
        the attempt runs to its end (its effect happens anyway), then ``running`` is cancelled:
        ``Gate.arun`` records and charges an attempt that returned as it ended, and starts no
        further attempt after one that failed or while none runs (waiting for a slot, before a
        retry). Then the cancellation goes on. (LangGraph does not cancel the tool's own task
        while the attempt's thread runs, so ``running`` is shielded and cancelled here.)

        ``running`` runs in a task of its own, which a cancellation before its first step (the
        loop shutting down cancels every task at once; LangGraph cancels a call's task when a
        call beside it failed) ends without running it: ``Gate.arun`` never saw the allow, so
        ``abandon()`` settles it as a call that did not run (``Gate.abandon``). Until review R67
        such an allow had no outcome and its reservation stayed held."""

        async def run() -> ToolResult:
            return await running

        future = asyncio.ensure_future(run())
        try:
            return await asyncio.shield(future)
        except asyncio.CancelledError:
            while not self._idle.is_set():
                with contextlib.suppress(asyncio.CancelledError):
                    await self._idle.wait()
            future.cancel()
            await settled(future)
            if inspect.getcoroutinestate(running) == inspect.CORO_CREATED:
                running.close()
                abandon()
            raise


class _AttemptEnd:
    """The end of one tool call's attempt in this process (``GateMiddleware._running``: from its
    decision until its outcome is handed to the Gate), for the same call of a resumed run to wait
    for: in its thread (``wait``) or, under ``ainvoke``, as a task of the event loop
    (``until_set``), which holds no worker thread while it waits. Waiting in a worker thread of
    the loop's default executor (until review R57), a resumed run's calls could take every thread
    (six on a two-core machine) while the calls they waited for needed one to be decided or to run
    their sync tool: the resumed run hung for good."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._ended = threading.Event()
        self._wakers: list[Callable[[], None]] = []

    def set(self) -> None:
        """The attempt ended: wake every waiter."""
        with self._lock:
            self._ended.set()
            wakers, self._wakers = self._wakers, []
        for wake in wakers:
            wake()

    def wait(self) -> None:
        """Block this thread until the attempt ended."""
        self._ended.wait()

    def _future(self) -> asyncio.Future[None] | None:
        """A future of the running loop that the attempt's end resolves, or ``None`` when it has
        ended already."""
        loop = asyncio.get_running_loop()
        ended: asyncio.Future[None] = loop.create_future()

        def wake() -> None:
            with contextlib.suppress(RuntimeError):  # the waiter's loop is closed: nobody waits
                loop.call_soon_threadsafe(_resolve, ended)

        with self._lock:
            if self._ended.is_set():
                return None
            self._wakers.append(wake)
        return ended

    async def until_set(self, *, through_cancellations: bool = False) -> None:
        """Return once the attempt ended, the waiting task holding no thread meanwhile; with
        ``through_cancellations``, also when the waiting task is cancelled meanwhile (what it
        waits for must be accounted for: the caller goes on with its cancellation after)."""
        ended = self._future()
        if ended is None:
            return
        if not through_cancellations:
            await ended
            return
        while not ended.done():
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.shield(ended)

    async def within(self, seconds: float) -> bool:
        """Whether the attempt ended, waiting for it at most ``seconds`` (holding no thread, and
        through cancellations of the waiting task: what it waits for is how a call that ran
        ended, which must be recorded)."""
        ended = self._future()
        if ended is None:
            return True
        timer = asyncio.get_running_loop().call_later(seconds, _resolve, ended)
        try:
            while not ended.done():
                with contextlib.suppress(asyncio.CancelledError):
                    await asyncio.shield(ended)
        finally:
            timer.cancel()
        return self._ended.is_set()


class _Deciding(Generic[D]):
    """One decision made in a worker thread for a task (``GateMiddleware._decided``), which tells
    its end, and what it returned, whatever became of the task that awaited it: an event loop
    shutting down (``asyncio.run`` returning while tasks of the run it ran are left, as LangGraph
    leaves a tools node's other calls when one pauses for an approval) cancels the awaiting task
    and the task that awaits the thread at once, so the decision, recorded anyway, could not be
    read, and an allow was never settled (until review R57: a ``started`` call with no outcome,
    refused on resume as "started and its outcome was never recorded", its reservation held)."""

    def __init__(self, decide: Callable[[], D]) -> None:
        self._decide = decide
        self._lock = threading.Lock()
        self._began = False
        self._given_up = False
        self.end = _AttemptEnd()
        self.result: D | None = None
        self.failed = False

    def run(self) -> D:
        """In the worker thread: the decision, unless given up before it began."""
        with self._lock:
            if self._given_up:
                raise asyncio.CancelledError("the decision was given up before it began")
            self._began = True
        try:
            self.result = self._decide()
        except BaseException:
            self.failed = True
            raise
        finally:
            self.end.set()
        return self.result

    def give_up(self) -> bool:
        """Whether the decision began (it then runs to its end: ``end``); from now on it does not
        begin."""
        with self._lock:
            self._given_up = True
            return self._began


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():  # a waiter cancelled meanwhile
        future.set_result(None)


def _failed(result: object) -> bool:
    """Whether a tool's result reports a failure: a ``ToolMessage`` with ``status="error"``, also
    inside the ``Command`` a tool may return (the messages of its ``update``: ``_reports_failure``), and in the list of
    them a tool may return (LangGraph's ``ToolNode`` passes a list on as the call's result; until
    review R51 such a list was an ``ok`` outcome, charged, whatever its messages said)."""
    items = result if isinstance(result, list) else [result]
    return any(_reports_failure(item) for item in items)


def _reports_failure(item: object) -> bool:
    """``_failed`` of one ``ToolMessage`` or ``Command``: of a ``Command``, each message of its
    update as ``ToolNode`` reads it (``_update_messages``, ``_read_message``). Until review R86 only
    ``ToolMessage`` objects in a mapping update's ``messages`` were read, so an error answered as a
    message dict (``{"role": "tool", ..., "status": "error"}``) or in a list update was an ``ok``
    outcome, charged, though the model was told of the error."""
    found = [_read_message(m) for m in _update_messages(item)] if isinstance(item, Command) else [item]
    return any(isinstance(m, ToolMessage) and m.status == "error" for m in found)


def _update_messages(command: Command[Any]) -> Sequence[object]:
    """The messages of ``command``'s update, as LangGraph's ``ToolNode`` reads them: the value of a
    mapping update's ``messages`` (one message standing alone as a sequence of it), or the update
    itself where it is a list (what a tool answers in a graph whose state is a list of messages);
    none in another update. The list or tuple the update holds is returned as it is, not copied,
    so that a caller can tell whether it changed its messages (``_with_integer_text``)."""
    update = command.update
    if isinstance(update, Mapping):
        messages = update.get("messages")
        if messages is None:
            return ()
        return messages if isinstance(messages, list | tuple) else (messages,)
    return update if isinstance(update, list) else ()


def _read_message(item: object) -> object:
    """``item`` (a message of a ``Command``'s update, ``_update_messages``) as the message
    ``ToolNode`` and the ``add_messages`` reducer make of it: a message as it is; a message dict
    (``{"role": "tool", "content": ..., "tool_call_id": ..., "status": "error"}``) or a
    ``(role, content)`` pair as LangChain's ``convert_to_messages`` reads it; ``None`` for what it
    reads no message from. Never raises: what LangChain cannot read is no message of the run's
    state either (``ToolNode`` refuses such an update)."""
    if isinstance(item, BaseMessage):
        return item
    try:
        return convert_to_messages([cast(Any, item)])[0]
    except Exception:  # any refusal of LangChain's reading: ValueError, TypeError, KeyError, ...
        return None


def _paused(exc: BaseException) -> bool:
    """A tool that called ``interrupt()``: it has not failed, it waits for its resume; or one
    whose ``interrupt(..., response_schema=...)`` got a resume value the schema refuses
    (``_invalid_resume``): it still waits for a valid one."""
    return isinstance(exc, GraphInterrupt) or _invalid_resume(exc)


def _invalid_resume(exc: BaseException) -> bool:
    """Whether ``exc`` is LangGraph's ``ValidationError`` for a resume value that an
    ``interrupt()``'s ``response_schema`` refuses (in the tool, or in a graph it ran). ``ToolNode``
    lets it fail the run so that the interrupt stays pending and can be answered again; the
    middleware does too (until review R68 it told the model the tool failed, recorded the call
    ``error``, and the run went on without the interrupt). Never, on a LangGraph without
    ``is_invalid_resume`` (before 1.2.x), which marks no such error."""
    return _is_invalid_resume(exc)


try:
    from langgraph.errors import is_invalid_resume as _is_invalid_resume
except ImportError:  # pragma: no cover - a LangGraph that marks no invalid resume

    def _is_invalid_resume(error: BaseException) -> bool:
        return False


class _Streamed(BaseCallbackHandler):
    """Watches one model call (``_WATCHED``) for output streamed out of it: a chunk with content,
    tool call fragments or other output (reasoning), as LangChain hands it to its callbacks, and
    so to a consumer streaming with ``stream_mode="messages"`` or ``astream_events``. A usage-only
    chunk is no output. Handed to LangChain's callback managers by a configure hook, so only
    while a model call is watched; called inline (no executor hop under ``ainvoke``) and for the
    model's LLM events only.

    It also keeps the text of each streamed tool call's arguments as the model wrote it (the
    ``args`` of its ``tool_call_chunks``, put together as LangChain adds them up:
    ``_WrittenCall.of``), which LangChain parses into the answer's calls and drops (``written``):
    where the chat model keeps it nowhere else (langchain-openai's ``ChatOpenAI``), the tool hook
    reads from it the numbers no float holds as written (``_inexact_arguments``)."""

    run_inline = True
    ignore_chain = True
    ignore_agent = True
    ignore_retriever = True
    ignore_retry = True
    ignore_chat_model = True
    ignore_custom_event = True

    def __init__(self) -> None:
        self.delivered = False
        self._calls: dict[object, _RunCalls] = {}

    def on_llm_new_token(self, token: Any, *, chunk: Any = None, **kwargs: Any) -> None:
        message = getattr(chunk, "message", None)
        fragments = getattr(message, "tool_call_chunks", None)
        run = ("token", kwargs.get("run_id"))
        # LangChain adds the later chunks to the run's first as it is: the first one's fragments
        # are calls of their own, added to none of each other.
        first = run not in self._calls
        calls = self._calls.setdefault(run, _RunCalls())
        for fragment in fragments if isinstance(fragments, list) else ():
            if isinstance(fragment, Mapping):
                _WrittenCall.of(calls, fragment, alone=first).add(fragment.get("id"), fragment.get("args"))
        if self.delivered:
            return
        self.delivered = bool(token) or (
            message is not None and bool(message.content or fragments or message.additional_kwargs)
        )

    def written(self) -> dict[str, str]:
        """The text of each streamed tool call's arguments by the call's id, as the model wrote
        it: a later run of the watched call (a retry inside it) over an earlier one."""
        found: dict[str, str] = {}
        for calls in self._calls.values():
            for call in calls.ordered:
                if isinstance(call.call_id, str) and call.call_id:
                    found[call.call_id] = "".join(call.text)
        return found

    def on_stream_event(self, event: Any, **kwargs: Any) -> None:
        # LangChain's content-block streaming (LangGraph's ``stream_events(version="v3")``), which
        # fires no ``on_llm_new_token``: a delta, or a block that starts with something in it (a
        # text block starts empty). A tool call's block starts with its id, its deltas carry the
        # text of its arguments, and its finish gives the id LangChain kept (the last given).
        if not isinstance(event, Mapping):
            return
        kind = event.get("event")
        block = (
            event.get("content")
            if kind in ("content-block-start", "content-block-finish")
            else event.get("delta")
        )
        if isinstance(block, Mapping):
            self._keep_event(kwargs.get("run_id"), kind, event.get("index"), block)
        if self.delivered:
            return
        if kind == "content-block-delta":
            self.delivered = True
        elif kind == "content-block-start":
            self.delivered = isinstance(block, Mapping) and any(
                value for key, value in block.items() if key not in ("type", "index")
            )

    def _keep_event(self, run: object, kind: object, index: object, block: Mapping[str, Any]) -> None:
        """Add a content-block event's tool call block to the call of its block ``index``, as
        LangChain's compat bridge puts a streamed call's blocks together: one call per block, the
        arguments text joined, the id the finished block gives. Kept apart from the same run's
        ``on_llm_new_token`` fragments, which LangChain may fire beside these events: the same
        text, once each."""
        finished = kind == "content-block-finish"
        if block.get("type") not in (
            ("tool_call", "invalid_tool_call") if finished else ("tool_call_chunk", "tool-call-delta")
        ):
            return
        calls = self._calls.setdefault(("event", run), _RunCalls())
        call = next(iter(calls.at(index)), None)
        if finished:
            if call is not None and not _no_id(block.get("id")):
                call.call_id = block.get("id")
            return
        if call is None:
            call = _WrittenCall(index)
            calls.append(call)
        call.add(block.get("id"), block.get("args"))


class _RunCalls:
    """One run's streamed calls (``_WrittenCall``): ``ordered`` in the order they were first
    streamed (``written`` walks it), and beside it the calls at each index, so that a fragment
    finds its call without a search of every call of the run (4,000 calls in one answer cost
    seconds in callbacks). Kept while every index is ``None``, an integer or a string, whose
    equality agrees with a dict's; from the first of another kind, the run's calls are searched
    in order (``at``), as before."""

    __slots__ = ("_at", "ordered")

    def __init__(self) -> None:
        self.ordered: list[_WrittenCall] = []
        self._at: dict[object, list[_WrittenCall]] | None = {}

    def at(self, index: object) -> list[_WrittenCall]:
        """The calls whose index equals ``index``, in the order they were streamed."""
        if self._at is None or not _plain_index(index):
            return [call for call in self.ordered if call.index == index]
        return self._at.get(index, [])

    def append(self, call: _WrittenCall) -> None:
        self.ordered.append(call)
        if self._at is None:
            return
        if _plain_index(call.index):
            self._at.setdefault(call.index, []).append(call)
        else:
            self._at = None


def _plain_index(index: object) -> bool:
    """Whether ``index`` is one ``_RunCalls`` keeps in its dict (``None``, an ``int``, a ``bool``,
    a ``str``; not a subclass, whose equality may be its own)."""
    return index is None or type(index) in (int, bool, str)


class _WrittenCall:
    """One streamed tool call's arguments text, from the fragments LangChain adds up into it: its
    ``index`` (``None`` for one no later fragment adds to), its id (the first given) and its text
    in pieces (joined once at the end: a model that streams a character at a time must not cost a
    copy of all of it per fragment)."""

    __slots__ = ("call_id", "index", "text")

    def __init__(self, index: object) -> None:
        self.index = index
        self.call_id: object = None
        self.text: list[str] = []

    @classmethod
    def of(cls, calls: _RunCalls, fragment: Mapping[str, Any], *, alone: bool = False) -> _WrittenCall:
        """The call of ``calls`` that LangChain adds ``fragment`` to (``merge_lists``), else a new
        one appended (always, with ``alone``: a fragment of the run's first chunk): the first whose
        index is the fragment's (an integer: a ``tool_call_chunks`` index is no other) and whose id does not differ
        from the fragment's (either has none, or they are the same). By index alone (until review
        R84), two calls an OpenAI-compatible server sends whole at index 0 with ids of their own
        were taken for one, whose text (both objects glued) no reader parses, so neither call was
        checked and ``500.00000000000000001`` ran as ``500.0``."""
        index, call_id = fragment.get("index"), fragment.get("id")
        if not isinstance(index, int):
            index = None  # LangChain adds nothing to it, nor it to anything
        elif not alone:
            for call in calls.at(index):
                if _no_id(call.call_id) or _no_id(call_id) or call.call_id == call_id:
                    return call
        call = cls(index)
        calls.append(call)
        return call

    def add(self, call_id: object, args: object) -> None:
        """Add a fragment: its id, if the call has none yet, and its text."""
        if _no_id(self.call_id) and not _no_id(call_id):
            self.call_id = call_id
        if isinstance(args, str):
            self.text.append(args)


def _no_id(call_id: object) -> bool:
    """Whether a fragment's id is none, as LangChain's ``merge_lists`` reads it (``None`` or ``""``)."""
    return call_id is None or (isinstance(call_id, str) and not call_id)


_WATCHED: ContextVar[_Streamed | None] = ContextVar("agentgate_streamed", default=None)
"""The watch of the model call running in this context, if any (``GateMiddleware.wrap_model_call``)."""
register_configure_hook(_WATCHED, inheritable=True)


class _Cut:
    """What the function a model call runs under the Gate returns when the model failed after it
    had streamed output (``_Streamed``), or answered what the agent's ``response_format`` cannot
    parse (LangChain's ``StructuredOutputError``): the Gate's ``spent`` reads it
    (``_tokens_or_cut``). ``usage``: the tokens the answer that could not be parsed reports
    (``_tokens_used`` of the error's ``ai_message``); with them, the Gate's ``failed``
    (``_cut_failure``) gives ``exc``, so the call is recorded as an error charged that usage, and
    ``exc`` goes on to the caller (until review R60 it was charged as reserved, its outcome saying
    its usage could not be read). Without them (a stream cut: how much was generated cannot be
    known once the stream was cut), ``spent`` raises ``exc``, so the call is recorded as an error
    charged as reserved (the backend generated, and billed, output, as the gateway charges a
    stream cut after output was delivered), and ``exc`` goes on to the caller. Until review R59
    an unparsable structured answer was settled as an error before it ran, its reservation
    released: each such call a free generation."""

    __slots__ = ("exc", "usage")

    def __init__(self, exc: Exception) -> None:
        self.exc = exc
        answer = getattr(exc, "ai_message", None) if isinstance(exc, StructuredOutputError) else None
        self.usage = _tokens_used(answer) if isinstance(answer, AIMessage) else None


def _tokens_or_cut(response: object) -> tuple[int, int] | None:
    """``_tokens_used``; for a ``_Cut``, the usage its answer reported, else raise its failure."""
    if isinstance(response, _Cut):
        if response.usage is None:
            raise response.exc
        return response.usage
    return _tokens_used(response)


def _cut_failure(response: object) -> Exception | bool:
    """The Gate's ``failed`` of a model call: the failure a ``_Cut`` carries, else none."""
    return response.exc if isinstance(response, _Cut) else False


def _answer(response: ModelResponse[Any] | _Cut) -> ModelResponse[Any]:
    # ``Gate.run`` never returns a ``_Cut``: its ``spent`` raised the failure it carried, or its
    # ``failed`` gave it (``_cut_failure``) and the Gate raised it.
    if isinstance(response, _Cut):  # pragma: no cover
        raise response.exc
    return response


def _tokens_used(response: object) -> tuple[int, int] | None:
    """(input, output) tokens the response reports in ``usage_metadata``; ``None`` when it reports
    none, leaves out either count (until review R88 one left out was read as 0, so an answer
    whose usage named no ``output_tokens`` had its output free: the gateway charges such a usage
    its reservation, ``dispatch._answers.reports_usage``), or counts that are not non-negative
    integers (the call is then charged what it reserved);
    ``USAGE_UNREAD`` (charged as reserved, its outcome saying its usage could not be read) when
    the counts cannot be those of the answers that report them (``counts_answer`` of their
    ``_answer_chars``), as the gateway charges such a usage. Until review R66 a model answering
    20,000 characters with ``output_tokens: 0`` had its output free. The counts' size is the
    Gate's to judge, as for every caller's ``spent``: a count over ``MAX_USAGE_TOKENS`` is charged
    as reserved there, and its outcome entry says what was reported
    (``gate._costs._usage_counts``)."""
    messages = response.result if isinstance(response, ModelResponse) else [response]
    reporting = [(m, u) for m in messages if (u := getattr(m, "usage_metadata", None))]
    counts = [(u.get("input_tokens"), u.get("output_tokens")) for _, u in reporting if isinstance(u, Mapping)]
    if not counts or len(counts) != len(reporting):
        return None
    if not all(type(n) is int and n >= 0 for pair in counts for n in pair):
        return None
    used = sum(cast(int, i) for i, _ in counts), sum(cast(int, o) for _, o in counts)
    if not counts_answer(Usage(*used), sum(_answer_chars(m) for m, _ in reporting)):
        return USAGE_UNREAD
    return used


def _answer_chars(message: object) -> int:
    """The characters of a model answer's text, as ``counts_answer`` reads them: its content (a
    string, or its text blocks: never a media block's data, which no count of characters
    measures) and its tool calls' names and argument values, parsed or not. What it leaves out
    (an argument's name, a number) only makes the check more lenient."""
    content = getattr(message, "content", None)
    parts: list[object] = [content] if isinstance(content, str) else []
    if isinstance(content, list):
        parts.extend(
            block if isinstance(block, str) else block.get("text")
            for block in content
            if isinstance(block, str) or (isinstance(block, Mapping) and block.get("type") == "text")
        )
    for name in ("tool_calls", "invalid_tool_calls"):
        calls = getattr(message, name, None) or ()
        parts.extend((call.get("name"), call.get("args")) for call in calls if isinstance(call, Mapping))
    return text_chars(parts)
