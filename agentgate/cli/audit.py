"""``agentgate audit``: verify, read, prove and report on the signed audit log.

    agentgate audit verify [--checkpoint FILE] [--key PUBFILE] [--json]
                                                     exit 0 intact, 1 tampered, 2 unusable
    agentgate audit show [--principal DID] [--tool NAME] [--kind KIND] [--since TIME] [--json]
    agentgate audit explain INDEX [--trust PUBFILE|DID]   the authority behind one entry, its
                                                     related entries (found by index), proven in
                                                     the log; whether the root is a trusted anchor
    agentgate audit checkpoint [--out FILE]          sign and store a checkpoint, print or save it
                                                     (exit 1, nothing signed: the log does not extend
                                                     the checkpoint stored last or saved in FILE;
                                                     exit 2: FILE holds no checkpoint of this log)
    agentgate audit prove INDEX --out FILE           a C2SP tlog-proof bundle for one entry
    agentgate audit verify-proof FILE --key PUBFILE  offline, with only the log's public key
    agentgate audit report --out FILE.html           one self-contained page for people (verifies
                                                     first: exit 1 if tampered, the page says so)

The store is ``--store`` or ``AGENTGATE_STORE``; the log key is found as docs/operations.md says
(``AGENTGATE_LOG_KEY``, else ``log.key`` next to the SQLite database); the verbs that only read
(verify, show, explain, report) take ``--key PUBFILE`` instead, the log's public key, so that an
auditor with a copy of the database and ``log.pub`` needs nothing else; the log's origin is
``AGENTGATE_LOG_ORIGIN`` (default ``agentgate.local/audit``); checkpoints signed by rotated-out log
keys verify when ``AGENTGATE_LOG_PREVIOUS_KEYS`` lists their public keys.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import sqlite3
import stat
import sys
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path

from agentgate.audit.entry import AuditEntry
from agentgate.audit.note import Checkpoint, key_id, other_signer, verifier_key, wrong_key_cause
from agentgate.audit.proof import HEADER as PROOF_HEADER
from agentgate.audit.proof import ProofBundle, verify_bundle
from agentgate.audit.report import (
    PAGE_START,
    budget_figure,
    charged_text,
    each_charge,
    render_report,
    spent_unit,
)
from agentgate.cli import warn
from agentgate.cli._audit_parser import register as register
from agentgate.cli._common import (
    escaped_once,
    open_audit_log,
    open_existing_store,
    printable,
    refusal,
    say_written,
    unprotected_log,
    utc,
    write_json,
)
from agentgate.errors import (
    BeyondLogEnd,
    InputError,
    KeyFileError,
    LogDropped,
    RepairRefused,
    StoreError,
    TamperDetected,
)
from agentgate.keys import (
    FilledFile,
    PublicKey,
    load_public_key,
    output_file_start,
    read_regular_file,
    replace_file,
    shown_path,
)
from agentgate.store import SQLiteStore, Store
from agentgate.store._base import loaded_driver_errors
from agentgate.store._existing import resolved
from agentgate.store.audit import AuditLog, Explanation, VerifyReport, log_key_path
from agentgate.store.grants import GrantRepository


def _accept_repair(args: argparse.Namespace) -> int:
    """Write the acceptance of a repair into ``audit_repairs``; the log is not opened to write (no
    trigger is put back, no key is read). Exit 0 accepted; 1 refused (``REFUSED: ...`` on standard
    output, nothing written): an id that names no repair (none recorded in this store at all
    included, and a protection trigger an upgrade added), or one accepted already
    (``RepairRefused``), well-formed input asking what may not
    be done (until review R59 exit 2, which is kept for input the command cannot use: a blank
    ``--by`` or ``--reason``)."""
    from agentgate.store.audit._schema import accept_repair, refuse_dropped_log

    for flag, value in (("--by", args.by), ("--reason", args.reason)):
        if not value.strip():
            raise InputError(f"{flag} is blank: accepting a repair needs who accepts it and why")
    store = open_existing_store(args.store)
    with store:
        refuse_dropped_log(store)
        try:
            said = accept_repair(store, args.repair, args.by, args.reason)
        except RepairRefused as exc:
            sys.stdout.write(refusal(str(exc)))
            return 1
    say_written(
        f"accepted: {printable(said)}, by {printable(args.by)}; audit verify now prints it as information"
    )
    return 0


def _open(args: argparse.Namespace, *, create_key: bool = False) -> tuple[Store, AuditLog]:
    reads = hasattr(args, "key")  # verify, show, explain, report take --key PUBFILE; prove signs
    # Each opens the log without writing (``create_log=False``): no table in a store that has none
    # (``log.exists`` is then False), and in a log that exists no trigger, index row, cached node
    # or record put back: a verb that reads changes nothing (verify reports a missing trigger),
    # and prove writes only the checkpoint it signs when the log grew since the last one.
    # Those that only read (not prove) open the store to read only: nothing in it is written, a
    # SQLite file's journal mode and write-ahead log included, and a copy the auditor may only read
    # can be verified (docs/operations.md).
    return open_audit_log(
        args.store,
        getattr(args, "key", None),
        create_key=create_key,
        reads=reads,
        create_log=False,
        read_only=reads,
        signs=not reads,  # prove: it signs a checkpoint where the log grew
    )


def _nothing_signed_and_no_key(args: argparse.Namespace, saved: str | None) -> bool:
    """Whether ``verify`` reads the log with no key: none given (``--key``) or found where
    agentgate looks for the log key, no ``--checkpoint``, and no checkpoint stored (or no log):
    there is no signature to check. Until review R71 such a store (``store init`` just made it)
    was exit 2 for want of a key that signs only the next checkpoint."""
    if args.key or saved is not None:
        return False
    store = open_existing_store(args.store, read_only=True)
    with store:
        try:
            if os.path.lexists(log_key_path(store)):
                return False
        except KeyFileError:
            return False  # named in a way opening the log refuses, in its words
        try:
            return not store.query("SELECT 1 FROM audit_checkpoints LIMIT 1")
        except loaded_driver_errors(StoreError):
            return True  # no log's tables (none made, or dropped: opening the log says which)


def _open_unsigned(args: argparse.Namespace) -> tuple[Store, AuditLog]:
    """The store and its log as ``_open`` opens them for a verb that reads, with a public key
    that signs nothing (``_nothing_signed_and_no_key``)."""
    return open_audit_log(args.store, reads=True, create_log=False, read_only=True, unsigned=True)


_NO_LOG_YET = "no audit log in this store yet; nothing was created"
"""What the verbs that only read say of a store where no log was ever made."""


MAX_CHECKPOINT_FILE_BYTES = 1 << 16
"""The most a saved checkpoint file may hold (a signed note is a few hundred bytes)."""

MAX_BUNDLE_FILE_BYTES = 1 << 20
"""The most a proof bundle file may hold (``verify_bundle`` refuses larger bundles anyway)."""


def _read(path: str, limit: int, what: str) -> str:
    """The text of the regular file ``path``, at most ``limit`` bytes: a FIFO, device or directory
    is refused at once, a larger file after reading ``limit + 1`` bytes. Raises ``InputError``."""
    data, _ = read_regular_file(path, limit, what)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise InputError(f"{path}: cannot read {what}: not UTF-8 text") from None


def _refuse_unwritable(path: str) -> None:
    """Raise ``InputError`` when ``_write_checked`` could not replace ``path``: something other than a
    regular file is there (a symbolic link, a directory, a FIFO, a device), or no directory to
    write it in. Checked before anything is signed: a command that fails stores no checkpoint,
    and ``checkpoint --out`` never signs a log it did not compare with the checkpoint there."""
    try:
        mode: int | None = os.lstat(path).st_mode
    except FileNotFoundError:
        mode = None
    except OSError as exc:
        raise InputError(f"{path}: cannot write: {exc.strerror or exc}") from None
    if mode is not None and not stat.S_ISREG(mode):
        kind = "a symbolic link" if stat.S_ISLNK(mode) else "not a regular file"
        raise InputError(f"{path}: cannot write: {kind} is there; refusing to replace it")
    if not Path(path).parent.is_dir():
        raise InputError(f"{path}: cannot write: no directory {Path(path).parent} to write it in")


def _write_own(path: str, text: str, ours: str, what: str, *, earlier: bool) -> None:
    """The write of ``prove`` and ``report``, whose ``path`` was looked at before the log was
    read (``_refuse_replacing``, before anything is signed; ``earlier`` is what it returned): that
    refusal holds at the moment of writing too (until review R73 a file put there in between was
    replaced unread), through ``_write_checked``'s two looks, which close the window. Until review
    R74 ``path`` was also looked at once more on entry, which only chose between them with a later
    view (and so replaced, rather than kept, an output of this verb that another run wrote
    meanwhile where nothing was). Raises ``InputError``."""
    _write_checked(path, text, what, earlier, lambda: _refuse_replacing(path, ours, what))


def _write_checked(path: str, text: str, what: str, earlier: bool, look_again: Callable[[], object]) -> None:
    """Write ``text``, the ``what`` (a proof bundle, a report page, a checkpoint), to ``path``,
    which the command looked at before it read the log, so that what it judged there is what is
    replaced. Where nothing or an empty file was there (``earlier`` false), the write is
    ``replace_file``'s ``exclusive`` one (a file put there meanwhile is kept); where an earlier
    output was there (or an empty file the user may not read), ``path`` is looked at again once
    ``text`` is written beside it, just before the rename: still a regular file
    (``_refuse_unwritable``: until review R74 a symbolic link put in its place was replaced), and
    still what ``look_again`` accepts (it raises ``InputError`` otherwise). Raises
    ``InputError``."""

    def still_there() -> None:
        _refuse_unwritable(path)
        look_again()

    try:
        replace_file(
            Path(path),
            text.encode("utf-8"),
            0o644,
            still_there if earlier else None,
            exclusive=not earlier,
        )
    except FilledFile as exc:  # or ``HeldFile``: another such command is writing it
        raise InputError(
            f"{path}: cannot write: {exc.strerror} at the moment of writing the {what}; it is "
            "kept, nothing written (move it away or name another file)"
        ) from None
    except OSError as exc:
        raise InputError(f"{path}: cannot write: {exc.strerror or exc}") from None


def _refuse_changed_checkpoint(path: str, compared: str) -> None:
    """Raise ``InputError`` unless the file ``path`` still holds ``compared``, the saved checkpoint
    ``checkpoint --out`` found there and compared the log with before signing: another checkpoint
    saved there since (or anything else) is kept, as ``_saved`` keeps what is not a checkpoint
    (until review R74 it was replaced unread)."""
    try:
        same = _saved(path) == compared
    except InputError:
        same = False
    if not same:
        raise InputError(
            f"{path}: cannot write: it changed while the checkpoint was signed (it no longer holds "
            "the checkpoint the log was compared with); it is kept, nothing written to it (move it "
            "away or name another file)"
        )


def _refuse_replacing(path: str, ours: str, what: str) -> bool:
    """Raise ``InputError`` when the regular file ``path`` is not empty and does not begin with
    ``ours``, as ``what`` (the output of this verb: a proof bundle, a report page) begins, so that
    ``prove`` and ``report`` replace only a file they wrote before; return whether the write is to
    look at ``path`` again before its rename (``_write_checked``'s ``earlier``): for a file they
    wrote before, and for an empty file the user may not read, which the exclusive write cannot
    hold open (until review R91d it was refused as one that "may hold a private key", where every
    other ``--out`` replaces it); ``False`` for no file or an empty one. A saved checkpoint is the
    evidence of a rollback (``audit verify --checkpoint``), and a damaged one (a line edited, its
    signature cut off) or any other text is what someone kept there: until review R72 every file
    was replaced unread, and until review R73 all but a well-formed checkpoint. One that is not a
    regular file was refused by ``_refuse_unwritable``. Its start is read by the check of every
    ``--out`` (``output_file_start``: a leased file waited for, a file gone meanwhile taken as
    none, its refusals in the same words)."""
    try:
        start = output_file_start(path, len(ours.encode("utf-8")))
    except OSError as exc:
        raise InputError(f"{path}: cannot write: {exc.strerror or exc}") from None
    if start is None:  # an empty file the user may not read
        return True
    if not start or start == ours.encode("utf-8"):
        return bool(start)
    keep = "refusing to replace it (move it away or name another file)"
    try:  # a copy whose line breaks became CRLF is a checkpoint too, as checkpoint --out keeps it (R72)
        _parse_saved(_read(path, MAX_CHECKPOINT_FILE_BYTES, "file").replace("\r\n", "\n"))
    except (InputError, TamperDetected):
        raise InputError(
            f"{path}: cannot write: it is not empty and holds no {what} written before (a damaged "
            f"checkpoint, another file); {keep}"
        ) from None
    raise InputError(
        f"{path}: cannot write: it holds a saved checkpoint, the evidence audit verify --checkpoint "
        f"reads; {keep}"
    )


def _refuse_own_files(path: str, store: Store, key: str | None) -> None:
    """Raise ``InputError`` when ``path`` is a file this command reads, however spelled: the
    SQLite database (with its write-ahead log, shared memory and journal), the log key and the
    ``log.pub`` beside it, or the ``--key`` file. ``--out`` would replace it with what it
    writes: the evidence, or the key that signs it, gone at a slip of tab completion. The
    database's other files are those SQLite keeps beside the file the store's path names
    (``resolved``): until review R87b they were looked for beside a symbolic link to it, and the
    write-ahead log a running gateway holds, named by its real path, was written over."""
    ours: list[tuple[Path, str]] = []
    if isinstance(store, SQLiteStore):
        database = resolved(store.path)
        ours += [
            (Path(f"{database}{end}"), "the store's database") for end in ("", "-wal", "-shm", "-journal")
        ]
    try:
        private = log_key_path(store)
    except KeyFileError:
        pass  # named in a way opening the log already refused or did not need
    else:
        ours += [(private, "the log key"), (private.with_suffix(".pub"), "the log's public key")]
    if key:
        ours.append((Path(key), "the --key file"))
    for own, what in ours:
        try:
            if os.path.lexists(own):
                same = os.path.samefile(path, own)
            else:  # not made yet (a log key ``checkpoint`` is about to create): the same name
                same = os.path.realpath(path) == os.path.realpath(own)
        except (OSError, ValueError):
            continue  # ``path`` does not exist (nothing there to lose), or one cannot be named
        if same:
            raise InputError(f"{path}: cannot write: it is {what} ({own}); name another file")


UNSIGNED = " (unsigned: no checkpoint yet, protected only by the database's triggers)"
"""What ``verify`` adds to the verdict ``intact`` of a log with entries that no checkpoint signs."""


def _verified(
    args: argparse.Namespace, saved: str | None, *, keyless: bool
) -> tuple[AuditLog, VerifyReport | None]:
    """The log ``verify`` reads (with a public key that signs nothing when ``keyless``, else as
    ``_open``) and its report against ``saved``, the store closed again; the report is ``None``
    where no log was ever made (``log.exists`` false). Raises ``LogDropped`` for a dropped log,
    and ``InputError`` for a saved checkpoint that is not this log's."""
    store, log = _open_unsigned(args) if keyless else _open(args)
    with store:
        if saved is not None:
            # The saved checkpoint is the caller's evidence, not the database's: one that is not
            # this log's (another key or origin, an edited or damaged copy) says nothing about the
            # log, so it is unusable input (exit 2), not tampering found in the log (exit 1).
            try:
                log.open_checkpoint(saved)
            except TamperDetected as exc:
                raise InputError(
                    f"{args.checkpoint}: not a checkpoint of this log signed by its key: {exc}"
                ) from exc
        if not log.exists:
            return log, None
        return log, log.verify(saved_checkpoint=saved)


def _verify(args: argparse.Namespace) -> int:
    saved = None
    if args.checkpoint:
        saved = _read(args.checkpoint, MAX_CHECKPOINT_FILE_BYTES, "checkpoint")
        try:
            _parse_saved(saved)
        except TamperDetected as exc:
            raise InputError(f"{args.checkpoint}: not a checkpoint: {exc}") from exc
    try:
        keyless = _nothing_signed_and_no_key(args, saved)
        log, report = _verified(args, saved, keyless=keyless)
        if keyless and report is not None and report.unopened_signers:
            # A checkpoint signed since it was looked for: read again as without this way in, with
            # the log key (or refused for want of it), so that no checkpoint reads as tampering.
            # A log dropped meanwhile is the verdict below, as at the first opening (until review
            # R72 this opening was not guarded: exit 2, ``agentgate: error:``).
            log, report = _verified(args, saved, keyless=False)
    except LogDropped as exc:  # not an empty log: the log's tables are gone
        if args.json:
            dropped = [_problem("log", str(exc))]
            write_json(_verdict_json(None, log_exists=False, problems=dropped, saved=saved is not None))
            return 1
        print("TAMPERED: 1 problem(s)")
        print(f"  - {printable(str(exc))}")
        return 1
    if report is None:
        return _verify_no_log(log, saved, as_json=args.json)
    if args.json:
        write_json(_verdict_json(report, wrong_key=_wrong_key(report, log), saved=saved is not None))
        return 0 if report.ok else 1
    if report.ok:
        # Nothing signs a log with entries and no checkpoint: the verdict says so, so that "intact"
        # is not read as "signed" (the triggers alone keep it; their owner can disable them).
        unsigned = UNSIGNED if report.size and not report.checkpoints_checked and saved is None else ""
        print(
            f"intact: {_counted(report.size, 'entry', 'entries')}, root {report.root.hex()}, "
            f"{_counted(report.checkpoints_checked, 'checkpoint', 'checkpoints')}"
            f"{unsigned or _not_yet_covered(report)}"
        )
        _print_accepted(report)
        return 0
    print(f"TAMPERED: {len(report.problems) + len(report.unprotected)} problem(s)")
    wrong_key = _wrong_key(report, log)
    if wrong_key:
        print(wrong_key)
    if report.first_bad_index is not None:
        print(f"first bad index: {report.first_bad_index}")
    # The library escaped what it quoted of an entry (``problems``), but names a trigger as SQL
    # does, raw (``unprotected``): whoever made it chose its characters (until review R59 an
    # escape sequence in one reached the terminal as it was). Escaped as audit checkpoint's
    # refusal escapes the same line.
    for problem in report.problems:
        print(f"  - {escaped_once(problem)}")
    for line in report.unprotected:
        print(f"  - {printable(line)}")
    if report.entries_verify:
        # Only the log's machinery is wrong: the entries as they are now still verify.
        print(
            f"the entries verify: {_counted(report.size, 'entry', 'entries')}, root {report.root.hex()}, "
            f"{_counted(report.checkpoints_checked, 'checkpoint', 'checkpoints')}"
            f"{_not_yet_covered(report, _REFUSED_UNTIL_INTACT)}; {_machinery_said(report)}"
        )
    _print_accepted(report)
    return 1


_COVER = ": run agentgate audit checkpoint"
"""What ``verify`` says to do for entries that no checkpoint covers yet, in a log verified intact."""

_REFUSED_UNTIL_INTACT = "; audit checkpoint signs none until audit verify says intact"
"""What ``verify`` says of those entries when only the log's machinery is wrong: ``audit
checkpoint`` refuses such a log (``_unprotected``), so telling to run it would be no way out."""


def _not_yet_covered(report: VerifyReport, cover: str = _COVER) -> str:
    """What ``verify`` adds to its verdict (``intact``, or the closing line ``the entries
    verify`` of a log whose machinery alone is wrong) when the log's newest entries lie past every
    checkpoint (stored, or saved and given): how many, their indexes and ``cover``, how they get
    covered; empty when a checkpoint covers the whole log (until review R70 the verdict said
    nothing, as though a checkpoint signed every entry, and until review R71 the closing line of a
    log whose trigger was dropped still said nothing)."""
    first, size = report.signed_size, report.size
    if first >= size:
        return ""
    if size - first == 1:
        return f" (the last entry, {first}, is not yet covered by a checkpoint{cover})"
    return (
        f" (the last {size - first} entries, {first}..{size - 1}, are not yet covered by a checkpoint{cover})"
    )


def _counted(number: int, one: str, many: str) -> str:
    """``number`` and the word that agrees with it: ``1 entry``, ``0 entries``, ``2 entries``
    (until review R68 ``verify`` said ``1 entries``, ``1 checkpoints``)."""
    return f"{number} {one if number == 1 else many}"


def _machinery_said(report: VerifyReport) -> str:
    """What ``verify``'s closing line says of the log's machinery, for the lines it printed: a
    trigger not in force, only repairs not accepted, or only the record of repairs dropped (its
    triggers may all be in force: saying that nothing refuses an edit would be untrue); and a
    trigger agentgate did not make, or a PostgreSQL rule, each alone or beside those (until
    review R59 such a trigger alone closed with "the triggers are back", and until review R60 a
    rule was called "a trigger agentgate did not make"); and the PostgreSQL append function missing
    or not agentgate's (until review R61 no line named it), and the log's tables split across
    schemas (until review R61 read as triggers not in force)."""
    foreign, rules, function = len(report.foreign_triggers), len(report.rules), len(report.append_function)
    apart = foreign + rules + function + len(report.split)
    said = []
    if report.split:
        said.append(
            "the log's tables are split across schemas, so the protection of a moved one is read "
            "again once it is moved back"
        )
    if len(report.repairs) + len(report.records_lost) < len(report.unprotected) - apart:
        said.append("nothing refuses an edit of them until the triggers are back")
    elif report.records_lost:
        said.append("the record of repairs is gone, so whether a trigger was ever put back cannot be told")
    elif report.repairs:
        said.append("the triggers are back, and the entries a repair names are vouched for by nothing")
    if foreign:
        said.append(
            "a trigger agentgate did not make runs as the log's tables are written, so the entries "
            "written since it was made may not be what was appended"
        )
    if rules:
        said.append(
            "a rule agentgate did not make rewrites what is written to the log's tables, so the "
            "entries written since it was made may not be what was appended"
        )
    if any(" is missing: " in line for line in report.append_function):
        said.append("every append fails until the append function is back")
    elif function:
        said.append(
            "the function every append runs is not agentgate's, so the entries appended since it "
            "was changed may not be what was appended"
        )
    return "; ".join(said)


def _print_accepted(report: VerifyReport) -> None:
    """A line for each accepted repair of a protection trigger, and each protection trigger an
    upgrade added: information, not a problem."""
    for line in (*report.accepted_repairs, *report.added_on_upgrade):
        print(f"note: {printable(line)}")


def _verify_no_log(log: AuditLog, saved: str | None, *, as_json: bool) -> int:
    """``verify``'s verdict on a store where no log was ever made (``log.exists`` False): intact
    and empty, unless a saved checkpoint of this log signed entries (exit 1: the log and the
    store's record of it are gone, or the store is another one)."""
    kept = log.open_checkpoint(saved).size if saved is not None else 0
    gone = (
        f"the saved checkpoint signs {kept} entries, and this store holds no audit log and no "
        "record of one: the log was dropped with that record, or this is another store"
    )
    if as_json:
        problems = [_problem("saved checkpoint", gone)] if kept else []
        write_json(
            _verdict_json(None, log_exists=False, problems=problems, saved=saved is not None, signed=kept)
        )
        return 1 if kept else 0
    if kept:
        print("TAMPERED: 1 problem(s)")
        print(f"  - {gone}")
        return 1
    print(f"intact: 0 entries ({_NO_LOG_YET})")
    return 0


_ENTRY_PROBLEM = re.compile(r"entry ([0-9]+): ")
"""How the library names the entry a problem is about (``entry 7: bytes do not match ...``)."""

_PROBLEM_PLACES = ("checkpoint #", "checkpoint of size ", "saved checkpoint")
"""How the library's problems about one checkpoint begin: the place is named up to its colon."""

_REFS_PROBLEM = re.compile(
    r"entry ([0-9]+) refers to entry [0-9]+, but audit_refs "
    r"|audit_refs has (?:a row|[0-9]+ rows) for entry ([0-9]+)[ ,]"
)
"""How the library words a problem of the reference index ``audit_refs`` about one entry: ``entry 1
refers to entry 0, but audit_refs says 4``, ``audit_refs has a row for entry 4 (to 0) ...``,
``audit_refs has 2 rows for entry 4, ...``."""

_FOUND_AT_FAULT = re.compile(
    r"checkpoint of size [0-9]+: root does not match the entries; (?:explained by )?entry ([0-9]+) "
)
"""How the library names the entry it found at fault behind a checkpoint's root that does not match."""

_LARGER_THAN_THE_LOG = re.compile(r"a checkpoint covers ([0-9]+) entries but the log has ")
"""How the library words a checkpoint that signs more entries than the log holds."""


def _problem(where: str, message: str, index: int | None = None) -> dict[str, object]:
    """One problem as ``verify --json`` lists it: where it was found, the entry index it names
    (``null`` where it names none), and the library's message, whole."""
    return {"where": where, "index": index, "message": message}


def _entries_problem(message: str) -> dict[str, object]:
    """A problem with the entries or checkpoints (``VerifyReport.problems``) with its place read
    from how the library words it: ``entry N`` (and its index), ``checkpoint #K``, ``checkpoint
    of size N`` (with the entry found at fault, when it names one; a checkpoint larger than the
    log too), ``saved checkpoint``, the table a count is about (``audit_log``), ``audit_refs``
    (with the entry a row is about, when it names one), else ``log``. Until review R71 a problem of
    the reference index about one entry, and a checkpoint larger than the log, came out as
    ``log`` or with no index."""
    found = _ENTRY_PROBLEM.match(message)
    if found:
        return _problem(f"entry {found[1]}", message, int(found[1]))
    found = _REFS_PROBLEM.match(message)
    if found:
        return _problem("audit_refs", message, int(found[1] or found[2]))
    found = _LARGER_THAN_THE_LOG.match(message)
    if found:
        return _problem(f"checkpoint of size {found[1]}", message)
    if message.startswith(_PROBLEM_PLACES):
        found = _FOUND_AT_FAULT.match(message)
        return _problem(message.partition(": ")[0], message, int(found[1]) if found else None)
    table = message.partition(" ")[0]
    return _problem(table if table in ("audit_log", "audit_refs") else "log", message)


def _verdict_json(
    report: VerifyReport | None,
    *,
    log_exists: bool = True,
    problems: list[dict[str, object]] | None = None,
    wrong_key: str | None = None,
    saved: bool = False,
    signed: int = 0,
) -> dict[str, object]:
    """``verify --json``'s one object: the verdict and the facts the text prints, each in its own
    key (docs/cli.md, audit verify --json). ``report`` is ``None`` where no log was verified (none
    made, or dropped: ``log_exists`` false, ``problems`` given; ``signed``, the size the saved
    checkpoint signs: until review R71 0 whatever it signed)."""
    if report is None:
        listed = problems or []
        return {
            "verdict": "tampered" if listed else "intact",
            "log_exists": log_exists,
            "entries": 0 if not listed else None,
            "root": None,
            "checkpoints_checked": 0,
            "saved_checkpoint": saved,
            "signed_size": signed,
            "unsigned": False,
            "not_covered": None,
            "entries_verify": not listed,
            "first_bad_index": None,
            "likely_cause": None,
            "problems": listed,
            "machinery": None,
            "notes": [],
        }
    first, size = report.signed_size, report.size
    end = size + report.missing  # the log's end: a row missing in the middle is no entry of it
    return {
        "verdict": "intact" if report.ok else "tampered",
        "log_exists": True,
        "entries": size,
        "root": report.root.hex(),
        "checkpoints_checked": report.checkpoints_checked,
        "saved_checkpoint": saved,
        "signed_size": first,
        "unsigned": bool(size) and not report.checkpoints_checked and not saved,
        "not_covered": {"first": first, "last": end - 1, "count": end - first} if first < end else None,
        "entries_verify": report.entries_verify,
        "first_bad_index": report.first_bad_index,
        "likely_cause": wrong_key,
        "problems": [
            *map(_entries_problem, report.problems),
            *(_problem("log machinery", line) for line in report.unprotected),
        ],
        "machinery": _machinery_said(report) if report.entries_verify and not report.ok else None,
        "notes": [*report.accepted_repairs, *report.added_on_upgrade],
    }


def _wrong_key(report: VerifyReport, log: AuditLog) -> str | None:
    """What to say when no stored checkpoint opened under the key given and every one is signed by
    one and the same other key: the likelier story is a wrong ``--key`` (or log key), which is
    named, with both key ids. It stays TAMPERED (exit 1): the same report is what replacing every
    checkpoint with one's own would give, so the auditor, not verify, tells the two apart."""
    if report.checkpoints_checked or not report.unopened_signers:
        return None
    if len(set(report.unopened_signers)) != 1 or len(report.unopened_signers[0]) != 1:
        return None
    given = key_id(log.origin, log.public_key).hex()
    found = f"none of the {len(report.unopened_signers)} stored checkpoint(s) verifies"
    return wrong_key_cause(found, given, report.unopened_signers[0][0], "--key, AGENTGATE_LOG_KEY")


def _filtered(args: argparse.Namespace) -> bool:
    """Whether ``show`` selects entries by their content (not only by position)."""
    return bool(args.principal or args.kind or args.since or args.tool)


def _matches(entry: AuditEntry, args: argparse.Namespace) -> bool:
    if args.principal and entry.principal != args.principal:
        return False
    if args.kind and entry.kind != args.kind:
        return False
    if args.since and entry.time < args.since:
        return False
    if args.tool:
        resource = entry.resource or ""
        if resource != args.tool and resource.split(":", 1)[-1] != args.tool:
            return False
    return True


def _warn_unprotected(log: AuditLog) -> None:
    """A warning (``agentgate.cli.warn``) when a trigger of the log's machinery is not in force
    (what ``verify`` reports as TAMPERED): ``show`` and ``explain`` show the log, they do not
    verify it, so their exit code stays; reading the catalog writes nothing."""
    unprotected = unprotected_log(log.store)
    if unprotected:
        warn(f"{printable(unprotected)}; run agentgate audit verify")


def _show(args: argparse.Namespace) -> int:
    store, log = _open(args)
    with store:
        if not log.exists:
            print(f"agentgate audit show: {_NO_LOG_YET}", file=sys.stderr)
            return 0
        _warn_unprotected(log)
        start = args.start
        if args.last is not None and not _filtered(args):
            start = max(start, log.size() - args.last)  # read only the entries to be shown
        # --json prints the logged bytes: no entry waits there for its outcome (``_with_units``).
        read = ((e, None) for e in log.entries(start)) if args.json else _with_units(log.entries(start))
        shown: Iterable[tuple[AuditEntry, str | None]] = ((e, u) for e, u in read if _matches(e, args))
        if args.last is not None:
            shown = collections.deque(shown, maxlen=args.last)  # the newest N: N entries held at most
        for entry, allow_unit in shown:
            if args.json:  # the entry's own bytes (from_bytes checked they are the stored ones)
                print(entry.to_bytes().decode("utf-8"))
            else:
                reasons = printable("; ".join(entry.reasons))
                figure = budget_figure(entry, allow_unit, printable)
                print(
                    f"{entry.index:>6}  {entry.time}  {entry.kind:<17} {printable(entry.principal[:32]):<32} "
                    f"{printable(entry.resource or '-'):<28} {figure:>8}{_charged(entry)}  {reasons}"
                )
        # Each index is listed once, the row verify reads; the others are named here, in verify's
        # words, not listed as entries (on standard error: --json stays one entry a line).
        for index, rows in log.repeated_indexes(start):
            warn(
                f"entry {index}: {rows} rows hold this index, which one entry has: "
                "rows inserted outside agentgate (one of them shown; run agentgate audit verify)"
            )
    return 0


_UNIT_LOOKAHEAD = 1000
"""How many entries after an allow ``show`` reads for the outcome that says the unit of its figure
before printing it bare: an outcome is written when its call ends, most often a few entries later."""


def _with_units(entries: Iterable[AuditEntry]) -> Iterator[tuple[AuditEntry, str | None]]:
    """Each of ``entries``, in their order, with the unit its outcome records (``spent_unit``) for
    an allow (``budget_figure``'s ``allow_unit``), else ``None``. An allow with a figure is held
    back, with the entries after it, until its outcome (``ref``) is read or ``_UNIT_LOOKAHEAD``
    entries later or the end: at most that many entries are held. Read before ``show``'s filters,
    so that an outcome left out of the listing still says its allow's unit."""
    held: collections.deque[AuditEntry] = collections.deque()
    waiting: set[int] = set()  # allows held whose outcome is not read yet
    units: dict[int, str | None] = {}  # allows held whose outcome is read: the unit it records
    try:
        for entry in entries:
            if entry.kind == "outcome" and entry.ref in waiting:
                waiting.discard(entry.ref)
                units[entry.ref] = spent_unit(entry)
            held.append(entry)
            if (
                entry.kind == "allow"
                and entry.budget_delta
                and not (entry.resource or "").startswith("agent:")
            ):
                waiting.add(entry.index)  # a grant's allow (agent:) has no outcome
            while held and (held[0].index not in waiting or len(held) > _UNIT_LOOKAHEAD):
                first = held.popleft()
                waiting.discard(first.index)
                yield first, units.pop(first.index, None)
    except Exception:
        # A malformed entry (``AuditLogError``) ends the listing: the entries read before it are
        # printed first, then its error, as without the wait (review R63).
        for waited in held:
            yield waited, units.pop(waited.index, None)
        raise
    for entry in held:
        yield entry, units.pop(entry.index, None)


def _explain(args: argparse.Namespace) -> int:
    """Exit 0 shown; 1 refused (``REFUSED: ...`` on standard output, nothing shown) where the log
    shows the entry or its evidence was tampered with, as ``prove`` and ``verify`` exit 1 for
    the same log (until review R66 it was exit 2, which the CLI keeps for input it cannot use:
    an index past the end, a ``--trust`` that is no key, a dropped log)."""
    anchors = None if args.trust is None else {load_public_key(spec).did for spec in args.trust}
    store, log = _open(args)
    with store:
        if not log.exists:
            raise BeyondLogEnd(args.index, 0, "entry")
        _warn_unprotected(log)
        try:
            explained = log.explain(args.index)
        except TamperDetected as exc:
            sys.stdout.write(refusal(f"{exc}; nothing explained, run agentgate audit verify"))
            return 1
        entry, related = explained.entry, explained.related
        chain = _grant_chain(store, entry.chain_hash) if entry.chain_hash else None
    print(f"entry {entry.index}: {entry.kind} at {entry.time}")
    print(f"├── principal: {printable(entry.principal)}")
    print(
        f"├── resource: {printable(entry.resource or '-')}   arguments: {printable(entry.args_digest or '-')}"
    )
    if entry.args:
        print(f"│   └── logged in clear: {json.dumps(entry.args, sort_keys=True)}")
    print(f"├── authority: grant chain tip {printable(entry.chain_hash or '(none recorded)')}")
    if chain is None:
        print("│   └── (the grant store has no record of this chain: only what the entry holds is shown)")
    else:
        links, source, bound = chain
        print(f"│   ├── source: {printable(source)}")
        print(f"│   ├── {_root_trust(links[0].issuer, bound, anchors)}")
        for depth, (link, state) in enumerate(zip(links, _link_states(links), strict=True)):
            pad = "│   " + "    " * depth
            print(
                f"{pad}└── grant {printable(link.id[:24])}: {printable(link.issuer)} -> "
                f"{printable(link.audience)} ({state})"
            )
            for capability in link.capabilities or ():
                print(f"{pad}    │   allow {printable(capability)}")
            if link.terms is not None:
                print(f"{pad}    │   {link.terms}")
    print(f"├── policy: {printable(entry.policy_hash or '-')}   rule: {printable(entry.rule or '-')}")
    print(f"├── approver: {printable(entry.approver or '(no approval)')}")
    outcomes = [e for e in (entry, *related) if e.kind == "outcome"]

    def figure(shown: AuditEntry) -> str:
        """``budget_figure``, an allow's unit from its outcome among those explain read."""
        unit = next((spent_unit(o) for o in outcomes if o.ref == shown.index), None)
        return budget_figure(shown, unit, printable)

    print(f"├── budget delta: {figure(entry)}")
    charged = [
        f"charged grant {printable(grant_id)}: {n} {printable(unit)}"
        for grant_id, n, unit in each_charge(entry)
    ]
    for position, line in enumerate(charged):
        print(f"│   {'└──' if position == len(charged) - 1 else '├──'} {line}")
    for reason in entry.reasons:
        print(f"├── reason: {printable(reason)}")
    for other in related:
        print(
            f"├── related entry {other.index}: {other.kind} {printable(other.status or '')} "
            f"budget {figure(other)}{_charged(other)}"
        )
    grant = (entry.resource or "").startswith("agent:")  # a grant entry has no outcome
    if entry.kind == "allow" and not grant and not any(other.kind == "outcome" for other in related):
        # Legal while the call runs, or an outcome hidden by a deleted audit_refs row: explain
        # cannot tell without reading the whole log; verify compares the index with the entries.
        print(
            "├── outcome: no outcome found (the call may still be running; audit verify checks "
            "the reference index that found none)"
        )
    print(f"├── outcome status: {_outcome_status(entry, related, grant)}")
    print(f"└── evidence: {_evidence(explained)}")
    return 0


def _outcome_status(entry: AuditEntry, related: tuple[AuditEntry, ...], grant: bool) -> str:
    """How the call ``entry`` stands for ended, for ``explain``'s ``outcome status`` line: an
    outcome's own status; for the allow of a call, each status of the outcomes related to it,
    with its entry (``ok (entry 12)``), or ``no outcome recorded yet``; ``-`` for any other
    entry. An allow has no status of its own: until review R69 the line read it, ``-`` always."""
    if entry.kind != "allow" or grant:
        return printable(entry.status or "-")
    ended = [f"{printable(o.status or '-')} (entry {o.index})" for o in related if o.kind == "outcome"]
    return ", ".join(ended) or "no outcome recorded yet"


def _charged(entry: AuditEntry) -> str:
    """`` (charged GRANT: N UNIT; ...)`` (``charged_text``) after an entry's budget figure, on
    ``show``'s line (since review R62) and on ``explain``'s line of a related entry, or nothing
    for an entry without ``charges``."""
    charged = charged_text(entry, printable)
    return f" (charged {charged})" if charged else ""


def _link_states(links: list[_ShownGrant]) -> list[str]:
    """Each link's state as ``explain`` shows it, root first: ``REVOKED`` where the grant store
    records the grant revoked, ``revoked through grant ID...`` below such a link (the nearest
    one), and the expiry. The store records only the grant that was revoked; a revocation takes
    every descendant with it (applied at decision time), so a link below a revoked one is shown
    revoked too, not as a grant that still holds (until review R55, its expiry alone)."""
    states: list[str] = []
    through: str | None = None
    for link in links:
        if link.revoked:
            through, revoked = link.id, "REVOKED, "
        else:
            revoked = "" if through is None else f"revoked through grant {printable(through[:24])}..., "
        states.append(f"{revoked}expires {utc(link.expires)}")
    return states


def _root_trust(issuer: str, bound: bool, anchors: set[str] | None) -> str:
    """Whether the chain's root issuer is one of ``anchors`` (``--trust``): only a chain bound to
    the entry has a signed root to check; the grant store's rows are its word, not the issuer's."""
    if not bound:
        return "root issuer: not checked (the chain is not bound to this entry)"
    if anchors is None:
        return (
            f"root issuer {printable(issuer)}: not checked against trust anchors (give --trust PUBFILE|DID)"
        )
    if issuer in anchors:
        return f"root issuer {printable(issuer)}: a trust anchor given with --trust"
    return f"root issuer {printable(issuer)}: NOT one of the trust anchors given with --trust"


def _evidence(explained: Explanation) -> str:
    """What proves that the entries ``explain`` printed are in the signed log."""
    shown = 1 + len(explained.related)
    if explained.checkpoint is None:
        counted = _counted(shown, "entry", "entries")  # until review R69 "1 entries shown"
        return f"not proven: the log has no checkpoint yet ({counted} shown; run audit checkpoint)"
    proven = shown - len(explained.unproven)
    text = f"{proven} of {shown} entries proven in the log signed at size {explained.checkpoint.size}"
    if explained.unproven:
        newer = ", ".join(map(str, explained.unproven))
        text += f"; entry {newer} is" if len(explained.unproven) == 1 else f"; entries {newer} are"
        text += " newer than that checkpoint"
    return text


@dataclass(frozen=True)
class _ShownGrant:
    """One link of the chain ``explain`` shows: from the signed grant when the chain is bound to
    the entry (``capabilities`` and ``terms`` then set), else from the grant store's row."""

    id: str
    issuer: str
    audience: str
    expires: float | None
    revoked: bool
    capabilities: tuple[str, ...] | None = None
    terms: str | None = None


def _grant_chain(store: Store, tip: str) -> tuple[list[_ShownGrant], str, bool] | None:
    """Root-first links of the chain ending at ``tip``, where they come from, and whether they
    are bound to the entry (below), if recorded.

    The grant store (``agentgate.store.grants``) is not signed by the audit log; the entry only
    records the tip's hash. The chain is bound to the entry when the token the store keeps for
    ``tip`` parses, its tip grant hashes to ``tip``, and every link names its parent by hash and
    is signed by its issuer: its issuers, audiences, constraints and expiries are then the ones the
    entry names, whatever the store's other columns say. Otherwise the store's rows are walked by
    their ``parent`` column and shown as the store's word only, without constraints (an
    ``expires`` that is not a number, a row edited in the database, is ``None``, shown as ``-``).
    Whether a grant is revoked is the store's word in both cases. ``None`` when the store has no
    grant ``tip`` (or no grant tables).
    """
    links: list[_ShownGrant] = []
    token: object = None
    current: str | None = tip
    try:
        while current is not None and len(links) < 64:
            recorded = GrantRepository.recorded(store, current)
            if recorded is None:
                break
            if not links:
                token = recorded.token
            expires = recorded.expires
            expiry = expires if isinstance(expires, int | float) and not isinstance(expires, bool) else None
            links.append(_ShownGrant(current, recorded.issuer, recorded.audience, expiry, recorded.revoked))
            current = recorded.parent
        if not links:
            return None
        signed, why = _signed_chain(token, tip)
        if signed is not None:
            marks = ", ".join("?" * len(signed))
            rows = store.query(
                f"SELECT grant_id FROM agentgate_revocations WHERE grant_id IN ({marks})",
                tuple(link.id for link in signed),
            )
            gone = {row[0] for row in rows}
            return (
                [replace(link, revoked=link.id in gone) for link in signed],
                "the grant store (not signed by the audit log); bound to this entry: its token's tip "
                "hashes to the chain hash the entry records, every link signed by its issuer; "
                "revocation is the grant store's word",
                True,
            )
    except (StoreError, sqlite3.Error):
        return None
    return (
        list(reversed(links)),
        f"the grant store (not signed by the audit log); NOT bound to this entry ({why}): "
        "the grant store's word only, constraints not shown",
        False,
    )


def _signed_chain(token: object, tip: str) -> tuple[list[_ShownGrant] | None, str]:
    """The links of ``token`` when it is a chain whose tip is the grant ``tip`` and whose links
    are hash-linked and signed by their issuers (trust in the root issuer aside: ``--trust``
    names the anchors, ``_root_trust`` checks it); else ``None`` and why not."""
    from agentgate.authority import parse_chain
    from agentgate.authority._chain_findings import link_findings, root_findings
    from agentgate.authority._grant import GRANT_CONTEXT
    from agentgate.authority._signatures import verify_signature
    from agentgate.capabilities import format_capability
    from agentgate.errors import InvalidSignature

    if not isinstance(token, str):
        return None, "its token is not text"
    try:
        chain = parse_chain(token)
    except InputError as exc:
        return None, f"its token does not parse: {exc}"
    if chain.id != tip:
        return None, f"its token's tip is grant {chain.id[:24]}, not the chain hash the entry records"
    for i, link in enumerate(chain.links):
        found = link_findings(chain.links[:i], link) if i else root_findings(link)
        if found:
            return None, f"link {i}: {found[0].code}"
        try:
            verify_signature(link.issuer, GRANT_CONTEXT + link.payload, link.signature)
        except (InvalidSignature, KeyFileError):
            return None, f"link {i}: its signature does not verify"
    return [
        _ShownGrant(
            link.id,
            link.issuer,
            link.audience,
            link.expires,
            False,
            tuple(format_capability(cap) for cap in link.capabilities),
            f"budget {'unlimited' if link.budget is None else link.budget} · may delegate {link.max_depth} more",
        )
        for link in chain.links
    ], ""


def _saved(path: str) -> str | None:
    """The checkpoint already saved in the regular file ``path``, or ``None`` when there is none
    to keep (no file, or an empty one). Raises ``InputError`` for a file there that holds
    anything else (a copy whose line breaks became CRLF, a file over
    ``MAX_CHECKPOINT_FILE_BYTES``, a file that cannot be read, any other text): ``--out`` would
    replace it unread, and if it was the saved checkpoint, the evidence of a rollback would go
    with it. A path that is not a regular file was refused by ``_refuse_unwritable`` before."""
    if not os.path.lexists(path):
        return None
    keep = "refusing to replace it (move it away or name another file)"
    try:
        text = _read(path, MAX_CHECKPOINT_FILE_BYTES, "checkpoint")
    except InputError as exc:
        raise InputError(f"{exc}; {keep}") from None
    if not text:
        return None
    try:
        _parse_saved(text)
    except TamperDetected as exc:
        crlf = " (its line breaks are CRLF)" if "\r\n" in text else ""
        raise InputError(f"{path}: holds no checkpoint{crlf}: {exc}; {keep}") from None
    return text


def _refuse_another_logs(path: str, saved: str, log: AuditLog) -> None:
    """Raise ``InputError`` when ``saved``, the checkpoint in ``checkpoint --out``'s ``path``, is
    no checkpoint of ``log`` signed by its key (or a rotated-out one): another log's, or one whose
    signature line was edited. It says nothing about this log, so it is unusable input (exit 2),
    as ``verify --checkpoint`` refuses the same file; until review R73 it was ``REFUSED`` (exit 1),
    the code of a log that does not extend a checkpoint of its own (a rollback)."""
    try:
        log.open_checkpoint(saved)
    except TamperDetected as exc:
        raise InputError(
            f"{path}: not a checkpoint of this log signed by its key: {exc}; "
            "refusing to replace it (move it away or name another file)"
        ) from None


def _parse_saved(text: str) -> Checkpoint:
    """The checkpoint of a saved signed note's body, signature unchecked; ``TamperDetected`` when
    ``text`` is no signed note's form: the body alone, without the blank line and signature line
    after it, is named so (until review R65 it read as a body of fewer than three lines)."""
    body, blank, _signatures = text.partition("\n\n")
    if not blank:
        try:
            Checkpoint.parse(text)
        except TamperDetected:
            pass  # not even a body: said below, as for any other text
        else:
            raise TamperDetected("it holds no signature (no blank line and signature line after its body)")
    return Checkpoint.parse(body + "\n")


def _unprotected(url: str | None) -> str | None:
    """Each trigger of the log's machinery not in force, as ``audit verify`` reports it, read from
    the catalog of the store opened to read only. ``audit checkpoint`` refuses such a log before it
    opens it as a writer: the writer's opening would put the trigger back, and the checkpoint sign
    what was edited while it was gone, so that ``verify`` said intact where it had said TAMPERED
    (docs/operations.md: verify the log before putting anything back)."""
    store = open_existing_store(url, read_only=True)
    with store:
        return unprotected_log(store)


def _checkpoint(args: argparse.Namespace) -> int:
    if args.out:
        _refuse_unwritable(args.out)
    read: list[str | None] = []  # the checkpoint saved in --out, once read

    def saved_in_out(log: AuditLog) -> str | None:
        """What ``--out`` holds (``_saved``), once it is known not to be a file this command reads,
        and known to be a checkpoint of ``log`` (``_refuse_another_logs``)."""
        if args.out:
            _refuse_own_files(args.out, log.store, None)
        if not read:
            read.append(_saved(args.out) if args.out else None)
        if read[0] is not None:
            _refuse_another_logs(args.out, read[0], log)
        return read[0]

    try:
        unprotected = _unprotected(args.store)
        if unprotected:
            sys.stdout.write(
                refusal(
                    f"{printable(unprotected)}; nothing was signed or put back: a checkpoint would "
                    "sign what was appended or edited while nothing refused it; run agentgate audit "
                    "verify (with --checkpoint and the checkpoint saved last) first"
                )
            )
            return 1
        # A log with no checkpoint yet is checked before its key is created: refused, none is left.
        store, log = open_audit_log(
            args.store, create_key=True, check_first=lambda log: log.check_extends(saved_in_out(log))
        )
        with store:
            note = log.checkpoint(saved=saved_in_out(log))
            public = log.public_key
    except (TamperDetected, LogDropped) as exc:
        sys.stdout.write(refusal(str(exc)))
        if read and read[0] is not None:
            print(f"{shown_path(args.out)} is left as it was: it is the evidence")
        return 1
    if args.out:
        _write_checkpoint(args.out, note, read[0])
    sys.stdout.write(note)
    print(f"verifier key: {verifier_key(log.origin, public)}")
    return 0


def _write_checkpoint(path: str, note: str, compared: str | None) -> None:
    """Write ``note``, the checkpoint just signed and stored, to ``checkpoint --out``'s ``path``,
    where ``compared`` (``None``: nothing, or an empty file) was found and compared with the log
    (``_write_checked``). Raises ``InputError`` when ``path`` is not written; its line says the
    checkpoint is stored in the log all the same, whatever kept ``path`` (a file put there, a
    symbolic link, another checkpoint saved, a write that failed): it is a checkpoint of the log,
    signed, and only the file is refused (until the review of R74 only a checkpoint saved over the
    one compared with said so, and the reader of the others believed nothing was signed)."""
    try:
        _write_checked(
            path,
            note,
            "checkpoint",
            compared is not None,
            lambda: _refuse_changed_checkpoint(path, compared or ""),
        )
    except InputError as exc:
        raise _stored_all_the_same(exc) from None


def _stored_all_the_same(refused: InputError) -> InputError:
    """``refused``, a write of ``--out`` refused after the verb signed and stored a checkpoint,
    saying so: that checkpoint is one of the log whatever kept the file."""
    return InputError(f"{refused}; the new checkpoint is stored in the log")


def _refuse_signing_unprotected(log: AuditLog) -> None:
    """Raise ``TamperDetected`` when ``prove`` would sign a checkpoint (the log grew since the one
    stored last) over a log whose protection trigger is not in force: the checkpoint, and the
    bundle against it, would vouch for what was edited while nothing refused it (as ``audit
    checkpoint`` refuses to)."""
    unprotected = unprotected_log(log.store)
    if not unprotected:
        return
    latest = log.latest_checkpoint()
    if latest is not None and log.open_checkpoint(latest).size >= log.size():
        return  # the stored checkpoint covers the whole log: nothing is signed
    raise TamperDetected(f"{unprotected}; no checkpoint signed over it")


def _prove(args: argparse.Namespace) -> int:
    """Exit 0 written; 1 refused (``REFUSED: ...`` on standard output, nothing signed or written),
    as ``audit checkpoint`` refuses: a log whose protection trigger is not in force, where a
    checkpoint would be signed, or an entry edited in the database (until review R59 both were
    exit 2, which the CLI keeps for input it cannot use: an index past the end, an --out it cannot
    write)."""
    _refuse_unwritable(args.out)
    store, log = _open(args)
    with store:
        _refuse_own_files(args.out, store, None)
        earlier = _refuse_replacing(
            args.out, PROOF_HEADER + "\n", "proof bundle"
        )  # after: the database or a key is named as such
        if not log.exists:
            raise BeyondLogEnd(args.index, 0, "entry")
        try:
            _refuse_signing_unprotected(log)
            stored = log.latest_checkpoint()
            bundle = log.prove(args.index)  # only a bundle that verifies: not an entry edited in the database
        except TamperDetected as exc:
            sys.stdout.write(refusal(f"{exc}; no proof written, run agentgate audit verify"))
            return 1
        # ``prove`` gives back the stored checkpoint when the log has not grown past it, else the
        # one it signed and stored (until review R81 the latest was read a third time for this).
        signed = bundle.checkpoint_note != stored
    try:
        _write_own(args.out, bundle.text(), PROOF_HEADER + "\n", "proof bundle", earlier=earlier)
    except InputError as exc:
        if not signed:
            raise
        raise _stored_all_the_same(exc) from None  # until review R76 only ``checkpoint`` said it
    say_written(
        f"wrote the proof of entry {args.index} ({len(bundle.proof)} hashes) to {shown_path(args.out)}"
    )
    return 0


def _verify_proof(args: argparse.Namespace) -> int:
    text = _read(args.file, MAX_BUNDLE_FILE_BYTES, "proof bundle")
    key = load_public_key(args.key)
    if text.partition("\n")[0] != PROOF_HEADER:  # another file (a key, a checkpoint): unusable, not INVALID
        raise InputError(f"{args.file}: not a proof bundle (its first line must be {PROOF_HEADER!r})")
    _refuse_malformed_bundle(args.file, text)
    try:
        entry, checkpoint = verify_bundle(text, key, args.origin)
    except TamperDetected as exc:
        # The library quotes the bundle's own text (its origin line) escaped already (``repr``):
        # escaped once more, each backslash showed doubled (until review R59).
        print(f"INVALID: {escaped_once(str(exc))}")
        cause = _bundle_signed_by_another(text, key)
        if cause:
            print(cause)
        return 1
    print(
        f"valid: entry {entry.index} ({entry.kind}, {printable(entry.principal)}) is in {printable(checkpoint.origin)}"
    )
    print(f"       at tree size {checkpoint.size}, signed by {key.did}")
    return 0


def _bundle_signed_by_another(text: str, key: PublicKey) -> str | None:
    """``verify``'s ``likely cause:`` line (``wrong_key_cause``) for the well-formed bundle ``text``
    whose checkpoint does not verify under ``key``, when one other key signs it; else ``None``.
    Until review R74 ``verify-proof`` said only that "any other key is a forgery"."""
    note = ProofBundle.parse(text).checkpoint_note
    name = note.partition("\n")[0]
    signer = other_signer(note, name, key)
    if signer is None:
        return None
    found = "the bundle's checkpoint does not verify"
    return printable(wrong_key_cause(found, key_id(name, key).hex(), signer, "--key"))


def _refuse_malformed_bundle(path: str, text: str) -> None:
    """Raise ``InputError`` naming what is wrong when ``text`` is no well-formed proof bundle: its
    lines are not the tlog-proof form (an ``extra`` line of base64, ``index N``, base64 hashes, a
    blank line), its checkpoint body is not three lines of origin, size and root, or its entry is
    not an audit entry in canonical form (not JSON, wrong fields). Such a file proves nothing
    either way: unusable input (exit 2), where a well-formed bundle whose signature or inclusion
    proof does not verify is INVALID (exit 1). The signature lines are checked by verification."""
    try:
        bundle = ProofBundle.parse(text)
        Checkpoint.parse(bundle.checkpoint_note.partition("\n\n")[0] + "\n")
        AuditEntry.from_bytes(bundle.entry)
    except TamperDetected as exc:
        raise InputError(f"{path}: not a well-formed proof bundle: {exc}") from None


def _report(args: argparse.Namespace) -> int:
    # Refused before the log is verified and read (until review R71 after, in the system's words).
    _refuse_unwritable(args.out)
    store, log = _open(args)
    with store:
        _refuse_own_files(args.out, store, args.key)
        earlier = _refuse_replacing(
            args.out, PAGE_START, "audit report page"
        )  # after: the database or a key is named as such
        if not log.exists:
            page = render_report(iter(()), None, [])
            _write_own(args.out, page, PAGE_START, "audit report page", earlier=earlier)
            say_written(f"wrote {shown_path(args.out)}: 0 entries, intact ({_NO_LOG_YET})")
            return 0
        verified = log.verify()
        note = log.latest_checkpoint()
        checkpoint = log.open_checkpoint(note) if note and verified.ok else None
        problems = (*verified.problems, *verified.unprotected)
        page = render_report(log.entries(skip_malformed=True), checkpoint, problems)
    _write_own(args.out, page, PAGE_START, "audit report page", earlier=earlier)
    state = "intact" if verified.ok else f"TAMPERED, {len(problems)} problem(s) shown in the report"
    say_written(f"wrote {shown_path(args.out)}: {_counted(verified.size, 'entry', 'entries')}, {state}")
    return 0 if verified.ok else 1
