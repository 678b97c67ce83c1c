"""The approval loop of ``GateMiddleware`` (``_ApprovalLoop``): a call decided, and asked for
approval through ``interrupt()`` until it is approved or refused."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Collection, Mapping
from dataclasses import replace
from typing import Any

from langgraph.types import interrupt

from agentgate.capabilities import Call
from agentgate.errors import Denied, InputError
from agentgate.gate import AgentIdentity, Approval, Authorization, Gate, Verdict
from agentgate.integrations.langgraph._replies import _asking, _hiding
from agentgate.integrations.langgraph._scope import _NO_CHECKPOINTER, _resumable


class _ApprovalLoop:
    """The part of ``GateMiddleware`` that decides a call and asks for its approval until it is
    given or refused (``_authorize``), and records a refusal of a call still waiting
    (``_refuse_pending``)."""

    # The middleware's state this part reads (``GateMiddleware.__init__`` sets it).
    gate: Gate
    agent: str
    agent_did: str | None
    enforce: bool

    def _authorize(
        self,
        identity: AgentIdentity | None,
        call: Call,
        *,
        hidden: Callable[[], Collection[str]] | None = None,
        **context: Any,
    ) -> Authorization:
        """``Gate.authorize`` of ``call`` as this agent (``context``: its other keyword arguments),
        and while it needs a human approval, again with each answer to ``interrupt()``: an
        approval that does not hold (wrong approver, the requester itself, another call's, already
        used) is asked for again, and an answer that is not an approval at all ("deny") refuses the
        call, recorded as a refusal that closes the request (``Gate.decline``). With ``enforce``, a
        refusal raises ``Denied``, its text without the operand of a constraint on an argument
        ``hidden`` names (those LangGraph injects, ``_hiding``), as the model is told a refusal:
        until review R60 it quoted the grant's operand (a pinned key)."""

        def decide(approval: Approval | None) -> Authorization:
            return self.gate.authorize(
                identity, call, agent=self.agent, agent_did=self.agent_did, approval=approval, **context
            )

        auth = first = decide(None)
        if auth.needs_approval and not _resumable():
            # interrupt() would end the run with the request open, and Command(resume=...) would
            # fail in LangGraph: an approval could never reach this call. Closed and refused now.
            auth = self._refuse_pending(auth, _NO_CHECKPOINTER)
        while auth.needs_approval:
            answer = interrupt(_asking(auth, first))
            approval = Approval.parse(answer)
            if approval is None:
                auth = self._refuse_pending(auth, _not_an_approval(answer))
                break
            asked, auth = auth, decide(approval)
            if not auth.allowed and not auth.needs_approval:
                # Refused with an approval in hand (already used, denied elsewhere, a budget that
                # cannot pay): the request the call has open (the resumed node opened a new one
                # when the approval's own was closed) would stay pending, shown to approvers and
                # never answered in the log. It is closed; the model is told the refusal's reason.
                with contextlib.suppress(InputError):  # already closed (the approval's own, used)
                    self.gate.decline(asked, "the call was refused with the approval given")
        if not auth.allowed and self.enforce:
            explained = self.gate.explain_redacted(auth)
            raise Denied(_hiding(explained, hidden()) if hidden else explained, auth.decision)
        return auth

    def _refuse_pending(self, auth: Authorization, reason: str) -> Authorization:
        """The refusal of ``auth``, which waits for an approval, recorded with ``reason``
        (``Gate.decline``), or with why it cannot be when it was decided meanwhile."""
        try:
            return self.gate.decline(auth, reason)
        except InputError as exc:  # decided meanwhile (approved, used, denied elsewhere)
            return replace(auth, verdict=Verdict.DENY, reasons=(*auth.reasons, str(exc)))


_APPROVAL_FIELDS = ("request", "call_hash", "approver", "signature")
"""The fields of an approval's ``to_dict()``, each text (``Approval.parse``)."""


def _not_an_approval(answer: object) -> str:
    """Why ``answer``, a resume value that ``Approval.parse`` refused, is not an approval: its
    kind, or what a mapping lacks or holds wrongly (a field missing, not text, a signature that
    is not hex, text that is not valid Unicode), never its values. The reason the refusal records
    and the model is told. Until review R67 every such answer read "the answer to the request
    was not an approval": an approval mangled on its way (a field lost in a queue, a signature
    re-encoded) was refused with nothing to say what was wrong with it."""
    said = "the answer to the request was not an approval: "
    if isinstance(answer, str):
        return said + "text, not an Approval or its to_dict()"
    if not isinstance(answer, Mapping):
        kind = type(answer).__name__
        article = "an" if kind[:1].lower() in "aeiou" else "a"
        return said + f"{article} {kind}, not an Approval or its to_dict()"
    try:
        missing = [name for name in _APPROVAL_FIELDS if name not in answer]
        if missing:
            return said + f"a mapping without {', '.join(map(repr, missing))}"
        fields = {name: answer[name] for name in _APPROVAL_FIELDS}
    except Exception:  # a mapping that fails to answer for its own keys
        return said + "a mapping whose fields cannot be read"
    wrong = [name for name, value in fields.items() if not isinstance(value, str)]
    if wrong:
        return (
            said
            + f"a mapping whose {', '.join(map(repr, wrong))} {'is' if len(wrong) == 1 else 'are'} not text"
        )
    try:
        bytes.fromhex(fields["signature"])
    except ValueError:
        return said + "a mapping whose 'signature' is not hex"
    return said + "a mapping holding text that is not valid Unicode"
