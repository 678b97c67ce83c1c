"""Revocation and the store's record of grants: ``revoke`` (a grant and, through it, every grant
below it), ``revoke_holder`` (every recorded grant of a leaked key), ``record`` (the links of a
chain, so that revocation by id can list descendants) and ``prune_grants``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from agentgate._names import MAX_FREE_TEXT
from agentgate._shown import quoted, shown
from agentgate.authority._encoding import b64url_decode
from agentgate.authority._grant import MAX_TIME, MAX_TOKEN_BYTES, TOKEN_PREFIX, Chain, Grant, _encode_chain
from agentgate.authority._operations import _now, _signed_chain
from agentgate.authority._parsing import parse_chain
from agentgate.errors import InputError, TokenFormatError
from agentgate.keys import PublicKey
from agentgate.store import Store
from agentgate.store.grants import GrantRepository


def checked_repo(repo: object, taker: str) -> GrantRepository:
    """``repo`` when it is a ``GrantRepository``; else ``InputError`` saying that ``taker`` (``a
    decision``, ``revoke``, ...) takes one, what it got (by its type, ``shown``) and, for a
    ``Store`` (``open_store``'s, an easy slip), how to make one of it. Until review R87 any
    object was taken and failed as a bare ``AttributeError`` on its first use, which for a
    decision is only on an allow path: a misconfigured ``Authority`` passed refusal tests and
    then raised on the first valid call."""
    if isinstance(repo, GrantRepository):
        return repo
    fix = ": make one of the store, GrantRepository(store)" if isinstance(repo, Store) else ""
    raise InputError(f"{taker} takes a GrantRepository as its repo, got {shown(repo)}{fix}")


def revoke(repo: GrantRepository, grant: Chain | str, *, reason: str = "", now: float | None = None) -> str:
    """Revoke the tip of ``grant`` (a ``Chain``, a chain token, or a 64-hex grant id); return its id.

    Durable before it returns; from then on every decision over a chain that contains this grant
    (it, or any descendant, recorded or not) is denied. ``reason`` is free text: what no store can
    hold in it (a lone surrogate, a NUL character) is recorded escaped, never a reason for the
    revocation to fail. Raises ``TokenFormatError`` for a value that is neither, ``InputError``
    for a ``repo`` that is not a ``GrantRepository`` (``checked_repo``), a ``reason`` that is not text or is longer than ``MAX_FREE_TEXT`` (1,000) characters and
    for a ``now`` outside a grant's times (``_stored_at``), ``StoreError`` when the store cannot
    be written; nothing is revoked then.
    """
    repo = checked_repo(repo, "revoke")
    grant_id = revoked_id(grant)
    repo.revoke(grant_id, now=_stored_at(now), reason=storable_reason(reason))
    return grant_id


def revoked_id(grant: Chain | str) -> str:
    """The id of the grant ``revoke(repo, grant)`` revokes: a chain's tip, a chain token's tip, or
    a 64-hex grant id itself. Raises ``TokenFormatError`` for a value that is none of these,
    saying what a grant id is for one that is not quite (a line break around it, upper case).

    A ``Chain``'s id is computed from its token's signed bytes, never read from its fields: until
    review R57 a ``Chain`` whose tip's ``id`` was edited (``dataclasses.replace``, or one built by
    hand around a real token) revoked the grant its field named, and the grant its token carries
    stayed live."""
    if isinstance(grant, Chain):
        return parse_chain(grant.token).id
    if not isinstance(grant, str):
        raise TokenFormatError(
            f"a grant to revoke is a Chain, a chain token or a 64-hex grant id, got {type(grant).__name__}"
        )
    if _GRANT_ID.fullmatch(grant):
        return grant
    if not grant.startswith(f"{TOKEN_PREFIX}."):
        raise TokenFormatError(_not_a_grant(grant))
    return parse_chain(grant).id


_GRANT_ID = re.compile(r"[0-9a-f]{64}")
_ANY_CASE_ID = re.compile(r"[0-9a-fA-F]{64}")


def _not_a_grant(text: str) -> str:
    """Why ``text``, no chain token, is no grant id either (until review R67 it was refused as a
    token: ``not an agentgate token: it does not start with 'ag1'``, naming no grant id)."""
    what = "a grant id is 64 lower-case hex digits (as grant inspect shows it)"
    if _ANY_CASE_ID.fullmatch(text.strip()):
        if text.strip() != text:
            return (
                f"a grant id with a line break or space around it ({text!r:.90}): {what}, nothing around them"
            )
        return f"{text!r}: {what}"
    return (
        f"neither a chain token nor a grant id ({len(text)} characters): {what}, a chain token starts 'ag1.'"
    )


def _stored_at(now: float | None, what: str = "a revocation time") -> int:
    """``now`` (``None``: the clock) in whole Unix seconds, the time a revocation or a grant's
    record stores (``what`` it is): refused (``InputError``) outside 0 .. 2**40-1, as ``issue``
    and ``delegate`` refuse a grant's times (until review R85 ``revoke(..., now=-1)`` recorded a
    revocation at -1, and until review R89 ``record(..., now=-1)`` a grant recorded at -1, which
    orders ``GrantRepository.delegated``, and ``now=2**70`` failed only in the store)."""
    at = _now(now)
    if not 0 <= at < MAX_TIME:
        raise InputError(
            f"{what} lies in 0 .. 2**40-1 Unix seconds; got {quoted(at)} (a clock or now= before "
            "1970, or past 2**40)"
        )
    return at


def storable_reason(reason: object) -> str:
    """``reason`` as any store can hold it: a lone surrogate or a NUL character escaped. Raises
    ``InputError`` for a reason that is not text, or is longer than ``MAX_FREE_TEXT`` characters
    (what ``agentgate grant revoke --reason`` takes): the revocation's row and its audit entry
    keep it whole, so nothing is revoked with a reason either would cut."""
    if not isinstance(reason, str):
        raise InputError(f"reason must be text, got {type(reason).__name__}")
    if len(reason) > MAX_FREE_TEXT:
        raise InputError(f"reason is {len(reason):,} characters long; at most {MAX_FREE_TEXT:,}")
    return reason.encode("utf-8", "backslashreplace").decode("utf-8").replace("\x00", "\\x00")


@dataclass(frozen=True)
class Revocation:
    """What ``Gate.revoke`` did: the grant id, and whether it was revoked before (``already``:
    nothing was written then, neither a revocation nor an audit entry)."""

    grant_id: str
    already: bool


@dataclass(frozen=True)
class HolderRevocation:
    """What ``revoke_holder`` did: ``revoked`` (ids revoked now) and ``already`` (ids of the
    holder's recorded grants that were revoked before), each sorted. Both empty: the store
    records no grant for ``holder``. Grants never recorded in this store are in neither."""

    holder: str
    revoked: tuple[str, ...]
    already: tuple[str, ...]
    untrusted: tuple[str, ...] = ()
    """Ids of recorded rows whose ``audience`` column names ``holder`` but whose token does not
    (``_holds``: a row written by hand, not by agentgate), sorted: neither revoked nor counted
    (until review R68 they were revoked as the holder's, the column's word alone)."""
    mislabeled: tuple[str, ...] = ()
    """Ids of the holder's grants (by their recorded tokens, ``_holds``) whose rows name another
    audience (a row written by hand, not by agentgate), sorted: revoked (or already revoked) with
    the others and in ``revoked`` or ``already`` too, listed here because the row disagrees with
    its token (until review R69 they were missed: only the ``audience`` column was searched)."""


@dataclass(frozen=True)
class HolderScan:
    """What ``scan_holder`` found: ``elsewhere``, the ids of rows whose token proves ``holder``'s
    grant but whose ``audience`` column names another, sorted; ``read``, how many rows of another
    audience it looked at (each once), and ``parsed``, how many of their tokens it parsed (those
    whose tip payload holds ``holder``'s did at all)."""

    holder: str
    elsewhere: tuple[str, ...]
    read: int
    parsed: int


def scan_holder(repo: GrantRepository, holder: PublicKey | str) -> HolderScan:
    """Read every recorded grant once, outside any write lock (``GrantRepository.recorded_rows``:
    pages of short read transactions, never this thread's bound one), and find the rows of
    ``holder``'s grants that name another audience. The rows that name ``holder`` are left to
    the revoking transaction, which reads them by index under the lock. The cost per row of
    another audience is one base64 decoding of its tip's payload, and a parse of the token only
    where that payload holds ``holder``'s did (a canonical payload writes it unescaped, so no
    other can name it). No signature is checked: a token's tip id is the hash of its payload, so
    a row whose tip hashes to its id and names ``holder`` proves that grant id is ``holder``'s.
    Run it before opening the transaction that revokes (``revoke_holder(...,
    scan=...)``): on SQLite a scan inside it would hold the write lock that every decision waits
    for. Raises ``InputError`` for a ``repo`` that is not a ``GrantRepository``, ``KeyFileError``
    for a ``holder`` that is no did:key, ``StoreError``."""
    repo = checked_repo(repo, "scan_holder")
    did = _holder_did(holder)
    quoted = f'"{did}"'.encode()
    elsewhere: list[str] = []
    read = parsed = 0
    for grant_id, audience, token in repo.recorded_rows():
        if audience == did:
            continue
        read += 1
        if not _tip_payload_holds(token, quoted):
            continue
        parsed += 1
        if _holds(token, grant_id, did):
            elsewhere.append(grant_id)
    return HolderScan(did, tuple(sorted(elsewhere)), read, parsed)


def _tip_payload_holds(token: object, quoted: bytes) -> bool:
    """Whether the last payload of ``token`` holds the bytes ``quoted`` (a did as a JSON string):
    ``False`` only for a token ``_holds`` refuses for that did, at the cost of one decoding."""
    if not isinstance(token, str) or len(token) > MAX_TOKEN_BYTES:
        return False
    parts = token.rsplit(".", 2)
    if len(parts) != 3:
        return False
    try:
        return quoted in b64url_decode(parts[1], "the tip's payload")
    except TokenFormatError:
        return False


def _holder_did(holder: object) -> str:
    if isinstance(holder, PublicKey):
        return holder.did
    if isinstance(holder, str):
        return PublicKey.from_did(holder.strip()).did
    raise InputError(f"holder must be a did:key or a PublicKey, got {type(holder).__name__}")


def revoke_holder(
    repo: GrantRepository,
    holder: PublicKey | str,
    *,
    reason: str = "",
    now: float | None = None,
    scan: HolderScan | None = None,
) -> HolderRevocation:
    """Revoke, in one transaction, every grant recorded in ``repo`` whose audience is ``holder``
    (a ``PublicKey`` or a ``did:key`` string): a leaked key's grants, and through them every
    grant below them (recorded or not: a grant the leaked key delegated offline dies too).
    ``scan`` (``scan_holder``, run before the caller opens its transaction) finds the holder's
    rows that name another audience; without one, it is run here first, before the transaction
    (inside a bound transaction it then reads while that holds the store's write lock).

    Durable before it returns, as ``revoke``; inside ``repo.within(tx)`` it runs in ``tx``, so
    the caller can write one audit entry per revoked id in the same transaction (``agentgate
    grant revoke --holder`` does). "Recorded" and the concurrency it gives:
    ``GrantRepository.revoke_holder``. Not covered: a grant to ``holder`` that this store never
    recorded (issued or delegated to it offline and no call allowed on it through a ``Gate`` of
    this store, which records the chain of every allow; or recorded in another store); only removing
    the key from the policy refuses those. Raises ``KeyFileError`` (an ``InputError``) for a
    ``holder`` that is no did:key, ``InputError`` for a ``reason`` that is not text or is
    longer than ``MAX_FREE_TEXT`` characters or a ``now`` outside 0 .. 2**40-1 (as ``revoke``),
    ``StoreError`` when the store cannot be written (then nothing is revoked).

    The holder of a grant is what its recorded token says, never its row's ``audience`` column
    alone (``_holds``): a row that names ``holder`` but whose token does not is left, and
    reported in ``untrusted``; a row whose token proves ``holder``'s grant but that names
    another audience (written ahead of its record, by the application role or the owner) is
    revoked and reported in ``mislabeled`` (until review R69 it was missed). Such a row is found
    if it was committed before ``scan`` began; a row agentgate records names its token's audience
    and is found if committed before the revoking transaction reads.
    Raises ``InputError`` too for a ``repo`` that is not a ``GrantRepository`` and for a ``scan``
    that is no ``HolderScan`` or is of another holder.
    """
    repo = checked_repo(repo, "revoke_holder")
    did = _holder_did(holder)
    storable = storable_reason(reason)
    at = _stored_at(now)
    if scan is None:
        scan = scan_holder(repo, did)
    elif not isinstance(scan, HolderScan):
        raise InputError(f"scan must be a HolderScan (scan_holder's), got {type(scan).__name__}")
    elif scan.holder != did:
        raise InputError(f"scan is scan_holder's for {scan.holder}, not for {did}, the holder revoked")
    revoked, already, untrusted = repo.revoke_holder(
        did,
        now=at,
        reason=storable,
        holds=lambda token, grant_id: _holds(token, grant_id, did),
        also=scan.elsewhere,
    )
    mislabeled = sorted(set(scan.elsewhere) & {*revoked, *already})
    return HolderRevocation(did, tuple(revoked), tuple(already), tuple(untrusted), tuple(mislabeled))


def _holds(token: object, grant_id: str, did: str) -> bool:
    """Whether ``token`` (a recorded chain up to ``grant_id``) proves that ``did`` holds
    ``grant_id``: its tip's id (the SHA-256 of the signed payload, which holds the audience) is
    ``grant_id`` and that audience is ``did``. A row's ``audience`` column alone proves nothing,
    as its ``expires`` does not (``_proves_expired``)."""
    tip = _recorded_tip(token, grant_id)
    return tip is not None and tip.audience == did


def _recorded_tip(token: object, grant_id: str) -> Grant | None:
    """The tip of ``token``, a recorded chain, if it is the grant ``grant_id`` (its id is the
    SHA-256 of its signed payload, so of every field a row repeats), else ``None``."""
    if not isinstance(token, str):
        return None
    try:
        tip = parse_chain(token).tip
    except TokenFormatError:
        return None
    return tip if tip.id == grant_id else None


def prune_grants(repo: GrantRepository, before: float) -> tuple[int, int]:
    """``GrantRepository.prune``: forget the grants long expired before ``before``, and the
    revocations that their own recorded tokens prove expired; ``(grants, revocations)``. Raises
    ``InputError`` for a ``repo`` that is not a ``GrantRepository``."""
    return checked_repo(repo, "prune_grants").prune(before, expired=_proves_expired)


def _proves_expired(token: object, grant_id: str, cut: int) -> bool:
    """Whether ``token`` (a recorded chain up to ``grant_id``) proves that ``grant_id`` expired
    before ``cut``: its tip's id (the SHA-256 of the signed payload, which holds ``exp``) is
    ``grant_id`` and that ``exp`` is before ``cut``. A row's ``expires`` column alone proves
    nothing: a role that may insert grant rows (the application role) could record a made-up
    expiry for the id of a revoked grant it never recorded."""
    tip = _recorded_tip(token, grant_id)
    return tip is not None and tip.expires < cut


def record(repo: GrantRepository, chain: Chain, *, now: float | None = None) -> None:
    """Remember every link of ``chain`` in the store, so that revocation by id can list descendants.

    Raises ``Denied`` (``tip_mismatch``) for a ``Chain`` object whose links are not its token's:
    a row records a grant's audience and expiry for good (``revoke_holder`` reads the audience);
    ``InputError`` for a ``repo`` that is not a ``GrantRepository`` and for a ``now`` outside
    0 .. 2**40-1 (``_stored_at``, as ``revoke``); nothing is recorded then."""
    repo = checked_repo(repo, "record")
    at = _stored_at(now, "a grant's record time")
    chain = _signed_chain(chain)
    rows = [
        (link.id, link.parent, link.issuer, link.audience, link.expires, _encode_chain(chain.links[: i + 1]))
        for i, link in enumerate(chain.links)
    ]
    repo.record_grants(rows, now=at)
