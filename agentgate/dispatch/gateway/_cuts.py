"""A chat call cut short: by its caller (the connection lost, seen by ``_Watch``; a stream's caller
that stopped reading, ``STALLED``) or by the server (its shutdown grace over, the request's task is
cancelled: ``STOPPED``). A JSON call cut once sent is charged its reservation (``_spent`` raises,
``Gate.arun`` settles), as is one whose answer was too large to read or whose usage is garbage (``_Unread``); a stream cut
short has its outcome say why (``_left_reason``).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from starlette.types import Scope

from agentgate._bounded_http import LOST, ON_LOST, STALLED
from agentgate.dispatch._answers import reports_usage
from agentgate.dispatch._sse import counts_answer, message_chars
from agentgate.dispatch.backends import ChatResult
from agentgate.errors import AnswerTooLarge, CallerGone, GatewayStopped, UsageUnreadable
from agentgate.gate._outcomes import USAGE_UNREAD

STOPPED = "agentgate.stopped"
"""Scope key set (True) on a streamed call cut by the end of the server's shutdown grace."""
_GONE_UNSENT = "the caller went away before the call was sent"
"""``CallerGone``'s message (``sent=False``) for a call whose caller left before any backend got it."""


async def _gone_before_sending() -> None:
    """The backend call of a streamed call whose caller left while it was being decided."""
    raise CallerGone(_GONE_UNSENT, sent=False)


async def _stopped_before_sending() -> None:
    """The backend call of a call whose decision the shutdown grace's end cut short."""
    raise GatewayStopped("the gateway stopped while the call was being decided; it was not sent", sent=False)


def _cut_by_shutdown() -> bool:
    """Whether the current task was cancelled by the server's shutdown (the end of its grace;
    before a call reaches its backend, nothing else cancels a request's task), the cancellation
    then taken back so that the call can be settled and answered."""
    task = asyncio.current_task()
    if task is None or task.cancelling() == 0:
        return False
    _uncancel_all(task)
    return True


class _Watch:
    """While entered: if the request's connection is lost before its answer began (the
    protocol's ``ON_LOST`` hook), the task that entered is cancelled and ``gone`` set. A
    ``CancelledError`` seen inside is this watch's own when ``gone`` is set and
    ``task.uncancel()`` comes to 0; the cancellation then ends with the one who caught it."""

    def __init__(self, scope: Scope) -> None:
        task = asyncio.current_task()
        assert task is not None
        self.task = task
        self.scope = scope
        self.gone = bool(scope.get(LOST))
        """Whether the connection is lost; already on entry if it was lost before (``LOST``)."""

    def __enter__(self) -> _Watch:
        self.scope[ON_LOST] = self._lost
        return self

    def __exit__(self, *exc: object) -> None:
        del self.scope[ON_LOST]

    def _lost(self) -> None:
        self.gone = True
        self.task.cancel()


@dataclass(frozen=True)
class _Cut:
    """A JSON call cut before its answer: by its caller leaving, or by the server stopping."""

    caller_gone: bool


@dataclass(frozen=True)
class _Unread:
    """A JSON call whose backend answered more than is read (``AnswerTooLarge``), or answered
    whole with a usage that is not token counts (``UsageUnreadable``): generated, what it cost
    unread, so charged its reservation, as a cut call is (until review R57 the first was
    released, and retried on every backend: a caller asking for a huge answer got it generated
    three times, free; until review R68 the second was too)."""

    error: AnswerTooLarge | UsageUnreadable


def _spent(result: ChatResult | _Cut | _Unread) -> tuple[int, int] | None:
    """What an answered call is charged: the usage the backend reported, or ``None`` when the
    answer's usage leaves out its prompt or completion token count (``reports_usage``), ``USAGE_UNREAD`` when its count cannot be the
    answer's (``counts_answer``): ``Gate`` then charges the whole reservation (prompt, max
    output) and its outcome says so (the output went out; the gateway never charges less than
    may have been used, nor reports a usage no backend reported).

    Raises ``CallerGone`` for a call whose caller left, ``GatewayStopped`` for one the server's
    shutdown cut (``_Cut``), ``AnswerTooLarge`` for one whose answer was too large to read and
    ``UsageUnreadable`` for one whose usage was garbage (``_Unread``): ``Gate.arun`` then settles it as an ``error`` charged its reservation (its
    usage cannot be read) and re-raises.
    """
    if isinstance(result, _Unread):
        raise result.error
    if isinstance(result, _Cut):
        if result.caller_gone:
            raise CallerGone("the caller went away before the answer; the backend request was cancelled")
        raise GatewayStopped("the gateway stopped during the call; the backend request was cancelled")
    if not reports_usage(result.body.get("usage")):
        return None
    if not counts_answer(result.usage, message_chars(result.body)):
        # Fewer output tokens than the answer's text needs (``completion_tokens: 0`` for
        # ``hello``): not the call's usage (until review R66 it was charged, the answer free).
        return USAGE_UNREAD
    return result.usage.prompt_tokens, result.usage.completion_tokens


def _uncancel_all(task: asyncio.Task[Any]) -> None:
    """Take back every cancellation request pending on ``task`` (the server's shutdown, however
    many times it was delivered)."""
    while task.uncancel() > 0:
        pass


def _left_reason(scope: Scope, handler: asyncio.Task[Any]) -> str | None:
    """Why a stream ended before its answer did, for its outcome in the audit log: the caller
    stopped reading (cut by the protocol), its connection was lost, or the server's shutdown
    grace ran out (``STOPPED``, or its ``handler`` task is being cancelled: with the caller
    still there only the server cancels it); ``None`` when none of these is known."""
    if (stalled := _stall_reason(scope)) is not None:
        return stalled
    if scope.get(LOST):
        return "CallerGone"
    return "GatewayStopped" if scope.get(STOPPED) or handler.cancelling() > 0 else None


def _stall_reason(scope: Scope) -> str | None:
    """Why a stream's caller went away, when it stopped reading (the protocol cut it); else None."""
    stall = scope.get(STALLED)
    if stall is None:
        return None
    return f"caller_stalled: the caller read nothing of the stream for {stall:g} s; the stream was cut"
