"""``agentgate grant``: issue, delegate, inspect, check and revoke capability grants.

Exit codes (docs/cli.md): 0 success or allow, 1 deny (a finding), 2 unusable input, 3 approval
required. The store comes from ``AGENTGATE_STORE``. The parser lives apart
(agentgate/cli/_grant_parser.py), so that help loads none of the authority engine these handlers
use; ``register`` is named here too, for a caller that registers this group by its module.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import os
import re
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentgate._durations import parse_duration
from agentgate._names import METERED_IN_WORDS, METERED_UNITS
from agentgate.authority import (
    DEFAULT_SKEW,
    MAX_TOKEN_BYTES,
    Budget,
    Chain,
    Decision,
    GrantRepository,
    HolderScan,
    Invocation,
    Outcome,
    decide,
    delegate,
    issue,
    parse_chain,
    record,
    revoke,
    revoke_holder,
    scan_holder,
)
from agentgate.authority._chain_findings import chain_finding, link_findings, revoked_finding, root_findings
from agentgate.authority._grant import GRANT_CONTEXT, TOKEN_PREFIX
from agentgate.authority._signatures import verify_signature
from agentgate.capabilities import Call, Capability, token_refusal
from agentgate.cli import warn
from agentgate.cli._common import (
    escaped_once,
    json_object,
    open_existing_store,
    printable,
    refuse_out_over_inputs,
    say_written,
    shown_policy,
    unprotected_log,
    utc,
    work_done_said,
    write_json,
)
from agentgate.cli._grant_parser import register as register
from agentgate.errors import (
    AuthorityError,
    CapabilityError,
    InputError,
    InvalidSignature,
    KeyFileError,
    NoStore,
    StoreError,
    TokenFormatError,
)
from agentgate.findings import Finding, FindingKind
from agentgate.keys import (
    FilledFile,
    HeldFile,
    PublicKey,
    UnopenableFile,
    load_public_key,
    load_signing_key,
    read_regular_file,
    replace_file,
    shown_path,
)
from agentgate.store import Store, open_store
from agentgate.store._sqlite import tables_of
from agentgate.store.grants import GRANTS_DDL

if TYPE_CHECKING:  # the policy layer is imported only for --policy (_role_grant)
    from agentgate.policy import Policy, PolicyIndex


def _capabilities(args: argparse.Namespace) -> list[Capability]:
    """The capabilities of each ``--allow``; a value that is no capability is refused with a
    ``CapabilityError`` naming the flag and the value, cut at 60 characters (an ``--allow`` may
    be 4,096 long): until review R58 a too-long action or resource was refused without either,
    and other errors quoted the whole value."""
    return [_capability(text) for text in args.allow]


def _capability(text: str) -> Capability:
    try:
        capability = Capability.parse(text)
        _integers_only(capability)
        return capability
    except CapabilityError as exc:
        shown = f"{text[:60]!r}{'...' if len(text) > 60 else ''}"
        # The parser quotes the whole value first where it names it: said once, shortened, here.
        why = str(exc).removeprefix(f"capability {text!r}: ")
        raise CapabilityError(f"--allow {shown}: {why}") from None


def _integers_only(capability: Capability) -> None:
    """Refuse a constraint number with a fraction, which no token carries: here, where the flag is
    read, so that the error names ``--allow`` and its value (until review R70 ``issue`` refused it
    later, as ``tool:x amount: 500.5 is not an integer``, naming neither), and a whole one out of
    a token's range (``1e30``: until review R70's second reading ``issue`` refused it as
    ``integer 1000000000000000019884624838656 is out of range``, a number never written). The
    lint rule ``role_grant_not_issuable`` gives the same reasons (``token_refusal``)."""
    for name, constraint in capability.constraints:
        why = token_refusal(constraint)
        if why is not None:
            raise CapabilityError(f"argument {name!r}: {why}")


def _role_grant(
    args: argparse.Namespace, issuer: str, audience: str
) -> tuple[list[Capability], int, Budget | None, int, PolicyIndex]:
    """Capabilities, TTL, budget and depth of ``--role`` in ``--policy`` for ``audience`` (a
    did:key), which must hold the role (``PolicyIndex.role_refusal``); the flags may only narrow
    them. With the policy's index, which the grant made is then held to (``_issue``)."""
    if not (args.policy and args.role):
        raise InputError("--policy and --role go together")
    if args.allow:
        raise InputError("--allow cannot be combined with --policy: the role names the capabilities")
    from agentgate.policy import PolicyIndex, role_grant_template  # the policy layer: only for --policy

    policy = shown_policy(args.policy)
    if issuer not in {did for did in policy.anchor_dids.values() if did}:
        raise InputError(f"{args.issuer}: not the key of a trust anchor of {args.policy}")
    template = role_grant_template(policy, args.role)
    index = PolicyIndex(policy)
    # As Gate.issue: a grant of a role its holder does not hold would have every call refused
    # (until review R58 it was issued).
    refusal = index.role_refusal(audience, args.role)
    if refusal is not None:
        raise InputError(f"--to {args.to}: {refusal}")
    ttl = template.ttl_s if args.ttl is None else parse_duration(args.ttl)
    if ttl > template.ttl_s:
        raise InputError(f"--ttl {args.ttl} exceeds {_ttl_cap(policy, args.role, template.ttl_s)}")
    budget = Budget(template.budget.limit, template.budget.unit) if template.budget else None
    if args.budget is not None:
        asked = Budget.parse(args.budget, metered=True)
        if budget is not None and asked.unit != budget.unit:
            raise InputError(
                f"--budget {args.budget} is in {asked.unit}; role {args.role}'s budget is {budget}: give "
                f"an amount in {budget.unit} (e.g. --budget {budget.amount}:{budget.unit})"
            )
        if budget is not None and asked.amount > budget.amount:
            raise InputError(f"--budget {args.budget} exceeds role {args.role}'s budget of {budget}")
        budget = asked
    depth = template.max_depth if args.max_depth is None else args.max_depth
    if depth > template.max_depth:
        raise InputError(
            f"--max-depth {depth} exceeds role {args.role}'s delegation depth {template.max_depth}"
        )
    return list(template.capabilities), ttl, budget, depth, index


def _ttl_cap(policy: Policy, role: str, ttl_s: int) -> str:
    """What caps the TTL ``ttl_s`` of a grant of ``role``, in words: the role's own ``ttl_s``, or
    the policy's ``settings.max_ttl_s`` where the role's is longer or it sets none (until review
    R58 both were called the role's TTL, and the role's own, longer, was nowhere said)."""
    own = policy.document.roles[role].ttl_s
    if own is not None and own <= ttl_s:
        return f"role {role}'s TTL of {ttl_s}s"
    whose = f"role {role}'s ttl_s of {own}s" if own is not None else f"role {role} sets no ttl_s"
    return f"the policy's settings.max_ttl_s of {ttl_s}s, which caps every grant ({whose})"


def _read_token(path: Path) -> Chain:
    """The chain in a token file: one token on one line; the line breaks after it are ignored.

    Raises ``InputError`` for a file that cannot be read, is not a regular file (a FIFO is
    refused at once, never waited on) or is larger than a token can be, ``TokenFormatError`` for
    one that does not hold a token.
    """
    data, _ = read_regular_file(path, MAX_TOKEN_BYTES + 2, "token")
    shown = shown_path(path)  # a line break in the name shown as \n, not as the CLI's one space
    if data.startswith(b"\xef\xbb\xbf"):
        raise TokenFormatError(
            f"{shown}: starts with a UTF-8 byte order mark (an editor's); a token file holds the "
            "token as plain ASCII"
        )
    try:
        text = data.decode("ascii").rstrip("\r\n")
    except UnicodeDecodeError:
        raise TokenFormatError(f"{shown}: token is not ASCII") from None
    # A key where the token belongs (arguments swapped) is named as one, never quoted (until
    # review R70 "holds more than one line" or "does not start with 'ag1.'").
    if text.lstrip().startswith("-----BEGIN"):
        raise TokenFormatError(f"{shown}: holds a PEM key, not a token; a token file holds one ag1. token")
    if text.startswith("did:key:"):
        raise TokenFormatError(
            f"{shown}: holds a did:key (a public key), not a token; a token file holds one ag1. token"
        )
    if not text:  # said so (until review R70 "it does not start with 'ag1.'"): a refused `... > t.tok`
        raise TokenFormatError(
            f"{shown}: the file is empty: it holds no token (a command whose output was redirected "
            "here may have been refused: it writes no token then)"
        )
    if "\n" in text or "\r" in text:  # said so, not 'link 0 signature: not unpadded base64url'
        raise TokenFormatError(f"{shown}: holds more than one line; a token file holds one token on one line")
    control = next((c for c in text if not c.isprintable()), None)
    if control is not None:
        raise TokenFormatError(
            f"{shown}: the token holds control character {control!r} at character {text.index(control) + 1}"
        )
    try:
        return parse_chain(text)
    except TokenFormatError as exc:
        raise TokenFormatError(f"{shown}: {exc}") from None


def _filled(out: Path) -> InputError:
    """The refusal of a file at ``out`` that is not empty, without ``--force``: it may be the only
    copy of a token handed out, whose grant stays live and recorded (the store keeps its token, but
    no verb gives it back), as ``keys new`` never replaces a key. An empty file (``mktemp``'s) holds
    nothing to lose. Until review R71 any file was replaced."""
    return InputError(
        f"{shown_path(out)}: a file that is not empty is there (a grant whose token it holds stays "
        "valid until it expires or is revoked); give --force to replace it, or name another file"
    )


def _refuse_force_without_out(args: argparse.Namespace) -> None:
    """``--force`` replaces the file ``--out`` names: without ``--out`` it would replace nothing,
    and the token goes to standard output (until review R72 it was taken without a word)."""
    if args.force and args.out is None:
        raise InputError("--force replaces the file --out names: give --out FILE, or leave --force out")


def _record_and_write(repo: GrantRepository, chain: Chain, out: Path | None, *, force: bool = False) -> None:
    """Record ``chain`` in the store and hand its token out: to ``out`` (mode 0600, then a line
    saying so on stdout) or stdout (the grant's record committed only once the token is
    written and flushed). A file at ``out`` that is not empty is replaced only with
    ``force``, and that holds at the moment of writing (``replace_file``'s ``exclusive``; a key
    or a store there is refused as such, force or not): until review R72 the file was looked at
    first and a file made at ``out`` between the look and the rename was replaced; the look went
    in its second reading, the exclusive write being the one check.

    The token is written to a new 0600 file beside ``out`` first, then the name ``out`` is taken
    (without ``force``: held with a lock, which another such command is refused by); the grant is
    recorded only once that succeeded, and the file is put at ``out`` only once the grant is
    recorded (linked in place of the empty file taken, which fails rather than replace a file a
    writer that took no lock put there meanwhile: then the grant stays recorded, its token
    unwritten, and the error says to revoke it).
    Only a regular file at ``out`` is replaced (a symbolic link, directory or FIFO is refused). Raises ``InputError`` when ``out`` cannot be
    written: nothing is recorded, except where the rename itself fails once the grant is recorded
    (``EPERM``: another user's file in a sticky directory such as /tmp, or an immutable file, which
    no cheap look before recording tells for certain), and then the error names the grant and says
    to revoke it (until review R92b it said only "cannot write token"). Raises ``StoreError`` when
    the store fails (then ``out`` is untouched).
    """
    if out is None:
        # Recorded in a transaction committed once the token is written: one that cannot be
        # (a full disk, a reader gone) records nothing, as with --out (until review R88 the grant
        # stayed recorded, exit 2). A token is at most 32 KiB, which a pipe takes without
        # waiting for its reader, so the store's write lock is not held on the reader.
        with repo.store.transaction() as tx, repo.within(tx):
            record(repo, chain)
            sys.stdout.write(chain.token + "\n")
            sys.stdout.flush()
        return

    recorded: list[bool] = []

    def record_it() -> None:
        record(repo, chain)
        recorded.append(True)

    try:
        replace_file(out, (chain.token + "\n").encode("ascii"), 0o600, record_it, exclusive=not force)
    except HeldFile:
        raise InputError(
            f"{shown_path(out)}: another command is writing a token to it at this moment; nothing "
            "recorded: name another file"
        ) from None
    except UnopenableFile:
        raise InputError(
            f"{shown_path(out)}: a file you may not open is there: it cannot be held while the token is "
            "written, so it is not replaced; nothing recorded: name another file, or give --force to "
            "replace it if you may (not another user's file in a sticky directory such as /tmp, nor an "
            "immutable file)"
        ) from None
    except FilledFile:
        if recorded:  # a writer that took no lock put a file there while the grant was recorded
            raise InputError(
                f"{shown_path(out)}: a file was put there while grant {chain.id} was recorded: it is kept, "
                f"and the grant's token was not written; {_revoke_it(chain)}"
            ) from None
        raise _filled(out) from None
    except OSError as exc:
        if recorded:  # the rename refused (EPERM: another user's file in a sticky directory, immutable)
            raise InputError(
                f"{shown_path(out)}: cannot write token: {exc.strerror or exc}; grant {chain.id} was "
                f"recorded and its token not written; {_revoke_it(chain)}"
            ) from None
        raise InputError(f"{out}: cannot write token: {exc.strerror}") from None
    say_written(f"wrote {shown_path(out)} (grant {chain.id})")


def _revoke_it(chain: Chain) -> str:
    """What a user whose grant ``chain`` is recorded but whose token was not written is to do: no
    verb gives the token back from the store, and the grant stays valid until it expires."""
    return f"revoke it (agentgate grant revoke {chain.id}) and issue another to a file of its own"


@contextlib.contextmanager
def _repo(*, existing: bool = False) -> Iterator[GrantRepository]:
    """The grant store of ``AGENTGATE_STORE``, closed when the command is done with it. Left open,
    a PostgreSQL store's pool was collected at exit wherever its last reference went, at times in
    one of its own worker threads, whose ``__del__`` then printed a traceback (``RuntimeError:
    cannot join current thread``) after the verdict. ``existing``: for a command that decides
    against the store's revocations (``check``, ``delegate``), a store that does not exist is
    refused (``open_existing_store``), not created: its empty revocation list would let a
    revoked chain through."""
    store = (
        open_existing_store(
            None, init_hint=True, part_tables=tables_of(GRANTS_DDL["sqlite"]), named_by="AGENTGATE_STORE"
        )
        if existing
        else open_store()
    )
    try:
        repo = GrantRepository(store)
        try:
            yield repo
        finally:
            repo.close()
    finally:
        store.close()


def _budget(text: str | None) -> Budget | None:
    """``--budget``: in a unit agentgate meters, else refused (until review R62 ``5:usd``, a slip
    for ``usd_micros``, made a grant every call on which was refused later)."""
    return None if text is None else Budget.parse(text, metered=True)


def _finding_line(finding: Finding) -> str:
    """``kind code [field]: message``, one line safe to print: the library quotes the text a
    caller or a token gave (a tool name, an argument) escaped already (``repr``, a capability's
    percent-encoding), and what it did not is escaped here, once (``escaped_once``), so a hostile
    finding cannot add lines or send escape sequences (until review R59 it was printed raw)."""
    where = f" [{finding.field}]" if finding.field else ""
    return escaped_once(f"{finding.kind.value} {finding.code}{where}: {finding.message}")


def _issue(args: argparse.Namespace) -> int:
    _refuse_force_without_out(args)
    refuse_out_over_inputs(args.out, {"the policy file": args.policy, "the --to key file": args.to})
    key = load_signing_key(args.issuer)
    audience = load_public_key(args.to)
    purpose = args.purpose
    index = None
    if args.policy or args.role:
        capabilities, ttl, budget, depth, index = _role_grant(args, key.did, audience.did)
        purpose = purpose or f"role {args.role}"
    else:
        if not args.allow or args.ttl is None:
            raise InputError("grant issue needs --allow CAP and --ttl DURATION, or --policy FILE --role ROLE")
        capabilities, ttl, budget = _capabilities(args), parse_duration(args.ttl), _budget(args.budget)
        depth = 2 if args.max_depth is None else args.max_depth
    chain = issue(key, audience, capabilities, ttl=ttl, budget=budget, max_depth=depth, purpose=purpose)
    if index is not None:
        from agentgate.gate._policy_chain import chain_fault

        # A role held only through another that lives shorter or spends less: the decisions
        # would refuse every call on the grant, as Gate.issue refuses to make it.
        fault = chain_fault(index, chain)
        if fault is not None:
            raise InputError(f"--role {args.role}: {fault.message}")
    with _repo() as repo:
        _record_and_write(repo, chain, args.out, force=args.force)
    return 0


def _delegate(args: argparse.Namespace) -> int:
    _refuse_force_without_out(args)
    parent = _read_token(args.token)
    refuse_out_over_inputs(
        args.out, {"the token file delegated from": args.token, "the --to key file": args.to}
    )
    holder = load_signing_key(args.holder)
    audience, ttl, budget = load_public_key(args.to), parse_duration(args.ttl), _budget(args.budget)
    purpose = args.purpose
    with _repo(existing=True) as repo:
        revoked = repo.revoked(parent.ids)
        if revoked:
            sys.stderr.write("deny: " + _finding_line(revoked_finding(parent.ids, revoked)) + "\n")
            return 1
        try:
            chain = delegate(
                parent,
                holder,
                audience,
                _capabilities(args),
                ttl=ttl,
                budget=budget,
                max_depth=args.max_depth,
                purpose=purpose,
            )
        except AuthorityError as exc:
            if isinstance(exc.finding, Finding):
                sys.stderr.write("deny: " + _finding_line(exc.finding) + "\n")
            else:
                sys.stderr.write(f"deny: {escaped_once(str(exc))}\n")
            return 1
        _record_and_write(repo, chain, args.out, force=args.force)
    _warn_unmetered(chain)
    return 0


def _warn_unmetered(chain: Chain) -> None:
    """A warning (``agentgate.cli.warn``) where the new link spends from a budget the Gate cannot meter
    (a parent made by the library in another unit, kept by a delegation without ``--budget``):
    the delegation stands, as the token format allows it, but ``grant check`` denies its calls
    and the Gate refuses them (review R63: it was made without a word)."""
    found = _unmetered_from_tip(chain.budgets)
    if found is not None:
        warn(_finding_line(found))


def _revocations(ids: tuple[str, ...]) -> tuple[set[str] | None, str]:
    """Which of ``ids`` the store of ``AGENTGATE_STORE`` holds revoked, or ``None`` and why not.

    A look at a token creates no store and writes to no file: where there is none (a mistyped
    path), an empty new one would say "not revoked" of every link, so the answer is unknown
    instead. So it is where ``AGENTGATE_STORE`` names an empty file, another application's SQLite
    file (read before it is opened, by a read-only connection) or a PostgreSQL database that holds
    none of agentgate's tables: until review R53 such a file was opened as a store, agentgate's
    tables were written into it, and every link read as not revoked."""
    try:
        store = open_store(None, create=False, read_only=True)
    except NoStore as exc:
        if exc.reason == "missing":
            return None, "no store at AGENTGATE_STORE"
        if exc.reason == "empty":
            return None, "no store at AGENTGATE_STORE: the file is empty"
        return None, "no store at AGENTGATE_STORE: not an agentgate store"
    except StoreError:
        return None, "store unreachable"
    try:
        repo = GrantRepository(store)
        try:
            return repo.revoked(ids), ""
        finally:
            repo.close()
    except StoreError:
        return None, "store unreachable"
    finally:
        store.close()


def _untrusted_root(chain: Chain, anchors: frozenset[str]) -> Finding | None:
    """The library's ``untrusted_root`` finding when ``chain``'s root was issued by none of
    ``anchors``, as ``decide`` and ``grant check`` give it; ``None`` otherwise (a root with a
    finding of its own, shown already, is not read for trust)."""
    found = chain_finding(chain, anchors)
    return found if found is not None and found.code == "untrusted_root" else None


_ROOT_TRUST = {
    True: "root issuer: a trust anchor given with --trust",
    False: "root issuer: NOT one of the trust anchors given with --trust",
    None: "root issuer: not checked against trust anchors (give --trust PUBFILE|DID to check it)",
}
"""Inspect's last line on the root's issuer, as ``audit explain`` words its own."""


def _inspect(args: argparse.Namespace) -> int:
    chain = _read_token(args.token)
    # A --trust that is no public key is refused before anything is read from the store.
    anchors = None if args.trust is None else frozenset(load_public_key(spec).did for spec in args.trust)
    revoked, unknown = _revocations(chain.ids)
    untrusted = None if anchors is None else _untrusted_root(chain, anchors)
    root_trusted = None if anchors is None else chain.root.issuer in anchors
    now = int(time.time())
    links: list[dict[str, Any]] = []
    # The nearest link above that the store records revoked: a revocation takes every grant below
    # it, and the store records only the grant revoked (until review R67 a link below one was shown
    # unmarked, ``"revoked": false`` and nothing else, as if it held; ``audit explain`` names it).
    # A link inherits the revocation of its parent, found by id among the links above: one spliced
    # in from another chain (``parent_mismatch``) inherits none from a link that is not its
    # ancestor (until review R88 it was shown revoked through one), and one whose parent is a
    # revoked grant higher up than the link above inherits that grant's (until review R88b it
    # was shown not revoked). ``descends`` holds, by link id, the revocation its children inherit.
    descends: dict[str, str | None] = {}
    for i, link in enumerate(chain.links):
        through = None if link.parent is None else descends.get(link.parent)
        try:
            verify_signature(link.issuer, GRANT_CONTEXT + link.payload, link.signature)
            signature = "valid"
        except (InvalidSignature, KeyFileError):
            signature = "INVALID"
        found = link_findings(chain.links[:i], link) if i else root_findings(link)
        if i == 0 and untrusted is not None:
            found = [*found, untrusted]
        unmetered = _unmetered_finding(link.id, link.budget)
        if unmetered is not None:
            found = [*found, unmetered]
        problems = [f.as_json() for f in found]
        links.append(
            {
                **link.to_dict(),
                "signature": signature,
                "revoked": None if revoked is None else link.id in revoked,
                "revoked_through": through,
                "expired": now >= link.expires,
                # As a verifier reads not_before, with its default tolerance of clock skew: until
                # review R61 a link valid only in an hour was shown unmarked and inspect exited 0.
                "not_yet_valid": now + DEFAULT_SKEW < link.not_before,
                "findings": problems,
            }
        )
        descends[link.id] = link.id if revoked is not None and link.id in revoked else through
    # Exit 1 for a chain with a marked link, so that ``grant inspect t.tok && deploy`` stops
    # there: until review R61 a spliced or forged chain printed its finding and exited 0.
    marked = any(
        shown["signature"] != "valid"
        or shown["findings"]
        or shown["revoked"]
        or shown["revoked_through"]
        or shown["expired"]
        or shown["not_yet_valid"]
        for shown in links
    )
    if args.json:
        write_json({"tip": chain.id, "holder": chain.holder, "root_trusted": root_trusted, "links": links})
        return 1 if marked else 0
    out = [f"chain of {len(links)} link(s); holder {chain.holder}; tip {chain.id}"]
    for i, shown in enumerate(links):
        pad = "   " * i
        marks = []
        if shown["revoked"]:
            marks.append("REVOKED")
        elif shown["revoked_through"] is not None:
            above = next(j for j, other in enumerate(links) if other["id"] == shown["revoked_through"])
            marks.append(f"revoked through [{above}] {shown['revoked_through'][:16]}...")
        elif shown["revoked"] is None:
            marks.append(f"revocation unknown ({unknown})")
        if shown["expired"]:
            marks.append("EXPIRED")
        if shown["not_yet_valid"]:
            marks.append("NOT YET VALID")
        if shown["signature"] != "valid":
            marks.append("SIGNATURE INVALID")
        mark = f"  [{', '.join(marks)}]" if marks else ""
        out.append(f"{pad}└─ [{i}] {shown['id']}{mark}")
        out.append(f"{pad}     {shown['issuer']}")
        out.append(f"{pad}       gave {shown['audience']}")
        for cap in shown["capabilities"]:
            out.append(f"{pad}     allow {printable(str(cap))}")
        budget = shown["budget"]
        out.append(
            f"{pad}     budget {'unlimited' if budget is None else str(budget['amount']) + ' ' + budget['unit']}"
            f" · valid {utc(shown['not_before'])} → {utc(shown['expires'])} · may delegate {shown['max_depth']} more"
        )
        if shown["purpose"]:
            out.append(f"{pad}     purpose: {printable(shown['purpose'])}")
        for problem in shown["findings"]:
            out.append(f"{pad}     ! {problem['kind']} {problem['code']}: {printable(problem['message'])}")
    out.append(_ROOT_TRUST[root_trusted])
    sys.stdout.write("\n".join(out) + "\n")
    return 1 if marked else 0


def _check(args: argparse.Namespace) -> int:
    chain = _read_token(args.token)
    holder = load_signing_key(args.holder)
    anchors = [load_public_key(spec) for spec in args.trust]
    call_args = json_object(args.args)
    # Not canonicalized here: an ambiguous name must reach decide() and be denied with a finding.
    call = (
        Call(f"tool:{args.tool}", "invoke", call_args)
        if args.tool is not None
        else Call(f"model:{args.model}", "generate", call_args)
    )
    invocation = Invocation.sign(holder, chain, call)
    with _repo(existing=True) as repo:
        decision = _decided(repo, invocation, chain, anchors)
    if args.json:
        write_json(decision.to_dict())
    else:
        lines = [f"{decision.outcome.value}: {escaped_once(reason)}" for reason in decision.reasons]
        lines += ["  " + _finding_line(f) for f in decision.findings]
        sys.stdout.write("\n".join(lines) + "\n")
    return {Outcome.ALLOW: 0, Outcome.DENY: 1, Outcome.APPROVAL_REQUIRED: 3}[decision.outcome]


class _Undone(Exception):
    """Raised out of a transaction to roll it back, carrying the decision made in it."""

    def __init__(self, decision: Decision) -> None:
        super().__init__()
        self.decision = decision


def _decided(
    repo: GrantRepository, invocation: Invocation, chain: Chain, anchors: list[PublicKey]
) -> Decision:
    """``decide`` as the Gate meters (``_as_the_gate_meters``). On a chain with a budget the Gate
    cannot meter every answer is a deny, and a deny leaves the store as it was: ``decide`` is
    asked all the same (the chain's own fault is said first, as the Gate says it), in a transaction
    rolled back after, so the nonce it records for an allow is not kept (until review R65 a check
    refused for its budget's unit recorded it). ``decide`` itself records the nonce in the step
    that reads the revocations, so it cannot be asked to decide without it."""
    if _unmetered_from_tip(chain.budgets) is None:
        return _as_the_gate_meters(decide(invocation, repo=repo, trusted=anchors))
    try:
        with repo.store.transaction(immediate=False) as tx, repo.within(tx):
            raise _Undone(_as_the_gate_meters(decide(invocation, repo=repo, trusted=anchors)))
    except _Undone as undone:
        return undone.decision


def _unmetered_finding(grant_id: str, budget: Budget | None) -> Finding | None:
    """``budget_unit_not_metered`` for a grant whose budget is in a unit the Gate does not charge
    (``METERED_UNITS``), which the token format allows (a token made by the library or by another
    implementation: ``5 usd``); ``None`` for a metered budget or none."""
    if budget is None or budget.unit in METERED_UNITS:
        return None
    return Finding(
        kind=FindingKind.AUTHORITY_CHAIN_OPACITY,
        code="budget_unit_not_metered",
        message=f"the budget of {budget.amount} {budget.unit!r} cannot be metered (agentgate charges "
        f"{METERED_IN_WORDS}): the Gate refuses every call on this grant",
        grant=grant_id,
        field="budget",
    )


def _unmetered_from_tip(budgets: Sequence[tuple[str, Budget]]) -> Finding | None:
    """``_unmetered_finding`` of the budget nearest the tip of a chain's ``(grant id, budget)``
    pairs, root first (``Chain.budgets``, ``Decision.budgets``), that the Gate cannot meter;
    ``None`` if it can meter them all. (A chain's
    budgets share one unit: a child in another is ``budget_unit_changed``.)"""
    return next((f for f in (_unmetered_finding(g, b) for g, b in reversed(budgets)) if f is not None), None)


def _as_the_gate_meters(decision: Decision) -> Decision:
    """``decision``, or a deny where it would let a call spend from a budget the Gate cannot
    meter: the Gate refuses such a call after deciding its chain (fail closed: a budget never
    charged would let its grant spend without limit), and until review R63 ``grant check``
    printed ``allow`` for it. ``decide`` itself keeps to the token format, which allows the unit.
    A denial stands as it is: the chain's own fault is said first, as the Gate says it."""
    if decision.outcome is Outcome.DENY:
        return decision
    found = _unmetered_from_tip(decision.budgets)
    if found is None:
        return decision
    return dataclasses.replace(
        decision, outcome=Outcome.DENY, reasons=(found.message,), findings=(found,), approval=None
    )


_NOT_COVERED = (
    "grants to {did} that this store never recorded (issued or delegated to it offline, and no call "
    "allowed on them through a Gate of this store; or recorded in another store) are not revoked: remove the key from the policy and restart "
    "(docs/operations.md, Rotating keys)"
)


def _warn_unprotected(store: Store) -> None:
    """A warning (``agentgate.cli.warn``) naming a trigger of the audit log's machinery not in force, read
    from the catalog before the log is opened to write, which puts it back where this role may:
    ``audit verify`` then no longer names it. A revocation always goes through, so this is said,
    not refused (``audit checkpoint``, which would sign over the log, refuses)."""
    unprotected = unprotected_log(store)
    if unprotected:
        warn(
            f"{printable(unprotected)}; the revocation goes through, and "
            "opening the log to write puts the trigger back where this role may, after which audit "
            "verify no longer names it: run agentgate audit verify for what was edited meanwhile"
        )


@contextlib.contextmanager
def _revoking(
    store: Store,
    args: argparse.Namespace,
    *,
    first: Callable[[GrantRepository], None] = lambda repo: None,
    then: Callable[[GrantRepository], None] = lambda repo: None,
) -> Iterator[tuple[GrantRepository, Callable[[Iterable[str]], None]]]:
    """The store's grants bound to one transaction that holds the audit log's lock, as
    ``Gate.revoke`` takes it, and what appends a ``revoke`` entry for each grant id given and
    closes the approval requests their revocation makes void (each with its ``deny`` entry): the
    revocations and their entries commit together or not at all. ``first`` reads the store
    before that transaction begins (``scan_holder``: no write lock held while it reads), ``then``
    once it has committed (never if it failed). The log key is refused at once if garbage; the
    store is closed at the end."""
    # The audit log's layer: only the revoking verbs write to it.
    from agentgate.gate._records import revocation_entry, voided_request_entry, voided_request_reason
    from agentgate.store.approvals import ApprovalStore
    from agentgate.store.audit import AuditLog, log_origin, open_log_key

    try:
        repo = GrantRepository(store)
        try:
            _warn_unprotected(store)
            log = AuditLog(store, open_log_key(store), log_origin(), key_named="AGENTGATE_LOG_KEY")
            approvals: ApprovalStore | None = None
            with contextlib.suppress(StoreError):
                # Tables this version adds to approvals, missing and not creatable by this role (an
                # upgrade whose ``store init`` was not run): the revocation is made all the same, and
                # its void requests, already refused and unlisted, are closed when their call is.
                approvals = ApprovalStore(store)
            first(repo)
            with store.transaction() as tx, repo.within(tx):
                log.lock(tx)

                def audit(grant_ids: Iterable[str]) -> None:
                    revoked = list(grant_ids)
                    for grant_id in revoked:
                        log.append(revocation_entry(grant_id, args.by, args.reason), tx)
                    # The approval requests the revocation makes void, closed with it, as Gate.revoke does.
                    closed = [] if approvals is None else approvals.void_standing_on(revoked, tx=tx)
                    for approval_id, grant_id, asked_index in closed:
                        if asked_index is not None:
                            reason = voided_request_reason(approval_id, grant_id)
                            asked = log.entry(asked_index, tx)
                            log.append(voided_request_entry(asked, asked_index, reason, None), tx)

                yield repo, audit
            then(repo)
        finally:
            repo.close()
    finally:
        store.close()


def _exists(path: str) -> bool:
    """Whether anything is at ``path``, a symbolic link included (one that loops or names no file
    is read as the token file named, and refused saying why, not as no file at all; until review
    R55, 'neither a token file nor a 64-hex grant id'); ``False`` for a name no file can have
    (too long)."""
    try:
        return os.path.lexists(path)
    except (OSError, ValueError):
        return False


_UNRECORDED = (
    "no grant with this id is recorded in this store; it is revoked all the same (a grant made "
    "elsewhere, offline or recorded in another store, is refused wherever this store is read), but "
    "if you typed the id, check it: a mistyped one revokes no grant that exists (grant inspect "
    "TOKENFILE shows a chain's ids)"
)
"""What ``grant revoke`` says of an id the store never recorded (until review R64 nothing: a
mistyped id printed ``revoked ID``, exit 0, as a real grant does)."""


def _revoke(args: argparse.Namespace) -> int:
    if args.holder is not None:
        return _revoke_holder(args)
    target: str = args.target
    if re.fullmatch(r"[0-9a-f]{64}", target):
        grant_id = target
    elif _exists(target):
        grant_id = _read_token(Path(target)).id
    elif target.startswith(f"{TOKEN_PREFIX}."):  # pasted, as "$(cat a.tok)": no file of that name
        raise InputError(
            "the argument is a token itself, not the path of a token file: give the file, or the "
            "grant id (grant inspect shows it)"
        )
    elif re.fullmatch(r"[0-9a-fA-F]{64}", target):
        raise InputError(f"{target!r}: a grant id is 64 lower-case hex digits (as grant inspect shows it)")
    else:
        raise InputError(f"{target!r} is neither a token file nor a 64-hex grant id")
    below: list[str] = []
    found: list[bool] = []
    already = False

    def read_after(repo: GrantRepository) -> None:
        # Once the revocation committed, as --holder reads (review R71): on another connection
        # they kept the revoking transaction open and, on SQLite, its write lock held (until
        # review R85).
        try:
            below.extend(repo.descendants(grant_id))
            found.append(GrantRepository.recorded(repo.store, grant_id) is not None)
        except StoreError as exc:
            done = "was already revoked (nothing written)" if already else "revoked and audited (committed)"
            raise StoreError(
                f"grant {grant_id} {done}; then reading its record and recorded descendants failed: "
                f"{exc} (a second run reads them and logs nothing)"
            ) from exc

    # A store that does not exist is a mistyped --store (or working directory): a new empty one
    # would take the revocation where no gateway reads it, and the command would say "revoked".
    with _revoking(open_existing_store(args.store, init_hint=True), args, then=read_after) as (repo, audit):
        # Read under the audit log's lock, in the transaction that would revoke: a second run
        # (a retried script) logs no second "revoke" with a later time and another reason.
        already = bool(repo.revoked([grant_id]))
        if not already:
            revoke(repo, grant_id, reason=args.reason)
            audit([grant_id])
    recorded = found[0]
    if args.json:
        done = {"revoked": [] if already else [grant_id], "already_revoked": [grant_id] if already else []}
        with work_done_said():  # committed: exit 0 whether or not this can be written (review R83)
            write_json(
                {**done, "descendants": below, "recorded": recorded}
                | ({} if recorded else {"note": _UNRECORDED})
            )
        return 0
    if not recorded:
        sys.stderr.write(f"note: {_UNRECORDED}\n")
    with work_done_said():
        sys.stdout.write(f"{'already revoked (nothing written)' if already else 'revoked'} {grant_id}\n")
        if below:
            # Ids read from rows, which whoever may insert into the table wrote: escaped, as
            # --holder's (until review R85 written raw: a planted id could add lines).
            sys.stdout.write(
                f"{len(below)} recorded descendant grant(s) are dead with it: {printable(', '.join(below))}\n"
            )
    return 0


_UNTRUSTED = (
    "{n} recorded row(s) name {did} as the holder but their token does not (a row "
    "written by hand, not by agentgate): not revoked: {ids}"
)
"""What ``grant revoke --holder`` says of the rows ``revoke_holder`` could not trust (until
review R68 it revoked and logged their grants as the key's, on the ``audience`` column alone)."""

_MISLABELED = (
    "{n} recorded row(s) hold a grant of {did} by their token but name another holder "
    "(a row written by hand, not by agentgate): revoked as the key's: {ids}"
)
"""What ``grant revoke --holder`` says of the key's grants whose rows name another audience
(until review R69 they were missed: only the ``audience`` column was searched)."""


def _revoke_holder(args: argparse.Namespace) -> int:
    """``grant revoke --holder``: every grant the store records for a key, with one audit entry
    per grant revoked, all in one transaction (nothing revoked or logged if any part fails)."""
    did = load_public_key(args.holder).did  # a bad DID or file: exit 2 before the store is opened
    scans: list[HolderScan] = []
    held: set[str] = set()
    below: list[str] = []
    revoked: list[str] = []

    def scan(repo: GrantRepository) -> None:
        scans.append(scan_holder(repo, did))

    def read_below(repo: GrantRepository) -> None:
        # Once the revocations committed: a read on another connection would keep the revoking
        # transaction idle (PostgreSQL ends it after idle_in_transaction_session_timeout) and
        # SQLite's write lock held (until review R71). One statement for all of them (until
        # review R72 one per grant).
        try:
            below.extend(repo.descendants_of(held))
        except StoreError as exc:
            # After the commit: said as such (until review R71 the store's error alone, which
            # read as if nothing was revoked).
            raise StoreError(
                f"{len(revoked)} grant(s) of {did} revoked and audited (committed), "
                f"{len(held) - len(revoked)} already revoked; then listing their recorded "
                f"descendants failed: {exc} (a second run lists them and logs nothing for these)"
            ) from exc

    # A store that does not exist is a mistyped --store, not an empty answer ("no recorded grants").
    store = open_existing_store(args.store, init_hint=True)
    with _revoking(store, args, first=scan, then=read_below) as (repo, audit):
        done = revoke_holder(repo, did, reason=args.reason, scan=scans[0])
        audit(done.revoked)
        held.update(done.revoked, done.already)
        revoked.extend(done.revoked)
    not_covered = _NOT_COVERED.format(did=did)
    if args.json:
        shown = {
            "holder": did,
            "revoked": list(done.revoked),
            "already_revoked": list(done.already),
            "descendants": below,
            "untrusted": list(done.untrusted),
            "mislabeled": list(done.mislabeled),
            "not_covered": not_covered,
        }
        with work_done_said():  # committed: exit 0 whether or not this can be written (review R83)
            write_json(shown)
        return 0
    if done.untrusted:
        warn(_UNTRUSTED.format(n=len(done.untrusted), did=did, ids=printable(", ".join(done.untrusted))))
    if done.mislabeled:
        warn(_MISLABELED.format(n=len(done.mislabeled), did=did, ids=printable(", ".join(done.mislabeled))))
    lines = []
    if not held:
        lines.append(f"no recorded grants held by {did} in this store: nothing revoked")
    else:
        lines.append(f"revoked {len(done.revoked)} grant(s) held by {did}")
        if done.already:
            lines.append(f"{len(done.already)} grant(s) it holds were already revoked")
        if below:
            lines.append(f"{len(below)} recorded descendant grant(s) are dead with them")
    lines.append("note: " + not_covered)
    say_written("\n".join(lines))
    return 0
