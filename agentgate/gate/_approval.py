"""An approver's signed yes to one approval request (``Approval``) and what it is bound to
(``approval_call_hash``)."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from agentgate._json import canonical_json
from agentgate.errors import AgentGateError, InputError, KeyFileError
from agentgate.gate._authorization import expect
from agentgate.keys import PublicKey, SigningKey


@dataclass(frozen=True)
class Approval:
    """An approver's signed yes to one approval request, bound to the exact call (``call_hash``).

    The store makes it single-use and expiring (``store.approvals``); the signature makes it
    unforgeable: only a key the policy names as an approver can produce one.
    """

    request: str
    """The approval request id from the interrupt payload."""
    call_hash: str
    """Hash of the tool, the arguments' digest, the grant and the tool call id."""
    approver: str
    """The approver's ``did:key``."""
    signature: bytes = field(repr=False)

    def signed_bytes(self) -> bytes:
        return b"agentgate-approval-v1\n" + canonical_json(
            {"request": self.request, "call": self.call_hash, "approver": self.approver}
        )

    @classmethod
    def sign(cls, payload: Mapping[str, Any], approver: SigningKey) -> Approval:
        """Sign the request shown in an interrupt payload (or the request itself) as ``approver``.

        Raises ``InputError`` when the payload is no mapping (LangGraph's ``Interrupt`` itself:
        the message says to pass its ``.value``), carries no request id and call hash, when the
        request does not show, as text, every part of the call its hash covers (``resource``,
        ``action``, ``args_digest``, ``grant``, ``call_id``; the Gate writes all five), when its
        ``call_hash`` is not the hash of those parts (``approval_call_hash``: the approver would
        sign a call other than the one shown), or when ``approver`` is not a ``SigningKey`` (a
        public key cannot sign). Until review R53 only ``agentgate approval sign`` checked the
        hash; this signed whatever hash the payload carried.
        """
        if not isinstance(payload, Mapping) and _wraps_payload(payload):
            raise InputError(
                f"the approval payload must be the interrupt payload (a mapping), got a "
                f"{type(payload).__name__}: pass its .value (state['__interrupt__'][0].value)"
            )
        expect(payload, Mapping, "the approval payload", "the interrupt payload (a mapping)")
        expect(approver, SigningKey, "approver", "the approver's SigningKey")
        inner = payload.get("request", payload)
        if not isinstance(inner, Mapping) or not all(
            isinstance(inner.get(k), str) for k in ("id", "call_hash")
        ):
            raise InputError(
                "an approval needs the request's 'id' and 'call_hash': pass the interrupt payload"
            )
        for name in _HASHED_FIELDS:
            if not isinstance(inner.get(name), str):
                raise InputError(
                    f"the approval request has no text {name!r}: it does not show the call it asks to approve"
                )
        if approval_call_hash(*(inner[name] for name in _HASHED_FIELDS)) != inner["call_hash"]:
            raise InputError(
                f"approval request {inner['id'][:100]!r}: its call_hash is not the hash of the call it "
                f"shows ({', '.join(_HASHED_FIELDS)}); not signed"
            )
        unsigned = cls(inner["id"], inner["call_hash"], approver.did, b"")
        return replace(unsigned, signature=approver.sign(unsigned.signed_bytes()))

    def verify(self) -> bool:
        """Whether the signature is the approver's own."""
        try:
            return PublicKey.from_did(self.approver).is_valid(self.signed_bytes(), self.signature)
        except (KeyFileError, AgentGateError, UnicodeError):
            return False

    def to_dict(self) -> dict[str, str]:
        """Plain strings: what ``Command(resume=...)`` carries through any checkpointer."""
        return {
            "request": self.request,
            "call_hash": self.call_hash,
            "approver": self.approver,
            "signature": self.signature.hex(),
        }

    @classmethod
    def parse(cls, value: object) -> Approval | None:
        """An approval from a resume value (an ``Approval`` or its ``to_dict()``); ``None`` for
        anything else, which leaves the call unapproved rather than failing the run. Each field
        must be text, as ``to_dict`` writes it: until review R52 a field was read with ``str()``,
        and a resume value nested past the interpreter's recursion limit (``{"request": {...}}``
        ten thousand levels deep) ended the run with ``RecursionError`` instead of refusing."""
        if isinstance(value, Approval):
            return value
        if not isinstance(value, Mapping):
            return None
        try:
            fields = [value[key] for key in ("request", "call_hash", "approver", "signature")]
            if not all(isinstance(text, str) for text in fields):
                return None
            request, call_hash, approver, signature = fields
            parsed = cls(request, call_hash, approver, bytes.fromhex(signature))
            for text in (parsed.request, parsed.call_hash, parsed.approver):
                text.encode("utf-8")  # a lone surrogate is no approval anyone signed
        except (KeyError, ValueError, TypeError):  # UnicodeEncodeError is a ValueError
            return None
        return parsed


_HASHED_FIELDS = ("resource", "action", "args_digest", "grant", "call_id")
"""The fields of an approval request that its ``call_hash`` covers, in ``approval_call_hash``'s order."""


def approval_call_hash(resource: str, action: str, args_digest: str, grant: str, call_id: str) -> str:
    """What an approval is bound to: SHA-256 (hex) of the canonical JSON of the call's resource,
    action, argument digest, grant id and the framework's call id (empty when there is none)."""
    fields = {"res": resource, "act": action, "args": args_digest, "grant": grant, "call": call_id}
    return hashlib.sha256(canonical_json(fields)).hexdigest()


def approval_call_key(requester: str, run_id: str, call_id: str) -> str:
    """What names one framework call whatever its tool and arguments: SHA-256 (hex) of the
    canonical JSON of the requester's DID, the run and the call id. A request asked under it
    is closed when the same call is asked for again in another version of the model answer
    that asked for it (``ApprovalStore.supersede``)."""
    fields = {"who": requester, "run": run_id, "call": call_id}
    return hashlib.sha256(canonical_json(fields)).hexdigest()


def _wraps_payload(value: object) -> bool:
    """Whether ``value`` holds an interrupt payload in its ``value`` attribute, as LangGraph's
    ``Interrupt`` (``state["__interrupt__"][0]``) does: the first thing a developer passes to
    ``Gate.approve``, so the refusal says to pass its ``.value`` instead."""
    try:
        return isinstance(value.value, Mapping)  # type: ignore[attr-defined]
    except Exception:  # any object: one whose attribute raises is simply not such a wrapper
        return False
