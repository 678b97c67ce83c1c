"""What the verb groups share: strict JSON arguments, durations, values that may not be empty, one
way to print a time and untrusted text, opening a store (and its audit log) to read, a listing as
JSON or as nothing to list. Every verb group imports this module: what only some verbs use is
imported where it is used."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shlex
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from agentgate._durations import parse_duration
from agentgate._json import MAX_DEPTH, exact_float, first_inexact, inexact_said, once_each
from agentgate._lazy import lazy_exports
from agentgate._names import MAX_FREE_TEXT as MAX_FREE_TEXT  # a free-text flag's limit, the library's
from agentgate._shown import character_named, not_printable, quoted
from agentgate._time import unix as unix
from agentgate._time import utc_text
from agentgate.cli._handlers import committed_work_held
from agentgate.cli._lines import shortened
from agentgate.errors import (
    InputError,
    KeyFileError,
    NoStore,
    SettlementRefused,
    SourceError,
    StoreError,
    TamperDetected,
)

if TYPE_CHECKING:  # imported where used: every verb group imports this module, few use these
    from agentgate.keys import PublicKey, SigningKey
    from agentgate.policy import Policy
    from agentgate.store import Store
    from agentgate.store.audit import AuditLog

# The store (its SQLite implementation, loaded with the package) is imported where a store is
# opened: every parser imports this module, and help opens none (review R65b).
__getattr__, __dir__ = lazy_exports(__name__, {"STORE_TABLES": "agentgate.store._existing"})


def json_object(text: str, flag: str = "--args") -> dict[str, Any]:
    """Parse a call's arguments given on the command line: one JSON object, strictly.

    Duplicate keys (JSON would silently keep the last one), ``NaN`` and ``Infinity`` (also as a
    number too large for a float, ``1e400``), lone surrogates (``"\\ud800"``, not Unicode text),
    a number with a fraction or an exponent that no float holds as written (``_json.exact_float``) and
    anything but an object are refused with ``InputError`` naming ``flag``.
    """

    # The key cut (``quoted``) as every other strict reader cuts it: it may be a secret, and a
    # 100,000-character key made a 100,024-character refusal until review R89.
    pairs = once_each(lambda key: InputError(f"{flag}: duplicate key {quoted(key)}"))

    def constant(name: str) -> Any:
        raise InputError(f"{flag}: {name} is not a JSON value")

    try:
        value = json.loads(text, object_pairs_hook=pairs, parse_constant=constant, parse_float=exact_float)
    except RecursionError:  # JSON, nested deeper than Python's decoder goes: not a quoting slip
        raise InputError(f"{flag}: nested more than {MAX_DEPTH} levels deep") from None  # (review R82)
    except ValueError as exc:
        raise InputError(
            f"{flag} is not JSON: {str(exc)[:120]}; quote it: {flag} '{{\"amount\": 80}}'"
        ) from None
    if not isinstance(value, dict):
        raise InputError(f"{flag} must be a JSON object, e.g. {flag} '{{\"amount\": 80}}'")
    _refuse_inexact(value, flag)
    try:  # what parses but is no value a call can carry: 1e400 (read as infinity), "\ud800"
        json.dumps(value, ensure_ascii=False, allow_nan=False).encode("utf-8")
    except UnicodeEncodeError as exc:  # said in these words, not the codec's (until review R55)
        lone = exc.object[exc.start : exc.end].encode("unicode_escape").decode("ascii")
        raise InputError(f"{flag}: holds {lone}, half of a UTF-16 pair alone: not Unicode text") from None
    except ValueError:  # json's "Out of range float values are not JSON compliant"
        raise InputError(
            f"{flag}: holds a number beyond the range of a float (such as 1e400, read as infinity); "
            "give it in range, or as text"
        ) from None
    except RecursionError:
        raise InputError(f"{flag}: nested more than {MAX_DEPTH} levels deep") from None
    return value


def _refuse_inexact(value: object, flag: str) -> None:
    """Raise ``InputError`` naming the first argument (with its path inside a list or object)
    that holds a number no float holds as written (``_json.first_inexact``)."""
    found = first_inexact(value)
    if found is not None:
        raise InputError(f"{flag}: {inexact_said(*found)}")


STORE_HELP = "store URL or SQLite path (default: AGENTGATE_STORE, else .agentgate/agentgate.db)"
"""The help of every verb's ``--store`` (review R67: two wordings, one naming a directory)."""


STORE_NAMED_BY = "--store or AGENTGATE_STORE"
"""What names the store, as the store's errors say to check it (the library's own included:
a directory where the file belongs, a table of another application's)."""


LEAVE_THE_FLAG_OUT = ", or leave the flag out"
"""The end of ``given``'s refusal that fits a flag only: the parser drops it for a positional
argument, which has no flag and may not be left out (review R68)."""


_WHOLE = re.compile(r"[0-9]+", re.ASCII)
_MOST_DIGITS = 19
"""More digits than any flag's bound has (``agentgate serve --max-body-bytes``: 2**63-1, 19)."""


def ascii_whole(text: str) -> int:
    """A whole number written in ASCII digits alone, else ``ValueError``: not ``int``'s `` 5``,
    ``+5``, ``1_000`` or other scripts' digits (until review R89 ``serve --max-body-bytes 1_000``
    and full-width digits were read). Leading zeros are read off first (``int`` refuses a text of
    more than 4,300 digits, zeros included); a number of more than ``_MOST_DIGITS`` digits is read
    as ``10**_MOST_DIGITS``, above every flag's bound, so that it is refused as out of range, never
    converted. The reading of ``serve``'s whole-number flags and ``dead-letters --limit``."""
    if not _WHOLE.fullmatch(text):
        raise ValueError(text)
    digits = text.lstrip("0") or "0"
    return int(digits) if len(digits) <= _MOST_DIGITS else 10**_MOST_DIGITS


def given(text: str) -> str:
    """An argparse ``type`` for a value that names something (a file, a key, a store, a principal,
    a tool): an empty one is refused (exit 2), never read as the flag left out, so that
    ``--checkpoint "$SAVED"`` with ``SAVED`` unset cannot skip the check it asks for, nor
    ``--store "$URL"`` open the default store."""
    if not text:
        raise argparse.ArgumentTypeError(f"an empty value names nothing: give one{LEAVE_THE_FLAG_OUT}")
    return text


def text(value: str) -> str:
    """An argparse ``type`` for a value read as text (a tool, a principal, JSON arguments, a
    capability, a reason): its bytes decoded as UTF-8, whatever the locale (docs/cli.md), so that
    ``--args '{"city": "€"}'`` means the same under a Latin-1 or ASCII locale as under a UTF-8 one.
    Python decodes arguments with the locale's encoding (undecodable bytes as ``\\udcXX``), and
    ``os.fsencode`` gives those bytes back; bytes that are not UTF-8 stay ``\\udcXX``, refused
    where text is stored. File names are not passed through this: they may be any bytes, and the
    file system reads them in the locale's encoding."""
    try:
        raw = os.fsencode(value)
    except UnicodeEncodeError:  # text a Python caller passed (``main([...])``), not from the command line
        return value
    return raw.decode("utf-8", "surrogateescape")


def given_text(value: str) -> str:
    """``given`` and ``text``: a name read as text, not empty."""
    return text(given(value))


def given_utf8(value: str) -> str:
    """``given_text`` for a name that is only compared, never stored (a DID or tool that ``audit
    show`` or ``tasks dead-letters`` filters on, the broker ``broker`` reads, the origin ``audit
    verify-proof`` expects): bytes that are not UTF-8 are
    refused (exit 2) as where the name is stored, never read as a name that matches nothing
    (until review R59 ``audit show --tool $'\\xff'`` listed nothing, exit 0)."""
    name = given_text(value)
    if any("\udc80" <= c <= "\udcff" for c in name):
        raise argparse.ArgumentTypeError(f"{printable(name[:60])}: not UTF-8 text")
    return name


def given_path(text: str) -> Path:
    """``given``, as a ``Path`` (``Path("")`` would be the current directory)."""
    return Path(given(text))


_SEPARATORS = tuple(sep for sep in (os.sep, os.altsep) if sep)


def given_file(text: str) -> str:
    """``given``, for the file a command writes (every ``--out``): a name whose last part is
    empty, ``.`` or ``..`` (``newdir/``, ``newdir/.``, ``.``, ``..``) names a directory, as the
    shell and ``open`` read it, and is refused (exit 2, naming it). ``Path`` drops a trailing
    separator and ``/.``: until review R84 ``policy schema --out newdir/`` (and, after that fix,
    ``--out newdir/.``) wrote the schema to a file named ``newdir``, replacing one there."""
    last = given(text)
    for sep in _SEPARATORS:
        last = last.rpartition(sep)[2]
    if last in ("", ".", ".."):
        why = f"ends in {text[-1]!r}" if not last else f"has {last!r} as its last part"
        raise argparse.ArgumentTypeError(
            f"{printable(text)} {why}: that names a directory; name the file to write in it"
        )
    return text


def given_file_path(text: str) -> Path:
    """``given_file``, as a ``Path``."""
    return Path(given_file(text))


def one_line_text(
    flag: str, limit: int = MAX_FREE_TEXT, *, names: bool = False, keeps_bytes: bool = False
) -> Callable[[str], str]:
    """An argparse ``type`` for free text that is recorded (in an audit entry, a signed grant):
    ``text``, and refused with ``InputError`` (exit 2, one line naming ``flag``) when it holds a
    ``not_printable`` character (C0, C1, DEL, a bidi override or isolate, a line separator),
    named with its code point and position (``character_named``), or is longer than ``limit``
    characters. Output escapes such characters, but the record kept them (until review R56).
    ``names``: the value names someone (``--by``), and an empty one is refused as ``given``.
    ``keeps_bytes``: a byte that is not UTF-8 (a Latin-1 terminal's ``é``, kept as ``\\udcXX``)
    is let through, to be recorded escaped: ``grant revoke``'s text, since a revocation never
    fails for a locale (review R29); a typed control character is no locale's doing."""

    def refused(char: str) -> bool:
        return not_printable(char) and not (keeps_bytes and "\udc80" <= char <= "\udcff")

    def checked(value: str) -> str:
        value = text(given(value) if names else value)
        at = next((i for i, c in enumerate(value) if refused(c)), None)
        if at is not None:
            raise InputError(
                f"{flag} holds {character_named(value[at])} at character {at + 1}; write one line of text"
            )
        if len(value) > limit:
            raise InputError(f"{flag} is {len(value):,} characters long; at most {limit:,}")
        return value

    return checked


def printable(text: str) -> str:
    """``text`` as one line safe to print: every ``not_printable`` character escaped (``\\n``,
    ``\\x1b``, ``\\u202e``), and a backslash as ``\\\\`` so that no escape is ambiguous. Text from
    a token or a payload printed this way cannot add lines or send escape sequences."""
    if not any(c == "\\" or not_printable(c) for c in text):
        return text
    return "".join(
        c.encode("unicode_escape").decode("ascii") if c == "\\" or not_printable(c) else c for c in text
    )


def error_line(exc: Exception) -> str:
    """The line (with its line break) that names on standard error one row a listing could not
    read, after the rows it listed (``budget held``, ``tasks unsettled``; exit 2): as ``main``
    writes a failed command's one line, ``agentgate: error: ...``, on one line, escaped once
    and cut as ``refusal`` cuts. Review R69: until then one such row hid every other."""
    return f"agentgate: error: {escaped_once(shortened(' '.join(str(exc).split())))}\n"


def escaped_once(text: str) -> str:
    """``text`` with every ``not_printable`` character escaped (``\\n``, ``\\x1b``, ``\\u202e``)
    and backslashes left as they are: for text that the library already quotes escaped (a name
    as ``repr`` writes it, a value as JSON, a path through ``_shown.shown_path``), which
    ``printable`` would escape a second time (``'x\\\\x1b'``). What the library quoted raw still
    cannot add a line or send an escape sequence."""
    return "".join(c.encode("unicode_escape").decode("ascii") if not_printable(c) else c for c in text)


def refusal(message: str) -> str:
    """The line (with its line break) that says on standard output that a command refused what
    it was asked (exit 1): ``REFUSED: message``, escaped once (``escaped_once``: the library
    quotes the key or id it names) and, when longer than 2,000 characters, cut in its middle as
    an error line is (``_lines.shortened``): until review R59 a refusal quoting a key of 10,000
    characters was written whole."""
    return f"REFUSED: {escaped_once(shortened(message))}\n"


def shown_policy(path: str | Path) -> Policy:
    """``load_policy(path)`` for a command; a file that does not load is ``shown_source_error``."""
    from agentgate.policy import load_policy  # the policy schema: only for verbs that read one

    with shown_source_error():
        return load_policy(path)


@contextlib.contextmanager
def shown_source_error() -> Iterator[None]:
    """Turn a ``SourceError`` (a policy or inventory that does not load) into an ``InputError``
    of one line (``file:line:column: ...``) with every ``not_printable`` character escaped: it
    quotes the file's own text (a key, a value), and a file under review must not send escape
    sequences to the reviewer. Backslashes are left as they are: the library quotes what it
    names already escaped (a key path as ``'x\\x1b[2J.pub'``, a file name through
    ``_shown.shown_path``), and ``printable`` showed each such escape twice (until review R55)."""
    try:
        yield
    except SourceError as exc:
        raise InputError(escaped_once(" ".join(str(exc).split()))) from None


def utc(timestamp: float | None) -> str:
    """A Unix time as ``2026-11-29T18:00:00Z`` (UTC, seconds); ``-`` for none or a non-finite one,
    and beyond the years a datetime can hold (``utc_text``: an integer past a float's range
    included, where ``math.isfinite`` raised ``OverflowError`` until review R84)."""
    if timestamp is None:
        return "-"
    return utc_text(timestamp) or "-"


def open_existing_store(
    url: str | None,
    *,
    init_hint: bool = False,
    part_tables: frozenset[str] = frozenset(),
    named_by: str = STORE_NAMED_BY,
    read_only: bool = False,
) -> Store:
    """``open_store(create=False)`` for a command that only reads, or that writes what must reach
    a store in use (a revocation), or decides against its revocations (``grant check``,
    ``delegate``, ``serve``): a store that does not exist (``NoStore``: a missing or empty SQLite
    file, another application's, a PostgreSQL database of none of agentgate's tables) is an
    ``InputError`` in the command's own words, not a new empty store that looks like an empty
    answer, that takes a revocation no gateway reads, or whose empty revocation list lets a
    revoked chain through. A SQLite file is also refused when it holds a table of one of
    agentgate's names without a column a row of it must have (another application's
    ``audit_log``). ``init_hint``: the error for a missing SQLite file also says how to create
    one there. ``part_tables``: the tables of the one part the command uses (``grant check``: the
    grants part's); a SQLite file that holds them all is not read for the columns of every part's
    tables (the part checks its own as it opens them, ``ensure_schema``), so that a verb scripts
    run in loops loads no other part's schema. ``named_by``: what names the store for the
    command, as its errors say to check it (``grant check`` and ``delegate`` take no
    ``--store``: ``AGENTGATE_STORE``). ``read_only``: a command that only reads opens the store
    so (``open_store(read_only=True)``): nothing in it is written, a SQLite file's journal mode
    and write-ahead log included, and a file it may only read can be read."""
    from agentgate.store import checked_sqlite_path, open_store, store_url
    from agentgate.store._sqlite import sqlite_tables_read_only, tables_and_columns

    target = store_url(url)
    path = sqlite_path(target)
    shown = "the store"
    if path is not None:
        # The path as printed: escaped, so that a line break or white space at its end (a
        # CRLF env file: ``AGENTGATE_STORE=/var/lib/agentgate.db\r``) shows instead of vanishing
        # into the one error line, which would name a file that exists.
        shown = printable(path) + ("" if path == path.strip() else " (white space or a line break at an end)")
        checked_sqlite_path(path, from_url=path != target)  # a path open_store refuses: why
        if path != path.strip() and not Path(path).exists():
            # open_store refuses the white space before it looks for the file: say first that
            # there is no store at the path, with the white space shown.
            raise InputError(_no_store("missing", (), shown, path, init_hint, named_by))
        # Before open_store: opening switches the file to WAL mode, a change to its header that
        # another application's database must not get from a command that only reads.
        _refuse_foreign_table(shown, sqlite_tables_read_only(path), part_tables, named_by)
    try:
        store = open_store(target, create=False, read_only=read_only)  # any other scheme: StoreError
    except NoStore as exc:
        if exc.reason == "no_tables":  # a PostgreSQL database: named by its URL, password masked
            from agentgate.store._postgres import _redact  # here: a SQLite store never loads psycopg

            shown = printable(_redact(target))
        raise InputError(_no_store(exc.reason, exc.tables, shown, path, init_hint, named_by)) from None
    try:
        if store.dialect == "sqlite":  # the file could not be read before it was opened: now
            _refuse_foreign_table(
                printable(store.url), tables_and_columns(store.query), part_tables, named_by
            )
    except BaseException:
        store.close()
        raise
    return store


def _no_store(
    reason: str, tables: tuple[str, ...], shown: str, path: str | None, init_hint: bool, named_by: str
) -> str:
    """The one error line of a command for the store ``open_store(create=False)`` refused
    (``NoStore``: its ``reason`` and ``tables``); ``shown``: its path as printed."""
    if reason == "missing":
        hint = f"; to set up a new store there: agentgate store init --store {shlex.quote(printable(path or ''))}"
        return f"no store at {shown}: check {named_by}{hint if init_hint else ''}"
    if reason == "empty":
        return f"no store at {shown}: the file is empty; check {named_by}"
    if reason == "foreign":
        names = sorted(printable(name) for name in tables)
        listed_names = ", ".join(names[:5]) + (", ..." if len(names) > 5 else "")
        return (
            f"no store at {shown}: it is another application's SQLite database (tables {listed_names}), "
            f"holding none of agentgate's; check {named_by}"
        )
    # ``shown``: the URL, its password masked, as the store's other errors name it (until review
    # R71 "the database the store URL names": which one, of which env file, went unsaid).
    return (
        f"no store in the PostgreSQL database {shown}: it holds none of "
        f"agentgate's tables; check {named_by} (the database name), or run "
        "`agentgate store init` there as its owner to set up a new store"
    )


def sqlite_path(target: str) -> str | None:
    """The file a store URL names when it is a SQLite store (a path or ``sqlite:///PATH``, the
    scheme in any case, as ``open_store`` reads it); ``None`` for any other (PostgreSQL, a
    conninfo string, which ``open_store`` refuses)."""
    from agentgate.store import is_conninfo

    scheme = _SCHEME.match(target)
    if scheme is None and is_conninfo(target):
        return None
    if scheme is None or (scheme.group(1).lower() == "sqlite" and target[scheme.end() :].startswith("/")):
        return target if scheme is None else target[scheme.end() + 1 :]
    return None


def _refuse_foreign_table(
    shown: str,
    tables: list[tuple[str, frozenset[str]]] | None,
    part_tables: frozenset[str] = frozenset(),
    named_by: str = STORE_NAMED_BY,
) -> None:
    """Raise ``InputError`` when a SQLite file holds a table of one of agentgate's names without
    a column a row of it must have: another application's, in which a command that only reads
    would create every part's tables and answer from their emptiness. A file not read (``None``)
    passes; so does, without its columns read, one that holds every table of ``part_tables``
    (``open_existing_store``), its names compared as SQLite compares them (``sqlite_name``: until
    review R88 a store of upper-case tables was always read for every part's columns). A file of
    other tables only is ``open_store``'s ``NoStore``."""
    from agentgate.store._base import sqlite_name
    from agentgate.store._sqlite import foreign_table, required_store_columns

    names = {sqlite_name(name) for name, _ in tables or () if not name.lower().startswith("sqlite_")}
    if not names or (part_tables and {sqlite_name(name) for name in part_tables} <= names):
        return
    foreign = foreign_table(tables or (), required_store_columns())
    if foreign is not None:
        raise InputError(
            f"no store at {shown}: its table {printable(foreign[0])} is not agentgate's (no column "
            f"{', '.join(foreign[1])}); is it another application's database? Check {named_by}"
        )


def refuse_out_over_inputs(out: Path | str | None, inputs: dict[str, object]) -> None:
    """Raise ``InputError`` when ``--out`` names, by any path, a file the command reads
    (``inputs``: what each is called, its path as given): the token written there would replace
    it: ``grant delegate``'s ``TOKENFILE`` (the holder's own token), ``grant issue``'s policy,
    either's ``--to`` public key, ``approval sign``'s payload (until review R68 only the first
    was refused: ``--out`` naming ``--policy`` lost the policy). A ``--to`` given as a did:key
    names no file and is passed over."""
    if out is None:
        return
    for what, given in inputs.items():
        if given is None:
            continue
        try:
            same = os.path.samefile(out, str(given))
        except (OSError, ValueError):  # no file at --out (nothing there to lose), or at this one
            continue
        if same:
            raise InputError(f"{out}: cannot write: it is {what} ({given}); name another file")


def open_audit_log(
    url: str | None,
    public_key: str | None = None,
    *,
    create_key: bool = False,
    reads: bool | None = None,
    check_first: Callable[[AuditLog], object] | None = None,
    create_log: bool | Callable[[Store], bool] = True,
    read_only: bool = False,
    unsigned: bool = False,
    signs: bool = False,
) -> tuple[Store, AuditLog]:
    """The store (as ``open_existing_store``) and its audit log, read with ``public_key``
    (``log.pub`` or its did:key) when given, else with the log key where agentgate finds it
    (created only if ``create_key``). ``reads``: for a missing key's error line, whether the
    command takes ``--key PUBFILE`` instead (``True``), signs with the key (``False``), or
    neither (``None``). ``check_first``: called with the log before a log key is created (read
    with a public key nothing was signed with, and the rotated-out keys), so that a command it
    refuses (by raising) leaves no key behind; where it raises ``TamperDetected`` and the key was
    made meanwhile by another process (which signed the checkpoint no such key opens), it is
    called again with the log read with that key, whose verdict stands. ``create_log``: make the
    log's tables in a store that has none yet; ``False`` for a verb that only reads, which creates
    nothing there (the log's ``exists`` is then ``False``); or a function of the store, asked before the log is
    opened, for a verb that writes only where the store holds what it changes (``tasks settle``,
    ``budget settle``: refused, they make no log). A log that was dropped is ``LogDropped``
    either way.
    ``read_only``: the store is opened to read only (``open_existing_store``; with ``create_log``
    false). ``unsigned``: the verb reads entries and checks no signature (``budget held``,
    ``tasks unsettled``), so no key is read or needed: the log is opened with a public key that
    signs nothing (until review R68 these two refused to run without the log's private key,
    and take no ``--key``). ``signs``: the verb may sign a checkpoint (``audit prove``; ``audit
    checkpoint``, which gives ``create_key``): only such a verb says which key a PostgreSQL log's
    first checkpoint is signed with (``_warn_default_log_key``). The caller closes the store."""
    from agentgate.keys import (
        SigningKey,
        load_public_key,
    )  # the log and its keys: only for verbs that read it
    from agentgate.store.audit import AuditLog, log_key_path, log_origin, open_log_key, previous_log_keys
    from agentgate.store.audit._keys import refuse_new_log_key

    store = open_existing_store(url, read_only=read_only)
    check_again: Callable[[AuditLog], object] | None = None  # check_first, with the key made meanwhile
    try:
        key: PublicKey | SigningKey
        if public_key:
            key = load_public_key(public_key)
        elif unsigned:
            key = SigningKey.generate().public
        else:
            path = log_key_path(store)
            if not create_key:
                _refuse_missing_log_key(path, reads=reads)
            elif check_first is not None and not os.path.lexists(path):
                refuse_new_log_key(store, path)  # as open_log_key would, before the log is read
                keyless = AuditLog(
                    store, SigningKey.generate().public, log_origin(), previous_keys=previous_log_keys()
                )
                try:
                    check_first(keyless)
                except TamperDetected:
                    # Another process made the key since lexists and signed a checkpoint with it,
                    # which no throwaway key opens: that checkpoint is judged with the key, below
                    # (until review R95 it was called tampering, exit 1, on an intact log). Its
                    # key file is linked before its first checkpoint is stored, so a checkpoint
                    # read here that it signed finds the file there now.
                    if not os.path.lexists(path):
                        raise
                    check_again = check_first
            key = open_log_key(store, create=create_key)
            if signs or create_key:
                _warn_default_log_key(store, path)
        # How the key was given, as a refusal names it: the variable for a verb that signs or read
        # the private key, else --key or the variable (a verb that reads takes either).
        named = "AGENTGATE_LOG_KEY" if isinstance(key, SigningKey) else "--key, AGENTGATE_LOG_KEY"
        create = create_log(store) if callable(create_log) else create_log
        log = AuditLog(
            store, key, log_origin(), previous_keys=previous_log_keys(), create=create, key_named=named
        )
        if check_again is not None:
            check_again(log)
        return store, log
    except BaseException:
        store.close()
        raise


def _warn_default_log_key(store: Store, path: Path) -> None:
    """One warning (``agentgate.cli.warn``) when ``store`` is PostgreSQL, its log has no
    checkpoint yet, and its log key was taken from the default place, ``.agentgate/log.key``
    under the working directory (no ``AGENTGATE_LOG_KEY``): the key made or found there (a
    SQLite quickstart's has the same path) becomes the shared log's key with its first
    checkpoint, and a command run from any other directory then finds no key (``no log key
    there``). Until review R71 nothing said so. Said only before the first checkpoint, the
    moment the key is chosen, by a verb that may sign it (``open_audit_log``'s ``signs``: not
    ``audit verify`` or ``show``, which read the key and sign nothing), and a warning, not a refusal: a script that works keeps its exit
    code and output, and a cron job is not warned every minute for a key already in use."""
    from agentgate.store import SQLiteStore
    from agentgate.store.audit._keys import _has_checkpoints

    if isinstance(store, SQLiteStore) or os.environ.get("AGENTGATE_LOG_KEY") or _has_checkpoints(store):
        return
    from agentgate.cli import warn  # said when the command ends

    warn(
        f"the audit log's key is {printable(os.path.abspath(path))}, .agentgate/log.key under "
        "the working directory (the default for a PostgreSQL store), and becomes the log's key with "
        "its first checkpoint: run from another directory, agentgate finds no key there; set "
        "AGENTGATE_LOG_KEY to the key's path (docs/operations.md, The log key)"
    )


def _refuse_missing_log_key(path: Path, *, reads: bool | None) -> None:
    """Raise ``KeyFileError`` saying what is missing and what to do when there is no log key at
    ``path``, in the same terms for every verb (``audit checkpoint`` and ``grant revoke``, which
    may create the key, say so in theirs), not the bare ``cannot read private key: No such file
    or directory`` of a key file that exists but cannot be read."""
    if os.path.lexists(path):
        return  # there: read it (a file that cannot be read says why)
    instead = {
        True: "; to read the log without it, give its public key: --key log.pub (or its did:key)",
        False: "; this command signs with it (a checkpoint, an audit entry): log.pub will not do",
        None: "",
    }[reads]
    raise KeyFileError(
        f"{printable(str(path))}: no log key there (AGENTGATE_LOG_KEY; by default log.key beside a "
        "SQLite database, .agentgate/log.key for PostgreSQL): point AGENTGATE_LOG_KEY at the log's "
        f"private key{instead}; for a log with no checkpoint yet, `agentgate audit checkpoint` "
        "creates one (docs/operations.md, The log key)"
    )


_APP_ROLE_RIGHTS = {
    "audit_log": "SELECT, INSERT",
    "audit_checkpoints": "SELECT, INSERT",
    "agentgate_store_parts": "SELECT, INSERT",
    "audit_refs": "SELECT",
    "audit_refs_built": "SELECT",
    "audit_nodes": "SELECT, INSERT, DELETE",
    "agentgate_grants": "SELECT, INSERT",
    "agentgate_revocations": "SELECT, INSERT",
    "agentgate_schema": "SELECT",
}
"""The rights docs/operations.md (PostgreSQL set-up) gives the application role on the tables it
may not change freely; on every other agentgate table it has SELECT, INSERT, UPDATE, DELETE."""

_DENIED_TABLE = re.compile(r"permission denied for table ([a-z_]+)\b")


def unprotected_log(store: Store) -> str | None:
    """What ``audit verify`` would name first of the audit log's machinery not in force, with how
    many more follow (``protection_said``), read from the catalog only: nothing is written and no
    key is read or made. ``None`` for a store without a log, or a log whose machinery is whole.
    Raises ``LogDropped`` for a log that was dropped, as opening it would."""
    from agentgate.store.audit._schema import protection_said, refuse_dropped_log

    refuse_dropped_log(store)
    return protection_said(store)


def named_for(message: str, options: frozenset[str]) -> str:
    """``message`` as a verb of ``options`` may say it: one without ``--store`` (``grant issue``,
    ``check``, ``delegate``, ``inspect``: ``AGENTGATE_STORE`` alone names their store) is not
    told to check ``--store``, which it would refuse as an unrecognized argument (until review
    R69 the store's errors said so to every verb)."""
    if "--store" in options:
        return message
    return message.replace(STORE_NAMED_BY, "AGENTGATE_STORE")


def privilege_hint(message: str) -> str:
    """``message``, and when it is PostgreSQL's ``permission denied for table T`` on one of
    agentgate's tables (a role set up without the rights docs/operations.md grants, or a table
    added by an upgrade after the grants ran), what to grant: PostgreSQL names the table, never
    the right."""
    from agentgate.store._existing import NO_PRIVILEGE_HINT, STORE_TABLES

    denied = _DENIED_TABLE.search(message)
    if denied is None or denied.group(1) not in STORE_TABLES:
        return message
    table = denied.group(1)
    rights = _APP_ROLE_RIGHTS.get(table, "SELECT, INSERT, UPDATE, DELETE")
    # In place of the store's own hint, which cannot name the table (until review R81 both).
    message = message.replace(f" {NO_PRIVILEGE_HINT}", "")
    return (
        f"{message} (the role the store URL connects as lacks a right on {table} that this "
        f"command needs: as the schema's owner, run GRANT {rights} ON {table} TO that role; "
        "docs/operations.md, PostgreSQL set-up, lists the application role's rights)"
    )


def say_written(line: str) -> None:
    """Say ``line`` on standard output once the work it reports is done (``work_done_said``):
    ``wrote FILE ...`` once a verb's ``--out`` file is in place, where every verb that writes one
    says so, nothing else going there in that mode (until review R70 ``grant issue``, ``grant
    delegate`` and ``approval sign`` said it on standard error), or what a verb committed to the
    store (a settlement, a revocation)."""
    with work_done_said():
        sys.stdout.write(line + "\n")


@contextlib.contextmanager
def work_done_said() -> Iterator[None]:
    """Write, in the block, what a verb says of work it has done (an ``--out`` file in place, a
    settlement or revocation committed): a standard output that cannot take it (closed with
    ``>&-``, a full disk, a reader gone) drops it, and the command keeps the exit code of what it
    did, since exit 2 would say nothing was done (a retried ``grant issue`` would issue a second
    grant, a retried ``tasks settle`` be refused, exit 1: until review R83 it exited 2 once its
    settlement was committed). Only output goes in the block: an ``OSError`` there is the
    output's."""
    try:
        yield
        sys.stdout.flush()
    except (OSError, ValueError):
        from agentgate.cli.main import _drop_stdout  # on the error path only

        _drop_stdout()  # what could not be written is not written again at exit


def closed_once_committed(close: Callable[[], None], *, committed: bool, work: str) -> None:
    """``close()``, of the store (or a part) a verb did its ``work`` in (``the prune``, ``the
    settlement``); once that work ``committed``, a ``StoreError`` from it is a warning that says
    so, and the verb says its line and exits as its work went: 0 (until review R94's regression
    pass ``store prune`` said ``agentgate: error: nothing was pruned: ...``, exit 2, though the
    rows were gone, and ``budget settle`` and ``tasks settle`` the store's error, exit 2, no line,
    though the settlement was stored). Before the commit it raises as ever."""
    if not committed:
        close()
        return
    try:
        close()
    except StoreError as exc:
        from agentgate.cli import warn  # said when the command ends

        warn(f"{work} committed, but the store could not be closed: {exc}")


_Settled = TypeVar("_Settled")


def settled_by_hand(
    close: Callable[[], None],
    settle: Callable[[Callable[[], None]], _Settled],
    said: Callable[[_Settled], str],
) -> int:
    """A settlement by hand (``budget settle``, ``tasks settle``): ``settle(committed)``, the
    signals from its COMMIT on held until its line is said (``committed_work_held``: ``committed``
    is called as it commits); the store closed (``close``) as ``closed_once_committed`` closes it;
    then ``said(what settle returned)`` on standard output (``say_written``: exit 0 whether or not
    it can be written). Exit 0 settled, 1 for its ``SettlementRefused``: ``REFUSED: ...`` on
    standard output, nothing written."""
    with committed_work_held() as committed:
        done = False
        try:
            settled = settle(committed)
            done = True
        except SettlementRefused as exc:
            sys.stdout.write(refusal(str(exc)))
            return 1
        finally:  # once it committed, a store that cannot be closed is a warning, the line said
            closed_once_committed(close, committed=done, work="the settlement")
        say_written(said(settled))
        return 0


def write_json(value: object, indent: int | None = 2) -> None:
    """Write ``value`` to standard output as one JSON document and a newline: the one way every
    ``--json`` writes (``audit show --json`` aside, which writes the logged bytes). Text is written
    as itself, UTF-8, so a name or a purpose reads the same as in the audit log; what is not
    printable (``not_printable``: a bidi override, a line separator, a lone surrogate) is written as
    its ``\\u`` escape, so that a hostile token's text cannot reorder or forge what a terminal
    shows. ``indent=None`` keeps the document on one line."""
    text = json.dumps(value, indent=indent, ensure_ascii=False)
    # json.dumps escapes every C0 control inside a string: a raw line break is the layout's.
    sys.stdout.write("".join(_json_escape(c) if c != "\n" and not_printable(c) else c for c in text) + "\n")


def _json_escape(char: str) -> str:
    """``char`` as a JSON escape: ``\\uXXXX``, or its UTF-16 surrogate pair beyond U+FFFF."""
    code = ord(char)
    if code <= 0xFFFF:
        return f"\\u{code:04x}"
    code -= 0x10000
    return f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}"


def listed(rows: list[Any], as_json: bool, nothing: str) -> bool:
    """Write ``rows`` as one JSON array (``as_json``), or the line ``nothing`` when there are none;
    whether that was the whole answer (else the caller prints its table)."""
    if as_json:
        write_json(rows)
    elif not rows:
        sys.stdout.write(nothing + "\n")
    return as_json or not rows


_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*)://")
"""A URL scheme as ``open_store`` recognizes one."""


def seconds_or_duration(value: str) -> float:
    """``--older-than`` of ``tasks settle``, ``budget held`` and ``budget settle``: seconds
    (``900``, ``0``, ``1.5``), as documented, or a DURATION (``15m``, ``1h30m``) as ``store prune
    --older-than`` takes: the same flag name read two ways across verbs would refuse one or the
    other."""
    if re.fullmatch(r"[0-9]{1,12}(\.[0-9]{1,9})?", value, re.ASCII):
        return float(value)
    if re.fullmatch(r"[0-9]+(\.[0-9]+)?", value, re.ASCII):
        # Seconds, too many digits: said so, not 'write a number with a unit' (until review R55).
        raise argparse.ArgumentTypeError(
            f"{value[:40]!r}{'...' if len(value) > 40 else ''}: seconds are written in at most 12 "
            "digits, and at most 9 after the point (or give a duration such as 15m)"
        )
    try:
        return float(parse_duration(value))
    except InputError as exc:
        raise argparse.ArgumentTypeError(
            f"expected seconds (900) or a duration (15m), got {value!r}: {exc}"
        ) from None


def settle_flags(settling: argparse.ArgumentParser, *, min_age_s: float, older_than_help: str) -> None:
    """The flags ``tasks settle`` and ``budget settle`` share: who settles (``--by``), why
    (``--reason``), and the least age of what is settled (``--older-than``, default ``min_age_s``)."""
    settling.add_argument(
        "--by",
        default="operator",
        type=one_line_text("--by", names=True),
        metavar="NAME",
        help="who settles it (default operator)",
    )
    settling.add_argument(
        "--reason",
        default="",
        type=one_line_text("--reason"),
        metavar="TEXT",
        help=f"why, one line of text for the audit entry (at most {MAX_FREE_TEXT:,} characters)",
    )
    settling.add_argument(
        "--older-than", type=seconds_or_duration, default=min_age_s, metavar="SECONDS", help=older_than_help
    )
