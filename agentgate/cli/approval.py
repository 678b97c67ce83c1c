"""``agentgate approval``: a human's side of an approval gate.

``agentgate approval list [--store URL] [--json]`` lists the requests still waiting for votes
(not those void because a grant of their call was revoked).
``agentgate approval sign PAYLOAD --as KEYFILE [--out FILE] [--store URL]`` shows what the request in
PAYLOAD asks (the JSON that ``interrupt()`` carried, or the request inside it; ``-`` reads standard
input) and writes the signed approval: the value to resume the run with
(``Command(resume=approval)``). With a store (``--store``, else ``AGENTGATE_STORE`` when set, else
``.agentgate/agentgate.db`` where it exists), what the payload shows is first checked against the
store's request and its ``approval_required`` audit entry (``_against_store``); with none, the
description says it was not checked. Exit codes: 0 signed (or listed), 1 refused (the request expired,
or the signer is the requester, or its call_hash is not the hash of the call it shows, or it
is used, closed or already approved by the signer (with a store), or it
shows what the store does not hold), 2
unreadable or malformed input (a request that does not show every part of the call it hashes,
a quorum that is not a whole number, a key given twice in one JSON object, a PAYLOAD that is not
a regular file or is larger than ``MAX_PAYLOAD_BYTES``).

Signing does not decide anything: the Gate checks the signature, that the signer is an approver
the policy names, that the approval is for this very call, unused and unexpired, when the run
resumes. The command refuses early only what would certainly be refused then.

The parser lives apart (agentgate/cli/_approval_parser.py), so that help loads none of the Gate's
approval layer (and the authority engine below it) these handlers use; ``register`` is named here
too, for a caller that registers this group by its module.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentgate._json import once_each
from agentgate._time import LATEST_EXPIRY
from agentgate.audit.entry import AuditEntry, argument_digest, canonical_json, elision
from agentgate.authority import ApprovalRequirement
from agentgate.cli._approval_parser import register as register
from agentgate.cli._common import (
    listed,
    open_audit_log,
    open_existing_store,
    printable,
    refuse_out_over_inputs,
    say_written,
    unix,
    utc,
)
from agentgate.cli._lines import shortened
from agentgate.errors import BeyondLogEnd, InputError
from agentgate.gate import Approval, approval_call_hash
from agentgate.gate._records import PLACEHOLDERS, UNCOUNTED
from agentgate.keys import load_signing_key, read_regular_file, replace_file, shown_path
from agentgate.policy._index import gate_named
from agentgate.store import DEFAULT_PATH
from agentgate.store.approvals import Approval as StoredRequest
from agentgate.store.approvals import ApprovalStore, how_closed

if TYPE_CHECKING:
    from agentgate.store.audit import AuditLog


def _list(args: argparse.Namespace) -> int:
    store = open_existing_store(args.store, read_only=True)
    try:
        approvals = ApprovalStore(store)
        records = approvals.open_records()
        given = approvals.votes_of([record.id for record in records])
        found = [(record, given[record.id]) for record in records]
    finally:
        store.close()
    rows: list[dict[str, Any]] = [
        {
            "id": record.id,
            "requester": record.requester,
            "call_hash": record.call_hash,
            "quorum": record.quorum,
            "approved_by": list(counted),
            "not_counted": list(uncounted),
            "expires_at": unix(record.expires_at),
        }
        for record, (counted, uncounted) in found
    ]
    if listed(rows, args.json, "no open approval requests"):
        return 0
    sys.stdout.write(f"{'request':<34} {'expires':<21} {'votes':>5}  requester\n")
    for row in rows:
        votes = f"{len(row['approved_by'])}/{row['quorum']}"
        # The id and the requester are the row's as stored: a row written outside agentgate is
        # escaped, as budget held's are (until review R63 an escape sequence in one was sent).
        id_, requester = printable(row["id"]), printable(row["requester"])
        sys.stdout.write(f"{id_:<34} {utc(row['expires_at']):<21} {votes:>5}  {requester}\n")
    return 0


def _sign(args: argparse.Namespace) -> int:
    if args.payload != "-":
        refuse_out_over_inputs(args.out, {"the PAYLOAD file": args.payload})
    request = _request(_read(args.payload), args.payload)
    key = load_signing_key(args.key)
    refusal = _refusal(request, key.did)
    logged = None
    if refusal is None and _store_to_check(args.store):
        refusal, logged = _against_store(request, args.store, key.did)
        if refusal is not None and _default_store_only(args.store):
            # The approver named no store: until review R92's second reading the refusal said
            # "the store" without saying which was read, nor how to name the Gate's.
            refusal += (
                f" (checked against the default store {DEFAULT_PATH} of the working directory: "
                "give --store, the Gate's store)"
            )
    if refusal is not None:
        # Named as every other line of the verb names it: the file given, then the request in it
        # (until review R59 a refusal named only the request, not the file it was read from).
        name = "-" if args.payload == "-" else shown_path(args.payload)
        # A request id of 10,000 characters loses its middle, as an error line's value does.
        said = shortened(f"{name}: request {printable(request['id'])}: {refusal}")
        sys.stderr.write(f"agentgate: refused: {said}\n")
        return 1
    approval = Approval.sign({"request": request}, key).to_dict()
    text = json.dumps(approval, indent=2) + "\n"
    if args.out:
        try:
            replace_file(Path(args.out), text.encode("utf-8"), 0o600)
        except OSError as exc:
            raise InputError(f"--out {args.out}: cannot write: {exc.strerror}") from None
        # What was signed, said once it is written: an --out that cannot be written is the one
        # error line exit 2 promises (until review R63 the description went first).
        sys.stderr.write(_describe(request, key.did, logged))
        # Named as its errors name it (until review R63 raw: a name's escape sequence was sent).
        say_written(f"approval written to {shown_path(args.out)}: resume the run with it")
    else:
        sys.stderr.write(_describe(request, key.did, logged))
        sys.stdout.write(text)
    return 0


def _store_to_check(url: str | None) -> bool:
    """Whether ``approval sign`` checks the payload against a store: the one ``url`` (``--store``)
    or ``AGENTGATE_STORE`` names, else the default store (``DEFAULT_PATH``) where a file is there,
    as every other verb opens it. Until review R92 the default store was never read, so with
    neither given a payload edited on its way was signed as shown, without a word; where there is
    no default store either, ``_describe`` says the payload was not checked and how to check it."""
    return not _default_store_only(url) or os.path.lexists(DEFAULT_PATH)


def _default_store_only(url: str | None) -> bool:
    """Whether neither ``url`` (``--store``) nor ``AGENTGATE_STORE`` names a store, so that the
    only one ``approval sign`` may read is the default one (``DEFAULT_PATH``) of the working
    directory."""
    return url is None and "AGENTGATE_STORE" not in os.environ


def _refusal(request: dict[str, Any], signer: str) -> str | None:
    """Why signing ``request`` as ``signer`` would certainly be refused when the run resumes, or
    ``None``: it has expired, the signer is its requester, or its ``call_hash`` is not the hash of
    the call it shows."""
    if request["expires_at"] <= time.time():
        return f"expired at {utc(request['expires_at'])}"
    if request.get("requester_did") == signer:
        return "the approver must not be the requester"
    if _call_hash(request) != request["call_hash"]:
        return "its call_hash is not the hash of the call it shows"
    return None


def _against_store(
    request: dict[str, Any], url: str | None, signer: str
) -> tuple[str | None, _Logged | None]:
    """Why what ``request`` shows is not what the store ``url`` (``None``: ``AGENTGATE_STORE``,
    else ``DEFAULT_PATH``, ``_store_to_check``) holds of it, or why ``signer`` may not sign it (the
    store's requester), or ``None``; and, for ``None``, what the log holds of the request
    (``_Logged``): its ``approval_required`` entry and the later ones referring to it that say an
    approval presented did not count.

    The payload reaches the approver through the application (a UI, a queue): until review R70
    nothing the approver could run checked the arguments and reasons it shows, so an amount edited
    on the way (800 shown as 80) was signed as shown while the signature approved the call made.
    The store's request (``approvals``) gives the call hash, the requester's DID, the expiry and
    the quorum; its ``approval_required`` entry, which the Gate writes in the same transaction,
    the arguments the policy marks loggable (or their ``elided`` digests) and the reasons (values
    of arguments not loggable as ``<not loggable>``). The call hash binds resource, action,
    ``args_digest``, grant and call id (``_refusal`` checked it is theirs). Opened to read only;
    no log key is needed (``audit verify`` says whether the log itself was edited)."""
    store, log = open_audit_log(url, reads=True, create_log=False, read_only=True, unsigned=True)
    with store:
        approvals = ApprovalStore(store)
        try:
            row = approvals.get(request["id"])
        except InputError:
            return (
                "the store has no approval request of this id: another store, or the 'id' was changed",
                None,
            )
        index = approvals.asked_index(row.id, row.call_hash)
        entry = _asked_entry(log, index)
        standing = _standing(approvals, row, signer)
        counted, _ = approvals.votes(row.id)
        voters = approvals.counted_among(row.id)
        later = (
            # No checkpoint: it opens with no key here (the store is trusted as it is; review R91b).
            [e for e in log.referring(index, against_checkpoint=False) if e.kind == "approval_required"]
            if entry is not None and index is not None and entry.kind == "approval_required"
            else []
        )
    if row.requester == signer:  # whatever DID the payload shows, or none (until review R70's second reading)
        return "the approver must not be the requester", None
    held = {"call_hash": row.call_hash, "requester_did": row.requester, "expires_at": row.expires_at}
    for field, value in (*held.items(), ("quorum", row.quorum)):
        # The fields the description shows or the signature binds are compared left out too: until
        # review R70's second reading a payload without its requester_did was signed under a
        # "checked" line naming it (the quorum, not shown, is compared where the payload has it).
        if (field in request or field in held) and request.get(field) != value:
            what = "left out" if field not in request else "changed"
            return f"its {field!r} is not the store's for this request: {what} on its way", None
    if entry is None or entry.kind != "approval_required":
        return (
            "the store has no approval_required audit entry for this request: nothing to check it against",
            None,
        )
    if not _args_recorded(request.get("args", {}), entry):
        return f"its 'args' are not those audit entry {entry.index} records: changed on its way", None
    added = _added_reasons(request.get("reasons", []), entry.reasons)
    if added is None:
        return f"its 'reasons' are not those audit entry {entry.index} records: changed on its way", None
    refusal = _gate_recorded(request, entry) or standing
    if refusal is not None:
        return refusal, None
    return None, _Logged(
        entry, *_not_counted(entry, later, added), _votes(counted, row.quorum, signer, voters)
    )


def _asked_entry(log: AuditLog, index: int | None) -> AuditEntry | None:
    """The entry at ``index``, where the store says the request's ``approval_required`` entry
    is, or ``None`` when there is none: no index, no log, or no row past the log's end. No
    checkpoint is read (``against_checkpoint=False``): it opens with no key here, and until
    review R91c this entry deleted as the log's newest row, under a checkpoint, was refused
    blaming the key given (``--key``), which this command does not take."""
    if index is None or not log.exists:
        return None
    try:
        return log.entry(index, against_checkpoint=False)
    except BeyondLogEnd:
        return None


def _standing(approvals: ApprovalStore, row: StoredRequest, signer: str) -> str | None:
    """Why no yes of ``signer`` to the store's request ``row`` can count, from where it stands,
    or ``None``: it is closed (declined, superseded, void), used, or ``signer``'s vote is on it
    already while the votes that count are fewer than its quorum, as ``Gate.approve`` refuses
    (until review R72 this command signed all of these). A quorum met (the request approved, not
    yet used) makes any approver's yes use it, a repeated one too: until review R72's second
    reading that was refused. The quorum is the store's, as last counted: a policy that lowered
    it since is not known here, and ``Gate.approve`` is the check that applies the policy.
    That it expired ``_refusal`` says (the payload's ``expires_at`` is checked to be the row's)."""
    if row.state == "consumed":
        return "it was already used: an approval is single use, and nothing waits for another yes"
    closed = how_closed(row)
    if closed is not None:
        return f"it {closed}"
    revoked = approvals.revoked_grant(row.id)
    if revoked is not None:
        return f"it is void (grant {printable(revoked[:100])} of its call was revoked): nothing waits for it"
    counted, uncounted = approvals.votes(row.id)
    if signer in (*counted, *uncounted) and len(counted) < row.quorum:
        return f"{signer} has already approved it: a quorum counts each approver once; another approver must sign"
    return None


@dataclass(frozen=True)
class _Logged:
    """What the store's log holds of a request whose payload passed ``_against_store``."""

    entry: AuditEntry
    """The request's ``approval_required`` entry."""
    uncounted: tuple[tuple[str, tuple[int, ...]], ...]
    """The Gate's word on each approval presented that did not count (``UNCOUNTED``), as the
    ``approval_required`` entries referring to ``entry`` record it, with their indexes; a reason
    recorded by digest in the words the payload shows it where its digest is the entry's."""
    unheld: int
    """How many such reasons the payload shows that no entry holds (a repeated or late yes, which
    the Gate says only in the payload it asks again with, or text added on the way)."""
    votes: str
    """How many of the request's quorum are given and what the signer's yes makes of it (``_votes``)."""


def _votes(counted: tuple[str, ...], quorum: int, signer: str, voters: frozenset[str] | None) -> str:
    """The ``votes`` line of a request the store holds with ``quorum`` and the approvers whose
    votes count ``counted`` (as last counted: ``ApprovalStore.votes``), for a yes of ``signer``:
    how many are given, and whether this yes completes the quorum or how many more are needed
    after it. Until review R73 the signer was not told, and a quorum of two read as done after
    the first yes. ``_standing`` has refused a yes of ``signer`` counted already while the quorum
    is not met. A ``signer`` outside ``voters`` (the DIDs the request was last counted among,
    ``None``: none on record) is told its yes is not counted: until review R73's review a key no
    approver holds read "this yes completes the quorum"."""
    given = len(counted)
    said = f"{given} of {quorum} given"
    after = given if signer in counted else given + 1
    if voters is not None and signer not in voters:
        told = (
            f"{said}; this yes is not counted: its key is none of the approvers the request was last "
            "counted among"
        )
    elif given >= quorum:
        told = f"{said}; the quorum is met: this yes uses the request"
    elif after >= quorum:
        told = f"{said}; this yes completes the quorum"
    else:
        told = f"{said}; this yes makes {after} of {quorum}: {quorum - after} more needed"
    # The store's count, as the policy in force at the last vote made it: the Gate counts again
    # under the policy in force when the run resumes (a quorum raised since needs more).
    return f"{told} (the store's count; the Gate counts again, under its policy, when the run resumes)"


def _not_counted(
    entry: AuditEntry, later: list[AuditEntry], added: list[str]
) -> tuple[tuple[tuple[str, tuple[int, ...]], ...], int]:
    """``_Logged.uncounted`` and ``_Logged.unheld`` of the request whose first entry is ``entry``,
    from the entries referring to it (``later``) and the reasons its payload shows after those
    ``entry`` holds (``added``, each the Gate's word on an approval not counted).

    Until review R72 none was shown: an approver signing never learnt from the description that
    a forged, self-signed or misdirected yes had been presented, though the log says so."""
    found: dict[str, list[int]] = {}
    # Hashed once: until review R91 each entry of ``later`` hashed every reason of ``added`` again
    # (up to a 1 MiB payload's), seconds before an approver was told anything.
    words = _digested(added)
    for other in later:
        for recorded, text in zip(other.reasons, _in_words(other.reasons, words), strict=True):
            if recorded not in entry.reasons and UNCOUNTED.match(text):
                found.setdefault(text, []).append(other.index)
    unheld = sum(1 for text in added if text not in found)
    return tuple((text, tuple(indexes)) for text, indexes in found.items()), unheld


def _gate_recorded(request: dict[str, Any], entry: AuditEntry) -> str | None:
    """Why the gate or the approvers ``request`` shows are not those its ``approval_required``
    ``entry`` records (in the policy's reason ``gate_reason``), or ``None``. Until review R71 they
    were the payload's word under ``--store``: an editor on the way could show another gate, or an
    approver who would never be asked. The requester's name is still the payload's word: the
    log records the requester by DID (checked), and the name is no part of what the approval
    signs or what the Gate checks when the run resumes.

    A reason the entry records by digest (``elided reason``: a gate of many approvers in a bounded
    log) is read as the payload shows it where its digest is the entry's: until review R71's
    second reading such a genuine payload was refused as changed on its way. Where the payload
    does not show it, the gate and approvers cannot be checked, and the refusal says so."""
    if "gate" not in request and "approvers" not in request:
        return None
    clear = _in_words(entry.reasons, _digested(request.get("reasons", [])))
    named = next(filter(None, map(gate_named, clear)), None)
    if named is None and any(reason.startswith("elided reason: ") for reason in clear):
        return (
            f"its 'gate' and 'approvers' cannot be checked: audit entry {entry.index} records the reason "
            "naming them by digest only, and the payload does not show that reason"
        )
    for field, recorded in zip(("gate", "approvers"), named or (None, None), strict=True):
        if field in request and request[field] != recorded:
            return f"its {field!r} is not what audit entry {entry.index} records: changed on its way"
    return None


def _digested(shown: list[str]) -> dict[str, str]:
    """Each text among ``shown`` (the payload's reasons) by the ``elided reason`` an entry would
    keep it as (its digest)."""
    return {elision("reason", text.encode("utf-8")): text for text in shown}


def _in_words(recorded: tuple[str, ...], words: Mapping[str, str]) -> list[str]:
    """The reasons an entry records (``recorded``), each it keeps by digest (``elided reason``)
    in the words of the text the digest is of, where ``words`` (``_digested``) holds it."""
    return [words.get(reason, reason) for reason in recorded]


def _json(value: Any) -> bytes | None:
    try:
        return canonical_json(value)
    except InputError:  # no canonical form (NaN...): never what the Gate recorded
        return None


def _args_recorded(shown: dict[str, Any], entry: AuditEntry) -> bool:
    """Whether ``shown`` are the arguments ``entry`` records: in clear, or, for an entry over the
    log's size limit, by the digest an ``elided args.KEY`` or ``elided args`` reason gives."""
    kept, notes, rest = dict(entry.args), set(entry.reasons), {}
    for key, value in shown.items():
        if key in kept:
            if _json(kept.pop(key)) != _json(value):
                return False
        else:
            data = _json(value)
            if data is None or elision(f"args.{key}", data) not in notes:
                rest[key] = value
    if kept:  # the log shows an argument the payload does not
        return False
    data = _json(rest)
    return not rest or (not entry.args and data is not None and elision("args", data) in notes)


def _added_reasons(shown: list[str], recorded: tuple[str, ...]) -> list[str] | None:
    """The reasons ``shown`` after the first ones ``recorded`` (``_reason_recorded``), in order,
    when each is the Gate's word on an approval given before that did not count (``UNCOUNTED``),
    which a LangGraph payload asked again ends with and the request's first entry cannot hold:
    until review R71 such a payload was refused as changed on its way. ``None`` when the reasons
    are not so. ``_describe`` quotes those the log holds (``_not_counted``), never the payload's
    word alone: an editor on the way may add such a reason."""
    checked = 0
    while checked < min(len(shown), len(recorded)) and _reason_recorded(shown[checked], recorded[checked]):
        checked += 1
    added = shown[checked:]
    return added if all(UNCOUNTED.match(reason) for reason in added) else None


_PLACEHOLDERS = re.compile("|".join(map(re.escape, PLACEHOLDERS)))  # the log's (``redact_reasons``)


def _reason_recorded(shown: str, recorded: str) -> bool:
    """Whether the reason ``shown`` is the one ``recorded``: the same, recorded by digest
    (``elided reason``), or the same but for what the log keeps as a placeholder (a value not
    loggable, which the payload may show and the log does not)."""
    if shown == recorded or recorded == elision("reason", shown.encode("utf-8")):
        return True
    parts = _PLACEHOLDERS.split(recorded)
    if len(parts) < 2:
        return False
    # Each placeholder stands for any text: the first part starts ``shown``, the last ends it,
    # and each between is found, leftmost, after the one before (which is where any match can
    # put it). One pass of ``str.find``: until review R70's second reading the parts were joined
    # by ``.*`` into a regular expression, whose backtracking on a shown reason the editor on
    # the way writes (the payload may hold 1 MiB) ran for hours with three placeholders.
    head, *middle, tail = parts
    if len(shown) < len(head) + len(tail) or not (shown.startswith(head) and shown.endswith(tail)):
        return False
    at, end = len(head), len(shown) - len(tail)
    for part in middle:
        found = shown.find(part, at, end)
        if found < 0:
            return False
        at = found + len(part)
    return True


MAX_PAYLOAD_BYTES = 1 << 20
"""The most an approval PAYLOAD may hold (1 MiB): a request shows only loggable arguments."""


def _read(source: str) -> Any:
    """The JSON in the file ``source`` (``-``: standard input), read bounded.

    Raises ``InputError`` for a file that cannot be read, is not a regular file (a FIFO is refused
    at once, never waited on), holds more than ``MAX_PAYLOAD_BYTES``, is not UTF-8 JSON, or gives
    a key twice in one object.
    """
    if source == "-":
        try:
            data = sys.stdin.buffer.read(MAX_PAYLOAD_BYTES + 1)
        except OSError as exc:
            raise InputError(f"{source}: cannot read approval payload: {exc.strerror}") from None
        if len(data) > MAX_PAYLOAD_BYTES:
            raise InputError(f"{source}: cannot read approval payload: larger than {MAX_PAYLOAD_BYTES} bytes")
    else:
        data, _ = read_regular_file(source, MAX_PAYLOAD_BYTES, "approval payload")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise InputError(f"{source}: cannot read approval payload: not UTF-8 text") from None
    try:
        # A key given twice (review R71: until then the last was read, whatever the approver was shown).
        return json.loads(text, object_pairs_hook=once_each(lambda key: _given_twice(source, key)))
    except (ValueError, RecursionError) as exc:
        raise InputError(f"{source}: not JSON: {str(exc)[:120]}") from None


def _given_twice(source: str, key: str) -> InputError:
    return InputError(
        f"{source}: the key {key[:100]!r} is given twice in one object: readers differ on which "
        "value counts (this command reads the last, a viewer may show the first)"
    )


_TEXT_FIELDS = ("gate", "resource", "action", "grant", "call_id", "args_digest", "requester", "requester_did")
_HASHED_FIELDS = ("resource", "action", "args_digest", "grant", "call_id")


def _request(payload: Any, source: str) -> dict[str, Any]:
    """The request in an interrupt payload (or the request itself), checked for what signing needs.

    Raises ``InputError`` (exit 2) for a request without a text ``id`` and ``call_hash``, one
    that does not show every part of the call it hashes (``resource``, ``action``,
    ``args_digest``, ``grant``, ``call_id``: the Gate writes all five, ``call_id`` ``""`` when the
    call has none), an ``expires_at`` that is not a number of seconds, fields of the wrong type,
    or text that is not valid Unicode; each error names the file ``source`` (``-``: standard
    input), as ``_read``'s do (until review R58 they said ``PAYLOAD``, whichever file it was).
    """
    name = "-" if source == "-" else shown_path(source)
    inner = payload.get("request", payload) if isinstance(payload, dict) else None
    if not isinstance(inner, dict):
        raise InputError(f"{name}: the payload must be a JSON object: the interrupt payload or its 'request'")
    for field in ("id", "call_hash"):
        if not isinstance(inner.get(field), str) or not inner[field]:
            raise InputError(f"{name}: the request has no {field!r}; pass the whole interrupt payload")
    expires = inner.get("expires_at")
    if isinstance(expires, bool) or not isinstance(expires, int | float) or not 0 <= expires < LATEST_EXPIRY:
        raise InputError(f"{name}: the request's 'expires_at' must be a time in seconds since 1970")
    for field in _TEXT_FIELDS:
        if field in inner and not isinstance(inner[field], str):
            raise InputError(f"{name}: the request's {field!r} must be text")
    for field in ("approvers", "reasons"):
        value = inner.get(field, [])
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise InputError(f"{name}: the request's {field!r} must be a list of text")
    quorum = inner.get("quorum", 1)
    if isinstance(quorum, bool) or not isinstance(quorum, int) or quorum < 1:
        # Until review R71 ``true`` and ``1.0`` passed the store's check (``True == 1``).
        raise InputError(f"{name}: the request's 'quorum' must be a whole number >= 1")
    if not isinstance(inner.get("args", {}), dict):
        raise InputError(f"{name}: the request's 'args' must be an object")
    try:
        json.dumps(inner, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        raise InputError(f"{name}: the request holds text that is not valid Unicode") from None
    for field in _HASHED_FIELDS:
        if field not in inner:
            raise InputError(
                f"{name}: the request has no {field!r}: it does not show the call it asks to approve"
            )
    return inner


def _call_hash(request: dict[str, Any]) -> str:
    """The hash of the call the request shows (``approval_call_hash``, as the Gate computes it);
    ``_request`` has checked that every part of it is present and text."""
    return approval_call_hash(*(request[field] for field in _HASHED_FIELDS))


def _digest(args: Any) -> str | None:
    try:
        return argument_digest(args)
    except InputError:
        return None


def _describe(request: dict[str, Any], signer: str, logged: _Logged | None = None) -> str:
    """What the approver is about to say yes to, in the words of the request; text from the
    payload is escaped (``printable``), so a hostile payload cannot add or disguise lines.
    ``logged``: what the log holds of the request it was checked against (``_against_store``):
    the ``why`` line shows its entry's reasons (a reason left out on the way too; one the entry
    keeps by digest in the payload's words, the digest the entry's: until review R72 the digest),
    and a ``not counted`` line each reason a later entry holds that an approval presented did
    not count, then how many more the payload shows that no entry holds."""
    entry = None if logged is None else logged.entry
    complete = request.get("args_digest") == _digest(request.get("args", {}))

    def text(field: str) -> str:
        return printable(str(request.get(field, "?")))

    approvers = printable(", ".join(map(str, request.get("approvers", []))))
    shown = request.get("reasons", [])
    # The decision's own reason, which the payload does not show, as the authority words it
    # (``ApprovalRequirement.asked``) from the gate and approvers checked against the entry.
    gate = f"approval gate {request.get('gate')}"
    asked = ApprovalRequirement(tuple(map(str, request.get("approvers", []))), reason=gate).asked
    why = shown if entry is None else _in_words(entry.reasons, _digested([*shown, asked]))
    reasons = printable("; ".join(map(str, why))) or "-"
    if complete:
        arguments = "all shown"
    elif entry is not None:
        arguments = (
            f"NOT all shown: those shown are the ones the policy marks loggable, as audit entry "
            f"{entry.index} records them; the signature covers the others as the call made them"
        )
    else:
        # Left out (not loggable) or changed on the way: a digest cannot tell which, so the line
        # names both (until review R70 it named the first alone, and an edited amount read as the
        # call's), and how to tell (review R70: --store).
        arguments = (
            "NOT all shown: those shown do not hash to the args_digest signed: some are left out "
            "(the log keeps only those the policy marks loggable) or changed; they could not be "
            "checked: pass --store (the Gate's store) to check them against the request's audit "
            "entry; the signature covers the call as it was made, not the arguments shown"
        )
    lines = [
        f"approval request {text('id')}",
        f"  requester  {text('requester')} ({text('requester_did')})",
        f"  asks for   {text('resource')} {text('action')} {json.dumps(request.get('args', {}), sort_keys=True)}",
        f"  arguments  {arguments}",
        f"  gate       {text('gate')}; approvers {approvers}",
        f"  why        {reasons}",
        f"  expires    {utc(request['expires_at'])}",
        f"  signed by  {signer}",
    ]
    if entry is None:
        # Signed without a store (``_store_to_check``): said, so that an approver who gave none
        # does not read the lines above as checked (until review R92 nothing said so).
        lines.insert(
            -3,
            f"  checked    against no store: no --store, AGENTGATE_STORE is not set and there is "
            f"no store at {DEFAULT_PATH}; what it shows is the payload's word (give --store, the "
            "Gate's store, to check it)",
        )
    else:
        lines.insert(
            -3,
            f"  checked    against the store's request and audit entry {entry.index}: call, requester "
            "DID, gate, approvers, arguments shown, reasons, expiry, quorum (the requester's name is "
            "the payload's word)",
        )
    if logged is not None:
        at = lines.index(next(line for line in lines if line.startswith("  why ")))
        noted = [
            f"  not counted {printable(text)} (audit entr{'y' if len(at_) == 1 else 'ies'} "
            f"{', '.join(map(str, at_))})"
            for text, at_ in logged.uncounted
        ]
        if logged.unheld:
            noted.append(
                f"  not counted {logged.unheld} more the payload shows that no audit entry of the "
                "request holds: not shown (the Gate says a repeated or late yes only in the payload "
                "it asks again with; an editor on the way may add any)"
            )
        lines[at + 1 : at + 1] = noted
        lines.insert(at, f"  votes      {logged.votes}")
    return "\n".join(lines) + "\n"
