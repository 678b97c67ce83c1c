"""The names a caller gives that readers see (an agent's name, a tenant): ``check_name`` and
``check_tenant``; and the ids a caller gives that are compared, never shown (a call's ``call_id``
and ``run_id``, a dispatched call's session): ``_expect_id`` and ``check_session``. Below
``gate`` and ``dispatch`` so that both check a tenant and a session the one way
(``Gate.dispatch`` and ``Dispatcher.chat``, which the gateway and direct callers reach)."""

from __future__ import annotations

import difflib
import re
import unicodedata
from collections.abc import Iterable
from typing import Literal, get_args

from agentgate import _confusables
from agentgate._shown import character_named, not_printable, shown
from agentgate.errors import InputError

BUDGET_UNIT = re.compile(r"[a-z][a-z0-9_]{0,31}", re.ASCII)
"""What a budget unit may be called, in a token (``authority._grant``) and in a store's reservation
row (``store.held`` reads a stored unit only when it is one): here, below both."""
BUDGET_UNIT_RULE = "a lowercase letter first, then lowercase letters, digits or '_', at most 32 characters"
"""``BUDGET_UNIT`` in words, for a refusal of a unit (a token's, ``BudgetLedger.reserve``'s)."""

BudgetUnit = Literal["usd_micros", "tokens", "calls"]
"""The units agentgate meters, written once here, below every layer: what a policy's budgets and
quotas may name (``policy._schema``), what the CLI makes a grant in (``authority._grant``'s
``Budget.parse(metered=True)``) and what the Gate charges (``gate._costs``). Until review R63 each
of the three wrote the set out itself, held equal only by a test."""
BUDGET_UNITS: tuple[BudgetUnit, ...] = get_args(BudgetUnit)
"""``BudgetUnit`` as a tuple, in the order messages name them."""
METERED_IN_WORDS = f"{', '.join(BUDGET_UNITS[:-1])} or {BUDGET_UNITS[-1]}"
"""``BUDGET_UNITS`` as every message names them: ``usd_micros, tokens or calls``."""
METERED_UNITS = frozenset({*BUDGET_UNITS, "micro_usd"})
"""The units the Gate charges a call in: ``BUDGET_UNITS`` and ``micro_usd``, an alias of
``usd_micros`` that no policy names and the CLI makes no grant in, but a token made by the library
may carry. A chain with a budget in any other unit has every call refused (fail closed)."""


def policy_unit(unit: str) -> str:
    """``unit`` as a policy names it: ``micro_usd`` (``METERED_UNITS``' alias) is ``usd_micros``,
    so that a budget a library-made token carries in it is compared with a policy's alike (until a
    regression review of R85, a delegated link's ``micro_usd`` under a rule in ``usd_micros`` was
    refused as another unit, as was a root grant's under a role's)."""
    return "usd_micros" if unit == "micro_usd" else unit


MAX_FREE_TEXT = 1000
"""The most characters free text that is recorded may hold: a CLI flag such as ``--reason`` or
``--by`` (``cli._common.one_line_text``), and a revocation's reason wherever it is given
(``authority.revoke``, ``revoke_holder``, ``Gate.revoke``), which the revocation's row and its
audit entry then both keep whole (until review R85 the row kept 500 characters of it)."""

MAX_NAME_CHARS = 200
"""The most characters a name may hold: what spans keep of a name (``audit.spans.MAX_CALL_ID_CHARS``,
tests/test_gate_agent_names.py holds the two equal)."""

MAX_PURPOSE = 256
"""The most characters of a grant's purpose: a limit of the token format (``authority._grant``),
which ``agentgate grant``'s help states (``cli._grant_parser``), here below both so that the help
loads no authority engine. Until review R65b the parser kept a copy, held equal by a test."""

SETTLE_MIN_AGE_S = 900.0
"""How long ago, by default, a call still ``started`` (``store.once.settle``) or a reservation
still held (``store.held``) must have been made before it may be settled by hand: one made more
recently may still be running (a person who settles it as not run would let it run twice, and its
real outcome would contradict the one written by hand). Here, below the store and the CLI, so
that the help of ``tasks settle``, ``budget held`` and ``budget settle``, which states it, loads no
store; until review R66 the CLI kept a copy, held equal by a test."""


def _unicode(text: str) -> bool:
    """Whether ``text`` is valid Unicode (no lone surrogate), as a grant's purpose and an audit
    entry hold it: an agent's name is signed into the one and recorded in the other."""
    try:
        text.encode()
    except UnicodeEncodeError:
        return False
    return True


def check_name(name: str, whose: str) -> None:
    """``InputError`` naming ``whose`` name unless ``name`` (non-empty text) is valid Unicode,
    at most ``MAX_NAME_CHARS`` characters, and one line of visible text: a character that is
    not printable (``_shown.not_printable``: a control character, a bidi override or isolate, an
    invisible format character, a line separator) hides in, or reorders, what a reader of the
    audit log, a grant and the traces sees. Until review R56 a name of any length was signed
    into its grant and recorded (up to the 64 KiB audit entry), with any such character."""
    if len(name) > MAX_NAME_CHARS:
        raise InputError(
            f"{whose} name must be at most {MAX_NAME_CHARS} characters, got {len(name):,}: {name[:40]!r}..."
        )
    if not _unicode(name):
        raise InputError(f"{whose} name must be valid Unicode text, got {name[:80]!r}")
    hidden = next((at for at, char in enumerate(name) if not_printable(char)), None)
    if hidden is not None:
        raise InputError(
            f"{whose} name holds {character_named(name[hidden])} at character {hidden + 1}: "
            "a name is one line of visible text"
        )


_SCRIPT_OF_WORD = {"CJK": "HAN", "IDEOGRAPHIC": "HAN"}
"""Scripts whose letters' Unicode names start with another word than the script's name."""

_MIXES_ALLOWED = (
    frozenset({"LATIN", "HAN", "HIRAGANA", "KATAKANA"}),
    frozenset({"LATIN", "HAN", "BOPOMOFO"}),
    frozenset({"LATIN", "HAN", "HANGUL"}),
)
"""The mixes of scripts a name may hold (Unicode TR39's "highly restrictive" level): the ways
Japanese, Chinese and Korean names are written, each with Latin."""


def _script(letter: str) -> str:
    """The script of ``letter`` as the first word of its Unicode name (``LATIN``, ``CYRILLIC``,
    ``GREEK``, ``HAN`` for ``CJK ...``): Python's ``unicodedata`` has no Script property, and a
    letter's name opens with its script's for every script a look-alike of Latin comes from."""
    word = unicodedata.name(letter, "").partition(" ")[0]
    return _SCRIPT_OF_WORD.get(word, word)


def mixed_scripts(name: str) -> tuple[str, str, int] | None:
    """Where ``name``, as NFKC reads it (full-width and mathematical letters as their plain
    forms), holds letters of two scripts no allowed mix (``_MIXES_ALLOWED``) joins: (the first
    letter's script, the other script, the other letter's index in the NFKC form); ``None`` for
    a name of one script, or of an allowed mix. Letters only: digits, marks and punctuation
    belong to every script. A name wholly in another script that looks Latin passes here: the
    Gate compares it with principals' names by Unicode's confusables (``_confusables.readings``,
    ``gate._checks.principal_named``; since review R68)."""
    if name.isascii():
        return None
    seen: dict[str, int] = {}
    for at, char in enumerate(unicodedata.normalize("NFKC", name)):
        if unicodedata.category(char) in ("Lu", "Ll", "Lt", "Lo"):
            seen.setdefault(_script(char), at)
    if len(seen) < 2 or any(mix.issuperset(seen) for mix in _MIXES_ALLOWED):
        return None
    first, *others = seen
    other = next(o for o in others if not any({first, o} <= mix for mix in _MIXES_ALLOWED))
    return first, other, seen[other]


def mixed_scripts_said(name: str, mixed: tuple[str, str, int]) -> str:
    """``name`` and the mix ``mixed_scripts`` found in it, in words: ``'rеsearcher' mixes Latin
    and Cyrillic letters (U+0435 CYRILLIC SMALL LETTER IE at character 2)``."""
    first, other, at = mixed
    letter = unicodedata.normalize("NFKC", name)[at]
    return (
        f"{name[:80]!r} mixes {first.title()} and {other.title()} letters "
        f"(U+{ord(letter):04X} {unicodedata.name(letter, 'an unnamed letter')} at character {at + 1})"
    )


def first_non_ascii(text: str) -> str | None:
    """The first character of ``text`` that is not ASCII, in words (``U+212A KELVIN SIGN at
    character 1``), else ``None``: for the errors that refuse a name compared in lower case, which
    must be ASCII since ``str.lower`` maps some other letters to ASCII ones (the Kelvin sign
    ``\u212a`` to ``k``: ``\u212a80`` reads as ``k80`` once lowered)."""
    if text.isascii():
        return None
    at, char = next((at, char) for at, char in enumerate(text) if not char.isascii())
    return f"U+{ord(char):04X} {unicodedata.name(char, 'an unnamed character')} at character {at + 1}"


def check_agent_name(name: str, whose: str) -> None:
    """``check_name``, and ``InputError`` for a name that opens or ends with a space, or whose
    letters mix scripts (``mixed_scripts``): ``researcher `` and a Cyrillic ``е`` in
    ``rеsearcher`` read as the researcher's name to an approver and a reader of the audit log
    (until review R67 both were granted); or that holds a character Unicode assigned after the
    confusables table's version (``_confusables.newer_than_table``: ``rep\ua7c1rter``, a Latin
    letter of Unicode 14.0, compared as itself; until review R69 granted)."""
    check_name(name, whose)
    if name.strip() != name:
        raise InputError(
            f"{whose} name {name[:80]!r} opens or ends with a space: it reads as the name without "
            "it; write the name without the space"
        )
    mixed = mixed_scripts(name)
    if mixed is not None:
        raise InputError(
            f"{whose} name {mixed_scripts_said(name, mixed)}: it may read as another agent's name; "
            "write a name in one script"
        )
    newer = _confusables.newer_than_table(name)
    if newer is not None:
        raise InputError(
            f"{whose} name {name[:80]!r} holds {newer}, assigned after Unicode "
            f"{_confusables.TABLE_VERSION}, the version of the confusables table agentgate compares "
            "names by: what the name reads as is unknown; write it without that character"
        )


def check_canonical_name(name: str, whose: str) -> None:
    """``InputError`` naming ``whose`` name and the form to write unless ``name`` is in Unicode's
    NFKC form, the form names are compared in (``_confusables.readings``): for a free agent name
    (one no principal's reads as), which holds its readings on the store, the first granted
    winning (``store.agent_names``). Until review R70 ``\ufb01ler`` (a ligature), granted
    first, kept the plain ``filer`` out for as long as the store lives. A principal's name and
    its variants are not refused here: the principal rule (``gate._checks.principal_named``)
    compares them."""
    if name.isascii():
        return
    canonical = unicodedata.normalize("NFKC", name)
    if canonical == name:
        return
    at = next((i for i, (a, b) in enumerate(zip(name, canonical, strict=False)) if a != b), len(canonical))
    char = name[at]
    raise InputError(
        f"{whose} name {name[:80]!r} is not in Unicode's NFKC form (U+{ord(char):04X} "
        f"{unicodedata.name(char, 'an unnamed character')} at character {at + 1}): it reads as "
        f"{canonical[:80]!r}, the form agent names are compared and registered in; write {canonical[:80]!r}"
    )


def agent_name_refused(name: str, whose: str) -> str | None:
    """Why ``check_agent_name`` refuses ``name`` (its ``InputError``'s message), else ``None``:
    for a decision, which refuses an identity under a name ``Gate.issue`` and ``Gate.delegate``
    would not grant. A short name of printable ASCII without an edge space is answered without
    the checks (a decision's usual case)."""
    if len(name) <= MAX_NAME_CHARS and name.isascii() and name.isprintable() and name.strip() == name:
        return None
    try:
        check_agent_name(name, whose)
    except InputError as refused:
        return str(refused)
    return None


def check_tenant(tenant: object) -> None:
    """``InputError`` naming the ``tenant`` argument unless it is a name ``Gate.issue`` takes
    (``check_name``: non-empty, at most ``MAX_NAME_CHARS`` characters of one line of visible
    text). The tenant keys the dispatcher's token buckets, labels its metrics and is shown in its
    errors; until review R56 any text was taken by ``Gate.dispatch`` (a megabyte, a line break, a
    bidi override), each distinct one a new bucket and a new metric series, and until review R57
    by ``Dispatcher.chat`` and ``Dispatcher.stream`` called directly."""
    if not isinstance(tenant, str) or not tenant:
        # As ``gate._authorization.shown`` shows a wrong argument: text may be a key or a token.
        plain = tenant is None or (isinstance(tenant, int | float) and not isinstance(tenant, str))
        shown_as = (
            "empty text" if tenant == "" else repr(tenant)[:80] if plain else f"a {type(tenant).__name__}"
        )
        raise InputError(f"a dispatched call's tenant must be non-empty text, got {shown_as}")
    check_name(tenant, "a dispatched call's tenant")


def _expect_id(value: object, name: str) -> None:
    """``InputError`` naming ``name`` unless ``value`` is ``None`` or valid Unicode text (no lone
    surrogate): a call's ``call_id`` or ``run_id`` is hashed into its keys, kept in the store and
    set on its span, and each of those encodes it as UTF-8 (until review R56 a lone surrogate
    raised ``UnicodeEncodeError`` from inside ``Gate.authorize``, and ``Gate.run`` took the allow
    before looking at either)."""
    if value is None:
        return
    if not isinstance(value, str):
        raise InputError(f"{name} must be text or None, got {shown(value)}")
    if not value.isascii():  # the usual case, known without encoding a copy
        try:
            value.encode()
        except UnicodeEncodeError:
            raise InputError(f"{name} must be valid Unicode text, got {value[:80]!r}") from None


MAX_SESSION_CHARS = 200
"""The most characters of a dispatched call's ``session``: it keys the router's session affinity
(up to ``Router.max_sessions`` of them held at once)."""


def check_session(session: object) -> None:
    """``InputError`` naming ``session`` unless it is ``None`` or valid Unicode text (``_expect_id``,
    as a call's ``call_id`` and ``run_id``: a session is the caller's id of a conversation, compared
    and never shown, so any visible or invisible character is its own) of at most
    ``MAX_SESSION_CHARS`` characters. Until review R57 any object was taken, and text of any
    length was held as a key of the router's affinity map, up to 100,000 of them, by
    ``Gate.dispatch`` and its twins, and by ``Dispatcher.chat`` and ``Dispatcher.stream`` called
    directly (``Dispatcher.route_request`` checks it)."""
    _expect_id(session, "session")
    if isinstance(session, str) and len(session) > MAX_SESSION_CHARS:
        raise InputError(f"session must be at most {MAX_SESSION_CHARS} characters, got {len(session):,}")


EntryKind = Literal["allow", "deny", "approval_required", "approval_given", "revoke", "spend", "outcome"]
"""The kinds of audit entry (docs/audit-format.md), written once here, below the entry format
(``audit.entry``, whose model loads pydantic) and ``agentgate audit show --kind``'s parser, whose
help lists them and loads no pydantic. Until review R65b's second pass the parser kept a copy,
held equal by a test."""
ENTRY_KINDS: tuple[str, ...] = get_args(EntryKind)
"""``EntryKind`` as a tuple, in the format's order."""


def did_you_mean(name: str, known: Iterable[str]) -> str | None:
    """``did you mean 'x'?`` for the name of ``known`` closest to ``name`` (difflib's closeness:
    ``approver`` for ``approvers``, ``support_agent`` for ``support-agent``), never ``name``
    itself; ``None`` where none is close. One reading for a misspelt field, a reference the
    policy does not declare and a role a caller names (``role_grant_template``; review R73), and
    for a misspelt command, verb, flag or choice of the command line (``cli.main``; review R74)."""
    close = difflib.get_close_matches(name, [other for other in known if other != name], n=1)
    return f"did you mean {close[0]!r}?" if close else None
