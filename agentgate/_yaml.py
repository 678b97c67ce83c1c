"""Safe YAML that remembers where every value came from, and refuses what it should not trust.

Used for every YAML file agentgate reads (policies, inventories); the caller names the error
class (a ``SourceError``) its file's problems are reported as.

PyYAML's safe loader composes the node tree; this module builds the plain data from it
itself, so that it can record the line and column of every key and value (pydantic reports
errors by location path, ``("roles", "support", "ttl_s")``, which this map turns back into
``file:line:column``) and refuse, with a location, what a configuration file must not contain:

- duplicate keys (PyYAML silently keeps the last one, so a second ``ttl_s`` would win);
- custom or Python tags (``!!python/object``, ``!include``), the non-specific tag written
  verbatim (``!<!>``, which YAML 1.2 calls invalid), and merge keys (``<<``);
- a lone surrogate escape (``"\\ud800"``), which libyaml refuses and PyYAML's own reader builds;
- a byte order mark (U+FEFF) anywhere but as the first character, which libyaml skips without
  counting it in its marks (or, at a line's start, drops from the key PyYAML's reader keeps it in);
- more than ``MAX_NODES`` nodes, counted from the parser's events before any node is built (8 MiB
  of ``[a,a,...`` composes into 1.3 GiB of nodes), more than ``MAX_ALIASES`` aliases or
  ``MAX_NODES`` built values (an alias bomb expands exponentially when the tree is built), or
  nesting deeper than ``MAX_DEPTH`` (building recurses). An alias of a scalar is not counted:
  each scalar node is read once, however many aliases it has (``_Builder._read_scalar``).

It also records where a number loaded as a float other than the number written
(``Locations.inexact``), for a caller that compares with it to refuse.
"""

from __future__ import annotations

import bisect
import math
import re
import string
import unicodedata
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import yaml

from agentgate._json import Inexact, exact_float
from agentgate._shown import bounded, character_named
from agentgate.errors import InputError, PolicyError, SourceError
from agentgate.keys import read_regular_file, shown_path

MAX_ALIASES = 16
MAX_NODES = 50_000
"""Most nodes (scalars, keys, lists, mappings, aliases) a file may hold, counted from the parser's
events before the tree is built, and most values it may expand to when built (aliases repeat).
A policy holds a few hundred; 1,000 capability rules take about 20,000. A file just under the
limit is built in under a second and 30 MiB; one over it is refused before any node is built."""
MAX_DEPTH = 100
"""Deepest nesting of mappings and lists (a policy needs about ten): building the data recurses."""
Path_ = tuple[str | int, ...]


class _PureLoader(yaml.SafeLoader):
    """PyYAML's own parser: ``_Loader`` without libyaml, and the one that reads again a text libyaml
    refused (``_Window``, ``_refused``). It reads what ``yaml.SafeLoader`` reads, with the same
    tokens, events, errors and marks, and walks its possible simple keys only as far as it needs."""

    # PyYAML's own scanner looks at every possible simple key (one a flow level, up to 1,024
    # characters back) for every token: a line of '[' cost a re-read of libyaml's text about 2 s
    # (35 s under tracemalloc), and, without libyaml, 17,000 '[' 1.7 s to refuse (until a
    # regression review of R93 only the re-read walked them as below). The keys are held in the
    # order of their flow levels, which is the order they were saved in (a deeper level's key goes
    # when the level closes), so those gone stale are the first ones, and the first holds the
    # least token number: these two read only as far as they need, and do what PyYAML's own do.
    def next_possible_simple_key(self) -> int | None:
        for key in self.possible_simple_keys.values():
            return int(key.token_number)
        return None

    def stale_possible_simple_keys(self) -> None:
        keys = self.possible_simple_keys
        while keys:
            level = next(iter(keys))
            key = keys[level]
            if key.line == self.line and self.index - key.index <= 1024:
                return
            if key.required:
                raise yaml.scanner.ScannerError(
                    "while scanning a simple key", key.mark, "could not find expected ':'", self.get_mark()
                )
            del keys[level]


# libyaml's parser when PyYAML was built with it (about 20x faster), else the pure-Python one.
_Loader = getattr(yaml, "CSafeLoader", _PureLoader)
_SCALAR_TAGS = frozenset("tag:yaml.org,2002:" + t for t in ("str", "int", "float", "bool", "null"))
_STR = "tag:yaml.org,2002:str"
_BOOL, _INT, _FLOAT = "tag:yaml.org,2002:bool", "tag:yaml.org,2002:int", "tag:yaml.org,2002:float"
_BOOLEANS = frozenset({"true", "True", "TRUE", "false", "False", "FALSE"})
"""Booleans as YAML 1.2 writes them; yes/no/on/off are text here."""
_NODE_TOKENS = (yaml.AnchorToken, yaml.TagToken, yaml.ScalarToken)
"""The tokens a node is written with; comments and line breaks between them are no tokens, but a
block scalar's token (``|``, ``>``) holds its header's comment and its line breaks
(``_token_written``)."""
_NULL = "tag:yaml.org,2002:null"
_NULLS = frozenset({"null", "Null", "NULL", "~", ""})
"""Null as YAML 1.2 (and 1.1) writes it: a scalar tagged ``!!null`` holds one of these."""
_INTEGER = re.compile(r"[-+]?(?:0|[1-9][0-9_]*|0x[0-9a-fA-F_]+|0o[0-7_]+|0b[01_]+)")
_SEXAGESIMAL = re.compile(r"[-+]?[1-9][0-9_]*(?::[0-5]?[0-9])+")
_FLOAT_1_2 = re.compile(r"[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?")
"""A float as YAML 1.2's core schema writes it. PyYAML's 1.1 rule reads some of them as text:
an exponent without a dot (``1e3``) or without a sign (``1.5e3``), a signed leading dot (``-.5``)."""
_FLOAT_TAGGED = re.compile(
    r"[-+]?(?:[-+]?(?:[0-9][0-9_]*(?:\.[0-9_]*)?|\.[0-9][0-9_]*)(?:[eE][-+]?[0-9]+)?"
    r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))"
)
"""The text of a float scalar (one tagged ``!!float`` above all) that is read as a number: YAML
1.2's float in ASCII digits, with ``_`` among them as YAML 1.1 writes it (``_stray_underscore``
says where one may stand), after one sign PyYAML takes off before the rest is read
(``_written_exactly``: ``!!float -+1.5`` is -1.5). Python's ``float`` also reads other digits
(``５００``, Arabic-Indic ``١٠٠``) and surrounding blanks (``' 7'``), where ``!!int`` refuses them."""
_OCTAL_1_2 = re.compile(r"[-+]?0o[0-7]+")
"""An octal integer as YAML 1.2 writes it (``0o17`` is 15); text to PyYAML's 1.1 rule."""
_LEADING_ZERO = re.compile(r"[-+]?0[0-9_]+")
"""A decimal integer with a leading zero that PyYAML reads as text (``09``): 9 in YAML 1.2."""
_STRAY_UNDERSCORE = re.compile(r"_(?![0-9])|(?<![0-9])_")
"""An underscore in a decimal, octal or binary number's digits that is not between two digits:
``1_``, ``1__0``, ``1_.5``. PyYAML's 1.1 rule reads them as 1, 10 and 1.5; almost surely a typo."""
_STRAY_HEX_UNDERSCORE = re.compile(r"_(?![0-9a-fA-F])|(?<![0-9a-fA-F])_")
"""The same in a hexadecimal number's digits (``0xff_``)."""
_MAP, _SEQ = "tag:yaml.org,2002:map", "tag:yaml.org,2002:seq"
_NODE_EVENTS = (yaml.ScalarEvent, yaml.SequenceStartEvent, yaml.MappingStartEvent, yaml.AliasEvent)
_COLLECTION_STARTS = (yaml.SequenceStartEvent, yaml.MappingStartEvent)
_COLLECTION_ENDS = (yaml.SequenceEndEvent, yaml.MappingEndEvent)
_COUNT_ABOVE = 16 * 1024
"""Characters above which the nodes are counted before the tree is composed: PyYAML composes the
whole tree before anything can count it (8 MiB of ``[a,a,...`` took 20 s and 1.3 GiB to refuse).
A shorter text holds at most about one node a character, far fewer than ``MAX_NODES``, so it is
not parsed twice (counting first adds a tenth to loading a policy of a few KiB)."""
_REREAD_CHARACTERS = 512 * 1024
"""Most characters of a text libyaml refused that PyYAML's own parser reads again to say where it
stops (``_refused``, ``_Window``). Until review R89 it read the whole text, two or three times:
an unclosed quote in an 8 MiB file took 26 s to refuse, where libyaml loads 8 MiB in under one.
This bound and the two below make that work the size read, not the file's."""
_REREAD_STEPS = 200_000
"""Most steps of PyYAML's own reader over such a text (a step passes a character, a word, a line
break or a name): what reading costs it, more than characters (a line of ``a`` costs two steps)."""
_REREAD_TOKENS = 20_000
"""Most tokens PyYAML's own parser makes of such a text: a token costs it several steps."""
_TEXT_1_2 = frozenset({"tag:yaml.org,2002:value", "tag:yaml.org,2002:merge"})
_TIMESTAMP = "tag:yaml.org,2002:timestamp"
_ANCHOR = r"&[0-9A-Za-z_-]+"
"""An anchor as both parsers read one: '&' and a name of letters, digits, '-' and '_' (they
refuse any other character in it, and anything but a blank or an indicator after it)."""
_TAGGED = re.compile(rf"(?:{_ANCHOR}(?:\s+#[^\r\n\x85\u2028\u2029]*(?![^\r\n\x85\u2028\u2029]))*\s+)?!")
"""A node's text that starts with a tag (after an anchor, if any, and the comments after it):
``!!str 5``, ``&a !!str 5``, ``&a # why`` then ``!!str 5`` on the next line. A comment runs to
its line's end (the lookahead): one way to match it, never a search over where it might stop.
Matched at every node's start, it reads no further than the node's anchor, blanks and comments,
and what it finds is the node's tag only within the node as the parser marks it (``_tag_match``:
in a block collection the next line may start the next entry, ``k: &a`` then ``! j: 1``).
Until review R90 the anchor was ``&\\S+``, which ran on past a ',' to the next blank and back:
each node of ``[&a0,&a1,...]`` cost the rest of the line (quadratic in the line's length, as a reviewer's scratch script showed),
and the next value's tag was taken for an anchored empty value's (``[&a, ! 5]`` read ``''``)."""
_NON_SPECIFIC = re.compile(_TAGGED.pattern + r"(?=[\s,\]}]|\Z)")
"""A node's text that starts with the non-specific tag ``!`` alone (``! 1``), after an anchor if
any. YAML 1.2 reads such a scalar as text; PyYAML resolves it as if it were plain (``! 1`` the
integer 1, ``! true`` a boolean, ``! null`` null)."""
_VERBATIM_NON_SPECIFIC = re.compile(f"(?:{_TAGGED.pattern})(<(?:!|%21)>)")
"""A node's text that starts with the non-specific tag written verbatim, ``!<!>`` or ``!<%21>``
(group 1: from the ``<``), after an anchor if any. YAML 1.2 calls it invalid (spec example 6.25);
both parsers resolve the node as if it were untagged (``!<!> 5`` the integer 5, where ``! 5`` is
text), and an empty one apart (libyaml ``''``, PyYAML's own parser null): refused."""
_RESOLVED = frozenset({_BOOL, _INT, _FLOAT, _TIMESTAMP, _NULL})
_SURROGATE = re.compile("[\ud800-\udfff]")
_BREAK = re.compile("\r\n|[\r\n]")
"""A line break as YAML counts them in a text ``load_yaml`` parses (and an editor counts them)."""
_YAML_ONLY_BREAK = re.compile("[\x85\u2028\u2029]")
"""What YAML (libyaml and PyYAML alike) also reads as a line break and an editor, ``grep -n`` and
a reviewer show within a line: refused (``load_yaml``)."""
_DIRECTIVE = re.compile(r"^%YAML[ \t]+(\S*)", re.MULTILINE)
"""A line that starts a ``%YAML`` directive (the parser says whether it is one)."""
_MAX_DIGITS = 4300
"""Most decimal digits Python converts between text and integers by default."""
_MAX_INT = 10**_MAX_DIGITS
"""Integers are below this in magnitude (at most ``_MAX_DIGITS`` decimal digits): whatever base
they are written in, every message that quotes one can print it."""


MAX_QUOTED = 100
"""Most characters of the file's own text (a key, a tag) a message quotes: a key written ``? KEY``
or a tag may be megabytes long, and an error is one line."""


def shortened(text: str) -> str:
    """``text`` for a message: itself, or its first ``MAX_QUOTED`` characters and its length."""
    return text if len(text) <= MAX_QUOTED else f"{text[:MAX_QUOTED]}... ({len(text)} characters)"


def dotted_path(loc: Sequence[str | int]) -> str:
    """``roles.a.ttl_s``: a location path for a message, each key as written (``shortened``)
    unless it is empty or holds a character that is not printable (a line break, an escape, a
    bidi override), which is quoted as ``repr`` shows it: the message stays one line and says
    what the key holds (until review R65 an empty key was left out: ``roles.lead.``). So is a
    key that would read as another path: one holding a dot (``tools.'payments.refund'.rate``:
    until review R66 ``tools.payments.refund.rate``, a ``refund`` under a tool ``payments``), one
    of digits only (a list's index is written bare: ``capabilities.3``), one opening with a quote."""
    return ".".join(str(p) if isinstance(p, int) else _path_key(shortened(p)) for p in loc)


def _path_key(key: str) -> str:
    """A mapping key as ``dotted_path`` writes it."""
    plain = key and key.isprintable() and "." not in key and not key.isdigit() and key[0] not in "'\""
    return key if plain else repr(key)


class Mark(NamedTuple):
    """A 1-based line and column in the source."""

    line: int
    column: int


class Locations:
    """Where each location path's key and value start in the source."""

    def __init__(self) -> None:
        # PyYAML's own 0-based marks, kept as they are (converting 20,000 of them costs more
        # than loading the values); ``of`` converts the one an error needs.
        self.values: dict[Path_, Any] = {}
        self.keys: dict[Path_, Any] = {}
        self.inexact: dict[Path_, tuple[str, float]] = {}
        """The text and the value of each number at a location path that loaded as a float
        other than the number written (``9007199254740993.0`` loads as ``9007199254740992.0``,
        ``1e-400`` as ``0.0``): it loads as that float, and a field that compares a call's
        argument with it (a policy's constraint) refuses it, as ``_json.exact_float`` does."""

    def of(self, loc: Sequence[str | int], *, key: bool = False) -> Mark | None:
        """The mark of the longest prefix of ``loc`` that has one (the key's mark if ``key``)."""
        path = tuple(loc)
        while True:
            found = self.keys.get(path) if key else None
            if found is None:
                found = self.values.get(path)
            if found is not None:
                return Mark(found.line + 1, found.column + 1)
            if not path:
                return None
            path = path[:-1]


def null_written(text: str) -> str | None:
    """How a document that ``load_yaml`` loaded as null wrote it (``~``, ``null``, ``!!null``, an
    anchor on nothing, ``&a``: its anchor, tag and value as written, joined by a space,
    ``shortened``), or None where it holds no value at all (nothing, comments, a bare ``---``,
    whose node has none of them): a value written as null, or an empty file. Until review R91
    only a null's own text counted, and ``!!null`` alone was called an empty file. Only for a
    text ``load_yaml`` has already parsed.

    Until review R91's second reading the node's span of the text was quoted: with the comments
    and line breaks between its parts (``&a # why\\n!!null``, a comment the author wrote, in a
    message about the value), and, where PyYAML uses libyaml, a character early after a byte
    order mark (``'\\ufeff'`` for ``~``), as libyaml's marks do not count it; the mark is dropped
    first, as ``load_yaml`` drops it. Until its third reading a block scalar's token was quoted
    whole, its header's comment and its line breaks with it (``!!null | # why ...``)."""
    text = text.removeprefix("\ufeff")
    written = " ".join(
        _token_written(text, token)
        for token in yaml.scan(text, Loader=_Loader)
        if isinstance(token, _NODE_TOKENS)
    )
    return shortened(written) if written else None


def _token_written(text: str, token: yaml.Token) -> str:
    """How ``token`` (one of ``_NODE_TOKENS``) is written in ``text``: its span; for a block
    scalar, whose span runs from its indicator through its header's comment and every line break
    after its content, the header (``|``, ``>-``, ``|2+``: the indicator and what follows it up to
    a blank or a line break, where a comment may start), then its value where it has one
    (``|- null``)."""
    written: str = text[token.start_mark.index : token.end_mark.index]
    if not isinstance(token, yaml.ScalarToken) or token.style not in ("|", ">"):
        return written
    header = written.split(maxsplit=1)[0]
    return f"{header} {token.value}" if token.value else header


def mark_at(text: str, index: int) -> Mark:
    """The line and column of ``text[index]``, counting line breaks as YAML does (``_BREAK``:
    ``\r\n``, ``\r`` or ``\n``; a ``\r`` right before ``index`` is one, whatever follows). Counted
    by ``str`` methods, not a loop over the breaks: an error at the end of an 8 MiB file of short
    lines took seconds to locate (review R89)."""
    breaks = text.count("\n", 0, index) + text.count("\r", 0, index) - text.count("\r\n", 0, index)
    start = max(text.rfind("\n", 0, index), text.rfind("\r", 0, index)) + 1
    return Mark(breaks + 1, index - start + 1)


def read_source(path: str | Path, error: type[SourceError], *, limit: int, what: str) -> bytes:
    """The bytes of the YAML file at ``path``, read the way key and token files are.

    A FIFO, device or directory is refused at once (never waited on, never read without end),
    and so is a file of more than ``limit`` bytes, after reading at most ``limit + 1``. Raises
    ``error`` (a ``SourceError``: one line) naming the file.
    """
    try:
        data, _ = read_regular_file(path, limit, what)
    except InputError as exc:
        raise error(str(exc).removeprefix(f"{shown_path(path)}: "), file=str(path)) from None
    return data


def load_yaml(
    text: str,
    *,
    source: str,
    error: type[SourceError] = PolicyError,
    max_nodes: int = MAX_NODES,
    what: str = "a policy",
) -> tuple[Any, Locations]:
    """Parse ``text`` and return ``(data, locations)``; ``data`` is ``None`` for an empty document.

    Raises ``error`` (with ``source``, line and column) on malformed YAML, several documents,
    a ``%YAML`` directive for any version but 1.2, more than ``max_nodes`` nodes (``MAX_NODES``
    unless the kind of file needs more: an inventory lists every GPU), duplicate or non-string
    keys, merge keys, tags outside the core schema, alias bombs, and nesting deeper than
    ``MAX_DEPTH``. ``what`` names the kind of file in messages (``a policy``, ``an inventory``).
    """
    # A leading byte order mark is no content; libyaml's marks do not count it, PyYAML's do.
    text = text.removeprefix("\ufeff")
    if (bom := text.find("\ufeff")) != -1:
        # Until review R65 a second one loaded: libyaml dropped it uncounted, every mark on from it
        # one character early (``!!str 1e3`` read as 1000.0, its tag looked for a character too
        # soon), and libyaml skips one that starts a line where PyYAML's reader keeps it in a key.
        at = mark_at(text, bom)
        raise error(
            f"{character_named(text[bom])} (a byte order mark) after the start of the file: YAML "
            "parsers disagree on what it is, and a reader cannot see it",
            file=source,
            line=at.line,
            column=at.column,
            expected="at most one byte order mark, as the file's first character",
            hint="remove it, or write it as an escape (\\ufeff) in a double-quoted string",
        )
    if (found := _YAML_ONLY_BREAK.search(text)) is not None:
        # Until review R57 such a file loaded: the text after one inside a comment was read as
        # YAML (``# note\u2028ttl_s: 99999`` set ttl_s while an editor showed one comment line),
        # and every error after one named a line one too high.
        at = mark_at(text, found.start())
        raise error(
            f"{character_named(found.group())}: YAML reads it as a line break, where an editor shows "
            "the text after it on the same line (after a comment's '#', text YAML reads would hide "
            "in the comment)",
            file=source,
            line=at.line,
            column=at.column,
            expected="printable text",
            hint="remove it, or write it as an escape (\\u2028) in a double-quoted string",
        )
    try:
        node = _composed(text, source, error, max_nodes, _Loader)
    except yaml.YAMLError as exc:
        raise _refused(text, source, error, max_nodes, exc) from None
    if (disagreed := _disagreed(text, source, error, len(text), _Loader)) is not None:
        raise disagreed
    _refuse_yaml_version(text, source, error, what)
    locations = Locations()
    if node is None:
        return None, locations
    builder = _Builder(text, source, locations, error, max_nodes)
    try:
        return builder.build(node, ()), locations
    finally:
        builder.close()


def _composed(
    text: str, source: str, error: type[SourceError], max_nodes: int, parser: type[Any]
) -> yaml.Node | None:
    """The node tree of ``text`` as ``parser`` (libyaml's or PyYAML's own) composes it. Raises
    ``error`` for a character YAML does not allow, a lone surrogate or more than ``max_nodes``
    nodes; PyYAML's other errors propagate, ``_TooDeep`` among them (PyYAML's own composer)."""
    loader = None
    try:
        if len(text) > _COUNT_ABOVE:
            # The counting parser is the one the handlers below look at while it runs: until
            # review R86 a file of more than 16 KiB refused by it raised Python's error bare.
            loader = parser(text)  # PyYAML's own reader checks the characters here
            _refuse_too_many_nodes(loader, source, error, max_nodes)
            loader.dispose()
            loader = None
        loader = parser(text)
        if isinstance(loader, yaml.composer.Composer):
            _limit_depth(loader)
        node: yaml.Node | None = loader.get_single_node()
        return node
    except UnicodeEncodeError as exc:  # libyaml reads UTF-8: a lone surrogate cannot be encoded
        raise _lone_surrogate(error, source, exc.start) from None
    except RecursionError:  # a caller deeper than ``_COMPOSER_DEPTH`` leaves room for: unlocated
        raise error(
            f"malformed YAML: nested more than {MAX_DEPTH} levels deep",
            file=source,
            expected="a YAML mapping",
            hint="flatten the structure; no agentgate file nests this deep",
        ) from None
    except (ValueError, OverflowError):
        # PyYAML's own scanner turns a ``\U`` escape into a character unchecked: one above
        # U+10FFFF raised Python's error (until review R82 a traceback, from ``policy lint`` too,
        # where libyaml refuses it in its own words). Its reader is at the escape's digits.
        if loader is None or not isinstance(loader, yaml.reader.Reader):
            raise
        if (version := _long_version_at(text, loader.pointer)) is not None:
            # Python converts at most 4,300 digits: until review R86 such a version was Python's
            # error bare, or said to be an escape beyond U+10FFFF.
            raise _disagreement(text, source, error, version, "%9") from None
        at = mark_at(text, loader.pointer)
        raise error(
            "malformed YAML: a character escape beyond U+10FFFF, the last Unicode code point",
            file=source,
            line=at.line,
            column=at.column,
            expected="an escape of a Unicode code point",
            hint="write the character as it is, or an escape from \\U00000000 to \\U0010FFFF",
        ) from None
    except yaml.reader.ReaderError as exc:  # a character YAML does not allow, at an index of ``text``
        if 0xD800 <= exc.character <= 0xDFFF:  # PyYAML's own reader meets a lone surrogate first
            raise _lone_surrogate(error, source, exc.position) from None
        index = exc.position
        if not issubclass(parser, yaml.reader.Reader):  # libyaml counts the bytes of the UTF-8 it reads
            index = len(text.encode("utf-8")[:index].decode("utf-8", errors="ignore"))
        at = mark_at(text, index)
        raise error(
            f"malformed YAML: unacceptable character #x{exc.character:04x}: {exc.reason}",
            file=source,
            line=at.line,
            column=at.column,
            expected="printable text",
            hint="remove the character, or write it as an escape in a double-quoted string",
        ) from None
    finally:
        if loader is not None:
            loader.dispose()


class _TooDeep(yaml.MarkedYAMLError):
    """PyYAML's own composer met a collection nested deeper than ``MAX_DEPTH`` (``_limit_depth``)."""

    def __init__(self, mark: Any) -> None:
        super().__init__(problem=f"nested more than {MAX_DEPTH} levels deep", problem_mark=mark)


_COMPOSER_DEPTH = 200
"""How deep PyYAML's own composer may nest before ``_limit_depth`` stops it: above ``MAX_DEPTH``,
so that a file nested past ``MAX_DEPTH`` but not this deep is read whole and goes through the
checks libyaml's tree goes through, in the same order (``_disagreed``, ``_Builder.build``), and
gets the same error from either parser; well below Python's recursion limit (1,000 frames), which
that composer, three calls a level with ``_limit_depth``'s, reaches at about 325 levels from an
empty stack: 200 leaves some 400 frames to the caller's own."""


_LIBYAML_DEPTH = 1000
"""The deepest nesting libyaml parses: it refuses a collection deeper ("exceeded maximum nesting
depth"), so ``_refuse_too_many_nodes`` counts PyYAML's own parser no deeper."""


def _limit_depth(loader: Any) -> None:
    """Makes PyYAML's own composer raise ``_TooDeep`` at a collection nested deeper than
    ``_COMPOSER_DEPTH``, located at the first collection it met nested deeper than ``MAX_DEPTH``,
    where ``_Builder.build`` refuses a file libyaml composed. That composer recurses in Python:
    until review R92 a file nested about 500 deep reached Python's recursion limit and was refused
    with no line or column (with libyaml, a malformed one, whose error the re-read in ``_refused``
    was to locate), its real error never named; and R92's first limit, at ``MAX_DEPTH`` itself,
    refused a file nested 101 to 200 deep before checks that libyaml's path runs first (a merge
    key, a tab), so the two parsers named different errors (a regression review of R92)."""
    compose_node = loader.compose_node
    depth = 0
    too_deep: list[Any] = []  # the start of the first collection nested deeper than MAX_DEPTH

    def limited(parent: Any, index: Any) -> Any:
        nonlocal depth
        if not loader.check_event(yaml.SequenceStartEvent, yaml.MappingStartEvent):
            return compose_node(parent, index)
        if depth >= MAX_DEPTH and not too_deep:
            too_deep.append(loader.peek_event().start_mark)
        if depth >= _COMPOSER_DEPTH:
            raise _TooDeep(too_deep[0])
        depth += 1
        try:
            return compose_node(parent, index)
        finally:
            depth -= 1

    loader.compose_node = limited


class _PastWindow(Exception):
    """``_Window`` was asked to read further than it does; ``at``: where it stopped."""

    def __init__(self, at: int) -> None:
        super().__init__(at)
        self.at = at


class _Window(_PureLoader):
    """PyYAML's own parser, reading at most the first ``_REREAD_CHARACTERS`` characters of its text
    in at most ``_REREAD_STEPS`` steps and making at most ``_REREAD_TOKENS`` tokens of them: asked
    to go further, it raises ``_PastWindow`` (and keeps where it was, ``stopped_at``). Until then it
    reads what PyYAML's own parser reads of the whole text, so that an error it raises is that
    parser's for the whole text, and it reads a text within the bounds as that parser does. The
    characters of all of the text are checked first, as PyYAML's own reader does."""

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.cut = len(text) > _REREAD_CHARACTERS
        if self.cut:
            self.buffer = text[:_REREAD_CHARACTERS]  # without the '\0' PyYAML's reader ends a text with
        self.fetched = self.steps = 0
        self.stopped_at: int | None = None

    def _past(self) -> _PastWindow:
        self.stopped_at = self.pointer
        return _PastWindow(self.pointer)

    def fetch_more_tokens(self) -> None:
        self.fetched += 1
        if self.fetched > _REREAD_TOKENS:
            raise self._past()
        super().fetch_more_tokens()

    def peek(self, index: int = 0) -> str:
        try:
            return str(self.buffer[self.pointer + index])
        except IndexError:
            if self.cut:
                raise self._past() from None
            raise

    def prefix(self, length: int = 1) -> str:
        if self.cut and self.pointer + length > len(self.buffer):
            raise self._past()
        return str(super().prefix(length))

    def forward(self, length: int = 1) -> None:
        self.steps += 1
        # PyYAML's reader looks at the character after the last it passes (a '\r' before a '\n').
        if self.steps > _REREAD_STEPS or (self.cut and self.pointer + length + 1 > len(self.buffer)):
            raise self._past()
        super().forward(length)


def _refused(
    text: str, source: str, error: type[SourceError], max_nodes: int, exc: yaml.YAMLError
) -> SourceError:
    """``error`` for ``text``, which the parser refused with ``exc``, located where PyYAML's own
    parser stops, or at the first place before it where the two parsers read ``text`` differently
    (``_disagreed``): the same line and column whichever parser runs. In a file already malformed
    the two often stop at different places (``"x"x<tab>``: libyaml at the ``x``, PyYAML at the
    tab); until review R67 the error then named a column or a line one or two off with libyaml
    from where it did with PyYAML's own parser. Only a file libyaml refused is parsed again, and
    only so much of it (``_REREAD_CHARACTERS``, ``_Window``): where PyYAML's own parser reads that
    far without refusing the text, it is refused where libyaml stopped, in libyaml's words, or
    where the two parted before it. Until review R89 PyYAML's own parser read the whole file
    again, two or three times: an unclosed quote in an 8 MiB file took 26 s to refuse."""
    pure: yaml.YAMLError | None = exc
    # A text past libyaml's own depth limit (1,000 levels) is parsed again too, and refused where
    # PyYAML's own parser refuses it: at the collection past ``MAX_DEPTH``, or at an error before
    # it. Until review R93 it was refused where libyaml stopped, in libyaml's words (2:1003,
    # "exceeded maximum nesting depth", where PyYAML's own parser says 2:103, "nested more than
    # 100 levels deep"): parsing it again had taken minutes and recursed to Python's limit, which
    # ``_limit_depth`` now stops at ``_COMPOSER_DEPTH`` and ``_refuse_too_many_nodes`` at libyaml's
    # own limit (``_LIBYAML_DEPTH``).
    if not issubclass(_Loader, yaml.reader.Reader):  # libyaml's
        try:
            _composed(text, source, error, max_nodes, _Window)
            pure = None  # libyaml alone refused it: ``_disagreed`` says where they part
        except yaml.YAMLError as found:
            pure = found
        except _PastWindow as past:
            # PyYAML's own parser reads its window without refusing the text: libyaml's error
            # stands, unless the two parted before it. Where libyaml stopped within the window,
            # PyYAML's own tokens up to the window's end say where, as they do up to a text's end
            # where it reads the whole text (``{x:}``, ``[?, c]``, which libyaml alone refuses);
            # past it, libyaml's tokens up to where it stopped, as after a text libyaml loads.
            disagreed = None
            if _may_disagree(text):  # else ``_disagreed`` finds nothing, and where to look is not needed
                mark = getattr(exc, "problem_mark", None)
                upto = len(text) if mark is None else _mark_index(text, mark)
                if upto < past.at:
                    disagreed = _disagreed(text, source, error, len(text), _Window)
                else:
                    disagreed = _disagreed(text, source, error, upto, _Loader)
            return disagreed or _malformed(exc, text, source, error, _Loader)
    mark = getattr(pure, "problem_mark", None)
    upto = _mark_index(text, mark) if mark is not None else len(text)
    tag = _misread_tag(text, pure) if pure is not None else None
    disagreed = _disagreed(text, source, error, upto, _PureLoader, tag)
    if disagreed is None and isinstance(pure, _TooDeep):
        return _nested_too_deep(error, source, pure.problem_mark)
    return disagreed or _malformed(pure or exc, text, source, error)


def _misread_tag(text: str, exc: yaml.YAMLError) -> tuple[int, str] | None:
    """Where the tag starts that PyYAML's own scanner refused with ``exc``, and which of
    ``_DISAGREEMENTS`` it is, if libyaml reads it otherwise (``_tag_read_apart``): it ends it at
    one of ``_IN_TAG`` (``_LIBYAML_TAG``; ``{x: !,5}``: PyYAML reads the tag ``!,5`` and refuses
    the '}' after it, libyaml an empty value and a key ``5``; ``[!,a!]`` and ``[!?,a!]``: PyYAML
    reads a tag handle and refuses the ',' or the '?' in it, libyaml the tags ``!`` and ``!?``
    before a ','), takes the ',' after it (``[!<!>, a]``), or reads a local tag where PyYAML
    refuses a tag handle (``!a.b!c``); else ``None``. PyYAML makes no token of such a tag for
    ``_disagreed`` to read. Until review R84 only a ',' PyYAML had read past counted: ``[!,a!]``
    was refused in libyaml's reading as a tag cut short and in PyYAML's in its own words."""
    if not isinstance(exc, yaml.MarkedYAMLError) or exc.context != "while scanning a tag":
        return None
    start = _mark_index(text, exc.context_mark)
    stop = _mark_index(text, exc.problem_mark)
    kind = _tag_read_apart(text, start, stop)
    return None if kind is None else (start, kind)


def _tag_read_apart(text: str, start: int, end: int) -> str | None:
    """Which of ``_DISAGREEMENTS`` the tag at ``text[start]`` (a '!') is, if libyaml reads it
    otherwise than PyYAML's own scanner, which read it up to ``end`` (where its tag token ends,
    or where it refused the tag); else ``None``:

    - ``!``: a verbatim tag (``!<...>``) with a ',' right after it (``[!<!>, a]``), or another
      tag that libyaml ends at one of ``_IN_TAG`` (``_LIBYAML_TAG``: ``[!, a]``,
      ``{eq: !!str,}``, ``!a[b]``);
    - ``!!``: a tag with a second '!' after a character that no tag handle holds (``!a.b!c``,
      ``!a:b!c``), which libyaml reads, before a blank, as the local tag ``!a.b!c``, and PyYAML
      as a tag handle that it refuses at that character (``_pyyaml_refuses_handle``). Until
      review R86 libyaml went on to an error further on (a tab three lines down), PyYAML's own
      parser stopped at the tag.

    The one rule for ``_misread_tag`` and ``_disagreed`` alike: until review R85 each wrote it
    its own way. The match cannot fail: ``load_yaml`` has removed a leading byte order mark and
    refused any other one and every line break an editor does not show, so a mark's line and
    column find the '!' itself."""
    if text.startswith("!<", start):
        return "!" if text[end : end + 1] == "," else None
    tag = _LIBYAML_TAG.match(text, start)
    assert tag is not None  # text[start] is the '!' (above)
    after = text[tag.end() : tag.end() + 1]
    if after in _IN_TAG:
        return "!"
    if after in ("", " ", "\t", "\r", "\n") and _pyyaml_refuses_handle(text, start):
        return "!!"
    return None


def _pyyaml_refuses_handle(text: str, start: int) -> bool:
    """Whether PyYAML's own scanner refuses the tag at ``text[start]`` (a '!', not a verbatim
    tag) as a tag handle: it reads one up to the first '!' after the first, where there is one
    before a space or a line break (a tab does not end its search), and refuses any character in
    it but a letter, a digit, '-' and '_'."""
    if text[start + 1 : start + 2] in ("", " ", "\t", "\r", "\n"):
        return False  # the non-specific tag '!' alone
    handle = _PYYAML_HANDLE.match(text, start + 1)
    return handle is not None and _HANDLE.fullmatch(text, start + 1, handle.end() - 1) is None


def _refuse_yaml_version(text: str, source: str, error: type[SourceError], what: str) -> None:
    """Refuse, at its line, a ``%YAML`` directive for any version but 1.2 (the parser itself
    refuses all but 1.1 and 1.2). agentgate reads its files as YAML 1.2 (``yes``, ``no``, ``on``,
    ``off`` are text; ``010`` is refused as ambiguous), while ``%YAML 1.1`` tells every reader
    ``in: [no, off]`` holds two booleans: until review R61 the directive was accepted and the
    file read against what it says (in a policy until early in R61, in an inventory until its
    end). Reading it as YAML 1.1 instead would bring back what 1.2 removed (``NO`` for Norway
    read as false), so it is refused. Only a directive the parser reports counts: ``%YAML`` in a
    text value is no directive. Runs on text that has parsed; it parses again only up to the
    document's start, and only where a line starts with ``%YAML``."""
    found = _DIRECTIVE.search(text)
    if found is None:
        return
    parser = _Loader(text)
    try:
        parser.get_event()  # the stream's start; the document's start comes next, with its version
        version = getattr(parser.get_event(), "version", None)
    finally:
        parser.dispose()
    if version is None or tuple(version) == (1, 2):
        return
    raise error(
        f"%YAML {shortened(found.group(1))} directive: agentgate reads {what} as YAML 1.2, not as the directive "
        "says (yes, no, on and off are text in 1.2, booleans in 1.1)",
        file=source,
        line=mark_at(text, found.start()).line,
        column=1,
        expected="no %YAML directive, or %YAML 1.2",
        hint="remove the directive; write booleans as true or false and quote text such as 'no'",
    )


def _line_starts(text: str) -> list[int]:
    """The index in ``text`` where each line starts, counting line breaks as YAML does."""
    return [0] + [found.end() for found in _BREAK.finditer(text)]


def _index_of(starts: Sequence[int], length: int, mark: Any) -> int:
    """The index of a parser's mark (its line and column, which libyaml and PyYAML count alike)
    in a text of ``length`` characters whose lines start at ``starts``, at most ``length``
    (libyaml marks the end of a text without a final line break on the line after it)."""
    line: int = mark.line
    if line >= len(starts):
        return length
    column: int = mark.column
    return min(starts[line] + column, length)


def _mark_index(text: str, mark: Any) -> int:
    """``_index_of`` for one mark, without reading where every line starts: the mark's own index
    where that is where its line and column are (both parsers count characters so in a text
    ``load_yaml`` parses), else found from them."""
    index = getattr(mark, "index", None)
    if (
        isinstance(index, int)
        and 0 <= index <= len(text)
        and mark_at(text, index) == (mark.line + 1, mark.column + 1)
    ):
        return index
    return _index_of(_line_starts(text), len(text), mark)


_BLOCK_HASH = re.compile(r"[|>][1-9+-]{0,2}#")
"""A block scalar's header with a ``#`` right after its indicators (``|#``, ``>-#``)."""
_VERSION_NUMBERS = re.compile(r"%YAML +([0-9]+)(?:\.([0-9]+))?")
"""A ``%YAML`` directive's major and minor version numbers, as PyYAML's own scanner reads them:
the one pattern for the directive's version, from which where libyaml refuses a long one
(``_tenth_digit``) and a ``#`` right after a minor (``%YAML 1.2#``) are read too."""
_MAY_DISAGREE = re.compile(
    r"[\t?]|:[,?\[\]{}]|^%|![^\s!,\[\]{}]*[,\[\]]|![0-9A-Za-z_-]*[^0-9A-Za-z_\s!-][^ \r\n!]*!", re.MULTILINE
)
"""What a text holds where the parsers may read it differently (``_disagreed`` says whether they
do), besides a block scalar's header followed by '#'. A tag is matched from its last '!' (the
text after it holds none), or, for a handle no tag has (``!a.b!c``), from its first '!' to the
next, the handle's characters up to the first one no handle holds: one way to match each,
never a search over where it might stop."""
_COLON_BEFORE_FLOW = frozenset(":" + c for c in ",?[]{}")
_FLOW_START = (yaml.FlowSequenceStartToken, yaml.FlowMappingStartToken)
_FLOW_END = (yaml.FlowSequenceEndToken, yaml.FlowMappingEndToken)
_IN_TAG = frozenset(",[]")
"""What PyYAML's own scanner reads into a tag (``!,``, ``!!str,``, ``!a[b]``) and libyaml ends one
at: after one, libyaml reads a ',' inside [...] or {...} and refuses anything else."""
_PYYAML_HANDLE = re.compile(r"[^ \r\n!]*!")
"""From after a tag's first '!': what PyYAML's own scanner reads as a tag handle, up to the next
'!' before a space or a line break (``_pyyaml_refuses_handle``)."""
_HANDLE = re.compile(r"[0-9A-Za-z_-]*")
"""What a tag handle holds between its two '!', to libyaml and PyYAML alike."""
_LIBYAML_TAG = re.compile(r"!(?:[0-9A-Za-z_\-;/?:@&=+$.!~*'()]|%[0-9A-Fa-f]{2})*")
"""A tag other than a verbatim one (``!<...>``) as libyaml reads it: a '!' and the characters
of a URI it takes after it, all that PyYAML's own scanner takes but ',', '[' and ']'."""


def _disagreed(
    text: str,
    source: str,
    error: type[SourceError],
    upto: int,
    parser: type[Any],
    tag: tuple[int, str] | None = None,
) -> SourceError | None:
    """``error`` at the first place up to ``upto`` where libyaml and PyYAML's own parser read
    ``text`` differently, else ``None``; ``upto``: where parsing failed (else the text's end);
    ``parser``: the parser whose tokens are read (the one that ran, or PyYAML's own where it
    failed: ``_refused``; a ``_Window``'s, up to where it stops, and no further); ``tag``: where a
    tag starts that PyYAML's own parser refused and libyaml reads otherwise, and which
    disagreement it is (``_misread_tag``).

    - A tab outside quoted text, a block scalar and a comment: libyaml reads one between tokens,
      after an indicator or within plain text as a space; PyYAML refuses it (``found character
      '\t' that cannot start any token``). Until review R66 ``a:\tb`` loaded with one parser
      and not the other.
      A tab that starts the first line of a block scalar whose indentation is not written:
      libyaml refuses it, PyYAML reads it as text.
    - A ``?`` within plain text in a flow collection (``[a ?b]``, ``{x?y: 1}``): libyaml keeps
      it in the text, PyYAML ends the text there and reads a key (then refuses the collection).
    - A ``#`` right after a block scalar's indicator (``|#``): libyaml reads a comment, PyYAML
      refuses it.
    - A ``:`` right after plain text in a flow collection and right before one of ``,[]{}?``
      (``{x:}``, ``[a, b:]``): libyaml refuses it (``found unexpected ':'``), PyYAML reads a key
      (before ``?``, the ':' as text). Until review R67 ``{x:}`` loaded with one parser only.
    - A directive other than ``%YAML`` and ``%TAG``: libyaml refuses it, PyYAML skips it.
    - A ``#`` right after a ``%YAML`` directive's version (``%YAML 1.2#``): libyaml reads a
      comment, PyYAML refuses it. Until review R86 such a file loaded with libyaml only.
    - A ``%YAML`` version number of more than nine digits: libyaml refuses it, PyYAML reads it
      (``1.0000000002`` and ``0000000001.2`` as 1.2; past 4,300 digits Python refuses to convert
      it, ``_composed``). Until review R86 ``%YAML 1.0000000002`` loaded with PyYAML's own parser
      only. Where PyYAML reads a major version other than 1 (``1234567890.2``), its parser
      refuses the directive at its start, before the tenth digit, and that error is the file's
      on either parser (``_refused``).
    - A tag with ',', '[' or ']' in it or right after it (``[!, a]``, ``{eq: !!str,}``, ``!a,b``):
      libyaml ends the tag there (and, inside [...] or {...}, reads ``!,`` as an empty value),
      PyYAML reads them into the tag, refuses it as a tag handle at or before them (``[!,a!]``,
      ``_misread_tag``), or refuses a ',' right after a verbatim tag (``!<...>,``). Until review
      R84 ``[!, a]`` loaded as ``['', 'a']`` with libyaml only.
    - A tag with a second '!' after a character no tag handle holds (``!a.b!c``): libyaml reads
      a local tag, PyYAML refuses the tag handle ``!a.b!`` (``_tag_read_apart``).
    - A '?' with no key before ',' or ':' inside [...] (``[?, c]``, ``[?: x]``): libyaml skips
      the ',' or ':' (then refuses the list, or not), PyYAML reads an empty key. Until review R84
      both refused it, at different columns and in different words. Not where what follows
      reads alike (``_skipped_alike``; ``[? ,]`` is ``[{None: None}]`` to both: until review R84
      it was called a disagreement too).

    Each is refused, at the same line and column on either parser. Read from the parser's
    tokens (up to its error, if any), only for a text that may hold one."""
    if not _may_disagree(text):
        return None
    quoted: list[tuple[int, int]] = []  # quoted and block scalars: a tab there is text
    scalars: list[tuple[int, int]] = []  # every scalar: a '#' there starts no comment
    found: list[tuple[int, str]] = []  # where, and which of ``_DISAGREEMENTS`` (a tab: below)
    flows: list[bool] = []  # the flow collections open, innermost last: True for [...]
    plain_before, plain_end, empty_key = False, 0, None
    skipped: tuple[int, str] | None = None  # an empty key's '?', and the ',' or ':' libyaml skips after it
    starts = _line_starts(text)
    scanner = parser(text)
    try:
        for token in _tokens(scanner):
            start = _index_of(starts, len(text), token.start_mark)
            end = _index_of(starts, len(text), token.end_mark)
            if start > upto:
                break
            flow = len(flows)
            if skipped is not None:
                if not _skipped_alike(skipped[1], token, start == upto):
                    found.append((skipped[0], "?,"))
                skipped = None
            elif empty_key is not None and isinstance(token, yaml.ValueToken | yaml.FlowEntryToken):
                skipped = (empty_key, text[start])  # libyaml skips it, PyYAML reads it after the key
            empty_key = None
            if isinstance(token, _FLOW_START):
                flows.append(isinstance(token, yaml.FlowSequenceStartToken))
            elif isinstance(token, _FLOW_END):
                del flows[-1:]
            elif isinstance(token, yaml.KeyToken) and flow and text[start] == "?":
                if plain_before:
                    found.append((start, "?"))  # PyYAML: the text ended at the '?', which it reads as a key
                elif flows[-1]:
                    empty_key = start
            elif (
                isinstance(token, yaml.ValueToken)
                and flow
                and plain_before
                and text[start : start + 2] in _COLON_BEFORE_FLOW
                and not text[plain_end:start].strip(" \t\r\n")
            ):
                found.append((start, ":"))  # libyaml: the plain text runs on to the ':', then refuses it
            elif isinstance(token, yaml.DirectiveToken):
                if token.name not in ("YAML", "TAG"):
                    found.append((start, "%"))  # libyaml: "found unknown directive name"
                elif token.name == "YAML":
                    if text[end : end + 1] == "#":
                        found.append((end, "%#"))  # libyaml: a comment; PyYAML refuses it (no token)
                    numbers = _VERSION_NUMBERS.match(text, start)
                    if numbers is not None and (tenth := _tenth_digit(numbers)) is not None:
                        found.append((tenth, "%9"))  # libyaml refuses it
            elif isinstance(token, yaml.TagToken) and (kind := _tag_read_apart(text, start, end)):
                found.append((start, kind))
            if isinstance(token, yaml.ScalarToken):
                if token.style in ("|", ">"):
                    header = _BLOCK_HASH.match(text, start)
                    if header is not None:
                        found.append((header.end() - 1, "#"))
                    start, tab_first = _block_content(text, start, end)
                    if tab_first is not None:
                        found.append((tab_first, "\t"))
                scalars.append((start, end))
                if token.style:
                    quoted.append((start, end))
                elif flow:
                    within = text.find("?", start + 1, end)  # libyaml: the '?' is in the text
                    if within != -1:
                        found.append((within, "?"))
                    if text[end - 1 : end + 1] == ":?":  # PyYAML: the ':' in the text, '?' a key
                        found.append((end - 1, ":"))
            plain_before = isinstance(token, yaml.ScalarToken) and not token.style and flow > 0
            plain_end = end
    finally:
        scanner.dispose()
    if getattr(scanner, "stopped_at", None) is not None:  # ``_Window``: what it read, up to where it stopped
        upto = min(upto, scanner.stopped_at)
    if upto < len(text) and text[upto] == "#":  # PyYAML refused the header, so made no token
        header = _BLOCK_HASH.search(text, max(upto - 3, 0), upto + 1)
        if header is not None and header.end() == upto + 1:
            found.append((upto, "#"))
        elif (
            version := _VERSION_NUMBERS.fullmatch(text, starts[bisect.bisect_right(starts, upto) - 1], upto)
        ) is not None and version[2] is not None:
            found.append((upto, "%#"))  # the same for a directive's version (``%YAML 1.2#``)
    if tag is not None:  # PyYAML refused the tag, so made no token
        found.append(tag)
    if (tab := _first_tab(text, upto, quoted, starts, scalars)) is not None:
        found.append((tab, "\t"))
    first = min((place for place in found if place[0] <= upto), default=None)
    if first is None:
        return None
    return _disagreement(text, source, error, *first)


def _may_disagree(text: str) -> bool:
    """Whether ``text`` holds what the two parsers may read differently (``_disagreed``)."""
    return _MAY_DISAGREE.search(text) is not None or _BLOCK_HASH.search(text) is not None


def _disagreement(text: str, source: str, error: type[SourceError], index: int, kind: str) -> SourceError:
    """``error`` at ``text[index]`` for the place the parsers read apart, of ``kind`` (one of
    ``_DISAGREEMENTS``)."""
    at = mark_at(text, index)
    problem, expected, hint = _DISAGREEMENTS[kind]
    return error(problem, file=source, line=at.line, column=at.column, expected=expected, hint=hint)


def _long_version_at(text: str, index: int) -> int | None:
    """Where libyaml refuses the ``%YAML`` directive whose major or minor version number starts
    at ``text[index]`` (where PyYAML's own scanner stopped when Python refused to convert it):
    ``_tenth_digit``; else ``None``. Until review R86 only a number that was itself the first of
    ten digits counted: ``%YAML 1234567890.`` then 5,000 digits was said to be an escape beyond
    U+10FFFF."""
    # The start of its one line, found backwards: this is an error path, and ``_line_starts``
    # would read the whole text (a line break is "\r\n", "\r" or "\n": ``_BREAK``).
    line_start = max(text.rfind("\n", 0, index), text.rfind("\r", 0, index)) + 1
    numbers = _VERSION_NUMBERS.match(text, line_start)
    if numbers is None or index not in (numbers.start(1), numbers.start(2)):
        return None
    return _tenth_digit(numbers)


def _tenth_digit(numbers: re.Match[str]) -> int | None:
    """Where libyaml refuses the ``%YAML`` directive whose version numbers are ``numbers``
    (``_VERSION_NUMBERS``) as "found extremely long version number": the tenth digit of the
    first of them of more than nine digits, its major or else its minor; ``None`` where neither
    has ten."""
    for group in (1, 2):
        if numbers.end(group) - numbers.start(group) >= 10:  # -1 - -1 for no minor
            return numbers.start(group) + 9
    return None


def _skipped_alike(skipped: str, token: Any, refused_here: bool) -> bool:
    """Whether libyaml, which skips the ``skipped`` ',' or ':' right after a '?' with no key
    inside [...], and PyYAML's own parser, which reads it (a ',' ends the pair, a ':' starts its
    value), go on alike at ``token``, the next: both end the pair before a ']' (or a ',' after
    ':'): ``[? ,]`` is ``[{None: None}]`` to both. libyaml reads on at a ':' (the pair's value)
    or a ',' (after the pair) only, and refuses any other token: alike where PyYAML's own parser
    refuses it too (``refused_here``: ``[?, }``)."""
    if isinstance(token, yaml.FlowSequenceEndToken):
        return True
    if isinstance(token, yaml.FlowEntryToken):
        return skipped == ":"
    return refused_here and not isinstance(token, yaml.ValueToken)


_DISAGREEMENTS = {
    "\t": (
        "a tab outside quoted text and comments: YAML parsers disagree on it (libyaml reads it "
        "as a space, PyYAML's own parser refuses it; at the start of a block scalar, the other "
        "way round)",
        "spaces between YAML tokens and for indentation",
        "replace the tab with spaces, or write it as \\t in a double-quoted string",
    ),
    "#": (
        "'#' right after a block scalar's indicator: YAML parsers disagree on it (libyaml reads "
        "a comment, PyYAML's own parser refuses it)",
        "a space before a comment",
        "write a space between the indicator and '#'",
    ),
    ":": (
        "':' right before ',', '[', ']', '{', '}' or '?' after plain text inside [...] or {...}: "
        "YAML parsers disagree on it (libyaml refuses it, PyYAML's own parser reads a key)",
        "': ' (a colon and a space) after a key inside [...] or {...}",
        "write a space after the ':', or quote the text ('x:')",
    ),
    "%": (
        "a directive other than %YAML and %TAG: YAML parsers disagree on it (libyaml refuses "
        "it, PyYAML's own parser skips it)",
        "no directive, or %YAML 1.2",
        "remove the line",
    ),
    "%#": (
        "'#' right after a %YAML directive's version: YAML parsers disagree on it (libyaml reads a "
        "comment, PyYAML's own parser refuses it)",
        "a space before a comment",
        "write a space between the version and '#' (%YAML 1.2 # note)",
    ),
    "%9": (
        "a %YAML directive's version number of more than nine digits: YAML parsers disagree on it "
        "(libyaml refuses it, PyYAML's own parser reads it: 1.0000000002 as 1.2)",
        "no %YAML directive, or %YAML 1.2",
        "write %YAML 1.2, or remove the line",
    ),
    "?": (
        "'?' within plain text inside [...] or {...}: YAML parsers disagree on it (libyaml keeps it in "
        "the text, PyYAML's own parser reads a key there)",
        "'?' only in quoted text inside [...] or {...}",
        "quote the text ('a?b')",
    ),
    "?,": (
        "'?' with no key right before ',' or ':' inside [...]: YAML parsers disagree on it (libyaml "
        "skips the ',' or ':', PyYAML's own parser reads an empty key)",
        "a key after '?'",
        "write the key after the '?', or remove the '?'",
    ),
    "!": (
        "a tag with ',', '[' or ']' in it or right after it: YAML parsers disagree on it (libyaml "
        "ends the tag there, PyYAML's own parser reads them into the tag)",
        "a space after a tag",
        "write a space after the tag (! , or !!str 'a'), or leave the tag out",
    ),
    "!!": (
        "a tag with a second '!' after a character other than a letter, a digit, '-' and '_' "
        "(!a.b!c): YAML parsers disagree on it (libyaml reads a tag !a.b!c, PyYAML's own parser a "
        "tag handle !a.b!, which it refuses)",
        "plain YAML values (strings, numbers, booleans, lists, mappings)",
        "remove the '!' tag; agentgate files use the YAML core schema only",
    ),
}
"""What ``_disagreed`` says of each place the parsers disagree on, by what is found there (the
character, or ``?,`` for an empty key): the problem, what is expected, the hint."""


def _tokens(scanner: Any) -> Iterator[Any]:
    """The tokens ``scanner`` reads, up to its error if any (what follows is not read alike by
    either parser: ``_disagreed``'s ``upto`` is at or before it). PyYAML's own scanner reads
    ahead to tell a key: the tokens it had read when it failed are still given (until review
    R67 the '?' of ``{a? "b}`` was never seen, held back while the quote was scanned).

    PyYAML's own scanner also stops at Python's ``ValueError`` or ``OverflowError``, where it
    converts a ``\\U`` escape beyond U+10FFFF or a ``%YAML`` version number of more than 4,300
    digits (``_composed`` refuses either where the parser reaches it): the tokens end there as
    at its error. ``_disagreed`` reads tokens up to where the parser failed, and the scanner
    scans the one after to know where it starts: until review R86 such a token there raised
    Python's error bare (``a: 1`` then ``- "\\U00110000"``, refused at the ``-`` by both
    parsers, and bare where ``_disagreed`` read the file's tokens)."""
    try:
        while (token := scanner.get_token()) is not None:
            yield token
    except (yaml.YAMLError, ValueError, OverflowError, _PastWindow):  # ``_Window``: at its end
        yield from getattr(scanner, "tokens", ())


def _block_content(text: str, start: int, end: int) -> tuple[int, int | None]:
    """Where the content of the block scalar written from ``start`` to ``end`` begins (after its
    header line: a tab there is no text), and a tab that starts its first line with text when
    its indentation is not written (``|``, not ``|2``), else ``None``: libyaml refuses it ("found
    a tab character where an indentation space is expected"), PyYAML reads it as text."""
    header_end = _BREAK.search(text, start, end)
    if header_end is None:
        return end, None
    content = header_end.end()
    if any(c.isdigit() for c in text[start : header_end.start()].partition("#")[0]):
        return content, None
    at = content
    while at < end:
        line_end = _BREAK.search(text, at, end)
        stop = line_end.start() if line_end is not None else end
        first = next((i for i in range(at, stop) if text[i] != " "), None)
        if first is not None:
            return content, first if text[first] == "\t" else None
        if line_end is None:
            break
        at = line_end.end()
    return content, None


def _first_tab(
    text: str,
    upto: int,
    quoted: Sequence[tuple[int, int]],
    starts: Sequence[int],
    scalars: Sequence[tuple[int, int]],
) -> int | None:
    """The index of the first tab in ``text`` up to ``upto`` (included) outside every span of
    ``quoted`` (in order, none overlapping) and every comment (``_in_comment``). A tab inside a
    span skips the rest of it, one in a comment the rest of its line: until review R92 every tab
    was looked up, and 8 MiB of comments holding a tab took 9.5 s to load, 7 times as long as
    8 MiB without one."""
    comments: dict[int, int] = {}
    span = 0
    at = text.find("\t", 0, upto + 1)
    while at != -1:
        while span < len(quoted) and quoted[span][1] <= at:
            span += 1
        if span < len(quoted) and quoted[span][0] <= at:
            at = quoted[span][1]
        elif _in_comment(text, at, starts, scalars, comments):
            line_end = _BREAK.search(text, at)
            if line_end is None:
                return None
            at = line_end.start()
        else:
            return at
        at = text.find("\t", at, upto + 1)
    return None


def _inside(index: int, spans: Sequence[tuple[int, int]]) -> bool:
    """Whether ``index`` is within one of ``spans`` (in order, none overlapping)."""
    at = bisect.bisect_right(spans, (index, math.inf)) - 1
    return at >= 0 and spans[at][0] <= index < spans[at][1]


def _in_comment(
    text: str, index: int, starts: Sequence[int], scalars: Sequence[tuple[int, int]], comments: dict[int, int]
) -> bool:
    """Whether ``text[index]`` is in a comment: after a ``#`` on its line that starts the line or
    follows a space or a tab, outside every scalar. ``comments`` keeps where each line's comment
    starts (``len(text)`` for none), so that a line is searched once however many tabs it holds;
    ``starts``: where each line starts (``_line_starts``)."""
    line_start = starts[bisect.bisect_right(starts, index) - 1]
    if line_start not in comments:
        line_end = _BREAK.search(text, line_start)
        end = line_end.start() if line_end is not None else len(text)
        comments[line_start] = len(text)
        hash_at = text.find("#", line_start, end)
        while hash_at != -1:
            if (hash_at == line_start or text[hash_at - 1] in " \t") and not _inside(hash_at, scalars):
                comments[line_start] = hash_at
                break
            hash_at = text.find("#", hash_at + 1, end)
    return comments[line_start] < index


def _malformed(
    exc: yaml.YAMLError, text: str, source: str, error: type[SourceError], parser: type[Any] = _PureLoader
) -> SourceError:
    """``error`` for what PyYAML could not parse. PyYAML says what it found and where (the
    problem), and often what it was reading and where that began (the context: ``while scanning
    a quoted scalar``, ``found duplicate anchor; first occurrence``): both are said. The error is
    located at the problem, unless that is the end of the file, where nothing can be fixed: an
    unclosed quote or bracket is then located where it opens, found from the tokens of ``parser``
    (the one that raised ``exc``, or PyYAML's own)."""
    mark = getattr(exc, "problem_mark", None)
    # Both may quote the file's text, an alias's or an anchor's name, a tag handle: megabytes
    # long (until review R86 an error of 1 MB). Cut by ``bounded``, which keeps their end, not
    # by ``shortened`` as the module's own quotes are: they are PyYAML's sentences, whose end
    # after the quote says what it is ("found duplicate anchor '...'; first occurrence").
    problem = bounded(getattr(exc, "problem", None) or str(exc).splitlines()[0], MAX_QUOTED)
    context = getattr(exc, "context", None)
    if context:
        context = bounded(context, MAX_QUOTED)
    context_mark = getattr(exc, "context_mark", None)
    message = f"malformed YAML: {problem}"
    if mark is not None:
        mark = _clamped(text, mark)
    if context_mark is not None:
        context_mark = _clamped(text, context_mark)
    end = mark_at(text, len(text))
    at_end = mark is None or (mark.line + 1, mark.column + 1) >= end
    if context and context_mark is not None:
        opened = Mark(context_mark.line + 1, context_mark.column + 1)
        message = f"malformed YAML: {context} at line {opened.line}, column {opened.column}: {problem}"
        if at_end or context == "while scanning a tag":  # a tag libyaml reads is refused at its '!'
            mark = context_mark
    if at_end and (mark is None or (mark.line + 1, mark.column + 1) >= end):
        # Still at the end: a text cut after a flow collection's ',' or its opening bracket, where
        # the parser's context is the node it expected there (until review R81 refused one line
        # past the end of the file): located at the bracket still open, the innermost.
        bracket = _open_bracket(text, parser)
        if bracket is not None:
            mark = bracket
            where = f"line {bracket.line + 1}, column {bracket.column + 1}"
            message = (
                f"malformed YAML: the {_bracket_at(text, bracket)} at {where} is never closed: {problem}"
            )
    return error(
        message,
        file=source,
        line=mark.line + 1 if mark is not None else None,
        column=mark.column + 1 if mark is not None else None,
        expected="a YAML mapping",
        hint="check the indentation and quoting around this position",
    )


def _open_bracket(text: str, parser: type[Any]) -> Any | None:
    """Where the innermost flow collection (``[`` or ``{``) still open at the end of ``text``
    begins, from the tokens of ``parser``'s scanner up to its error if any; ``None`` when none is."""
    opened: list[Any] = []
    scanner = parser(text)
    try:
        for token in _tokens(scanner):
            if isinstance(token, _FLOW_START):
                opened.append(token.start_mark)
            elif isinstance(token, _FLOW_END) and opened:
                opened.pop()
    finally:
        scanner.dispose()
    return opened[-1] if opened else None


def _bracket_at(text: str, mark: Any) -> str:
    """``'['`` or ``'{'``: the bracket at ``mark`` in ``text``, quoted as a message shows it."""
    return repr(text[_mark_index(text, mark)])


class _Place(NamedTuple):
    line: int  # from 0, as a parser's mark
    column: int


def _clamped(text: str, mark: Any) -> Any:
    """A parser's mark, or the end of ``text`` where the mark lies past it: libyaml marks the
    end of a text without a final line break on the line after it, PyYAML at the text's end
    (until review R66 an unclosed ``{?`` was refused at 2:1 by one, 1:3 by the other)."""
    end = mark_at(text, len(text))
    if (mark.line + 1, mark.column + 1) <= tuple(end):
        return mark
    return _Place(end.line - 1, end.column - 1)


def _refuse_too_many_nodes(events: Any, source: str, error: type[SourceError], max_nodes: int) -> None:
    """Raise ``error`` at the node past ``max_nodes``, counting the events of the parser
    ``events`` (the caller's, which it disposes of) and keeping none: time up to the budget, and
    memory for one event. PyYAML's errors propagate as they are.

    PyYAML's own parser, whose composer stops with the located error at a collection nested
    deeper than ``_COMPOSER_DEPTH`` (``_limit_depth``), is counted past it as libyaml is, up to
    libyaml's own depth limit (``_LIBYAML_DEPTH``), so that a file with too many nodes after such
    a collection gets the node-count error from either parser (a regression review of R93: this
    count stopped at the collection, and without libyaml the file was refused as nested too
    deep). An error of PyYAML's anywhere after that collection, or the end of the re-read's window
    (``_Window``), ends the count: the nesting error, which comes first in the file, stands, as
    libyaml's own error there is refused so (``_refused``). The
    count is bounded by ``max_nodes`` events, each cheap at any flow level since ``_PureLoader``
    walks only the simple keys it needs; until review R93, when that scanner's work for a token
    grew with the flow level and this count read on to the end, 17,000 '[' (16.6 KiB) took 92 s
    to refuse and 1 MiB of them 276 s."""
    count = depth = 0
    limited = isinstance(events, yaml.composer.Composer)
    composer_stops = False  # once a collection past ``_COMPOSER_DEPTH`` is read: the composer stops there
    while True:
        try:
            event = events.get_event()
        except (yaml.YAMLError, ValueError, OverflowError, _PastWindow):
            if composer_stops:
                return
            raise
        if event is None:
            return
        if isinstance(event, _COLLECTION_ENDS):
            depth -= 1
        elif isinstance(event, _NODE_EVENTS):
            if isinstance(event, _COLLECTION_STARTS):
                depth += 1
                composer_stops = composer_stops or (limited and depth > _COMPOSER_DEPTH)
                if limited and depth > _LIBYAML_DEPTH:
                    return
            count += 1
            if count > max_nodes:
                mark = event.start_mark
                raise error(
                    f"more than {max_nodes} YAML nodes (scalars, keys, lists, mappings, aliases)",
                    file=source,
                    line=mark.line + 1 if mark is not None else None,
                    column=mark.column + 1 if mark is not None else None,
                    expected=f"at most {max_nodes} nodes"
                    + ("; an agentgate file holds a few hundred" if max_nodes == MAX_NODES else ""),
                    hint="remove generated or repeated entries",
                )


def _lone_surrogate(error: type[SourceError], source: str, index: int) -> SourceError:
    return error(
        f"not UTF-8 text (character {index})",
        file=source,
        expected="text that UTF-8 can encode",
        hint="remove the lone surrogate (\\ud800-\\udfff)",
    )


def _stray_underscore(number: str) -> bool:
    """Whether the number ``number`` (an int or float scalar, as PyYAML's 1.1 rule reads one) has
    an underscore that is not between two of its digits: a trailing one (``1_``), two in a row
    (``1__0``), one beside the point (``1_.5``). An underscore right after a base prefix is
    Python's and kept (``0x_ff``). Until review R57 they were read, ``1_`` as 1."""
    digits = number.lstrip("+-")
    prefix = digits[:2].lower()
    if prefix in ("0x", "0o", "0b"):
        digits = digits[3:] if digits[2:3] == "_" else digits[2:]
    hexadecimal = prefix == "0x"
    if not any(c in (string.hexdigits if hexadecimal else string.digits) for c in digits):
        return False  # no digits at all (``!!float _``): not a number, which ``_constructed`` says
    return (_STRAY_HEX_UNDERSCORE if hexadecimal else _STRAY_UNDERSCORE).search(digits) is not None


def _written_exactly(text: str, value: float) -> bool:
    """Whether the float ``value``, loaded from the scalar ``text`` (PyYAML's ``_`` between digits
    allowed), is the number ``text`` writes, as ``exact_float`` decides it: ``0.1`` and ``1.5e3``
    are, ``9007199254740993.0`` (2**53) and ``1e-400`` (0.0) are not. Infinity and NaN are
    refused where they matter on their own. The text is read as PyYAML reads it: one sign taken
    off first, what follows read by ``float`` (``!!float -+1.5`` is -1.5, ``!!float --1.5`` is
    1.5; a sign does not change whether a float holds a number); until review R55 such a sign form
    was refused as inexact. Text neither ``float`` nor ``Decimal`` reads whole is not known to be
    exact, so counts as not."""
    if not math.isfinite(value):
        return True
    plain = text.replace("_", "")
    try:
        return not isinstance(exact_float(plain[1:] if plain.startswith(("+", "-")) else plain), Inexact)
    except (ValueError, ArithmeticError):  # decimal.InvalidOperation is an ArithmeticError
        return False


def _nested_too_deep(error: type[SourceError], source: str, mark: Any) -> SourceError:
    """``error`` for a collection nested deeper than ``MAX_DEPTH``, which starts at ``mark``."""
    return error(
        f"nested more than {MAX_DEPTH} levels deep",
        file=source,
        line=mark.line + 1,
        column=mark.column + 1,
        expected="a file of sane structure",
        hint="flatten the structure; no agentgate file nests this deep",
    )


class _Builder:
    def __init__(
        self, text: str, source: str, locations: Locations, error: type[SourceError], max_nodes: int
    ) -> None:
        self.text = text
        self.max_nodes = max_nodes
        self.source = source
        self.error_type = error
        self.locations = locations
        self.count = 0
        self.seen: set[int] = set()
        self.scalars_read: dict[int, tuple[Any, bool]] = {}
        """Each scalar node built, by ``id``: its value, and whether that is a float other than
        the number written (``_read_scalar``)."""
        self.keys_read: dict[int, tuple[Any, str]] = {}
        """Each mapping key node read, by ``id``: its text (else what is not text) and the text's
        NFC form (``_read_key``)."""
        self.aliases = 0
        self.inside_alias = False
        self.alias_at: Any = None
        """While an alias is built: where the alias is written (every path under it is located
        there, not at the anchor's text, which a path under the alias does not name)."""
        self.alias_parser: Any = None
        self.alias_marks: Iterator[Any] = iter(())
        self.scalars = yaml.SafeLoader("")
        self.verbatim = "!<" in text
        """Whether ``text`` may hold a verbatim tag (``_verbatim_non_specific`` looks only then)."""
        self.starts: list[int] | None = None
        """Where each line of ``text`` starts (``_line_starts``), once an empty node needs them."""

    def close(self) -> None:
        self.scalars.dispose()
        if self.alias_parser is not None:
            self.alias_parser.dispose()

    def error(self, node: yaml.Node, message: str, expected: str, hint: str) -> SourceError:
        return self.error_at(node.start_mark, message, expected, hint)

    def error_at(self, mark: Any, message: str, expected: str, hint: str) -> SourceError:
        if self.alias_at is not None:
            mark = self.alias_at
        return self.error_type(
            message,
            file=self.source,
            line=mark.line + 1,
            column=mark.column + 1,
            expected=expected,
            hint=hint,
        )

    def alias_mark(self, node: yaml.Node) -> Any:
        """Where the alias met now is written: the composer hands an alias over as its anchor's
        node, marks included, so the aliases' own marks are read from the parser's events, in
        order, as the builder meets them (in document order, an anchor before its aliases).
        Only a file that holds an alias is parsed a second time, one event at a time."""
        if self.alias_parser is None:
            self.alias_parser = _Loader(self.text)
            events = iter(self.alias_parser.get_event, None)
            self.alias_marks = (e.start_mark for e in events if isinstance(e, yaml.AliasEvent))
        return next(self.alias_marks, node.start_mark)

    def is_alias(self, node: yaml.Node) -> bool:
        """Whether ``node``, met now outside an alias's expansion, is an alias (met before)."""
        if self.inside_alias:
            return False
        if id(node) in self.seen:
            return True
        self.seen.add(id(node))
        return False

    def build(self, node: yaml.Node, path: Path_) -> Any:
        self.count += 1
        if self.count > self.max_nodes:
            raise self.error(
                node,
                f"the document expands to more than {self.max_nodes} values",
                "a file of sane size",
                "remove aliases that repeat large structures",
            )
        alias_at = self.alias_mark(node) if self.is_alias(node) else None
        at = alias_at or self.alias_at or node.start_mark
        if at.index >= len(self.text):
            # An empty value at the end of a text without a final line break (``? ttl_s``): libyaml
            # marks it on the line after the last, PyYAML's own parser at the text's end (until
            # review R92 a policy of 4 lines had a null value refused at 5:1 with libyaml).
            at = _clamped(self.text, at)
        self.locations.values.setdefault(path, at)
        if self.verbatim:
            self._refuse_verbatim_non_specific(node)
        if isinstance(node, yaml.ScalarNode):
            value, inexact = self._read_scalar(node)
            if inexact:
                self.locations.inexact[path] = (node.value, value)
            return value
        if len(path) >= MAX_DEPTH:
            raise _nested_too_deep(self.error_type, self.source, self.alias_at or alias_at or node.start_mark)
        # Only collections expand when aliased, so only they are counted.
        if alias_at is not None:
            self._alias(alias_at)
            self.inside_alias, self.alias_at = True, alias_at
            try:
                return self.build(node, path)
            finally:
                self.inside_alias, self.alias_at = False, None
        if isinstance(node, yaml.MappingNode):
            return self._mapping(node, path)
        if isinstance(node, yaml.SequenceNode):
            if node.tag != _SEQ:
                raise self._tag_error(node)
            return [self.build(item, (*path, i)) for i, item in enumerate(node.value)]
        raise self._tag_error(node)

    def _read_scalar(self, node: yaml.ScalarNode) -> tuple[Any, bool]:
        """``node``'s value (``_scalar``) and whether it is a float other than the number written,
        read once per node: the composer hands each alias over as its anchor's node, so an alias
        of a scalar is one look-up. An alias of a scalar expands to nothing, so ``MAX_ALIASES``
        does not count it; until review R91 each read the whole text again (the surrogate
        search, the number patterns), and 40,000 aliases of a 4 MiB scalar, a file within
        the 8 MiB a policy may hold, took minutes to load."""
        read = self.scalars_read.get(id(node))
        if read is None:
            value = self._scalar(node)
            inexact = type(value) is float and not _written_exactly(node.value, value)
            read = self.scalars_read[id(node)] = (value, inexact)
        return read

    def _read_key(self, node: yaml.Node) -> tuple[Any, str]:
        """A mapping key's text, read as a value is, and its NFC form; ``None`` (and ``""``) where
        it is not text (a number, a collection). Read once per node, as ``_read_scalar`` reads a
        value: one key aliased in many mappings (``- {*k: 1}``) is one look-up each."""
        read = self.keys_read.get(id(node))
        if read is None:
            key: Any = None
            if isinstance(node, yaml.ScalarNode):
                if node.tag == _STR:
                    # Read as a value is: until review R86 ``1e3:``, ``0o17:`` and ``-.5:``, numbers
                    # in YAML 1.2 and text to PyYAML's 1.1 rule, loaded as text keys.
                    key = self._text(node)
                elif self._non_specific(node):
                    key = self._unicode(node)
            normal = unicodedata.normalize("NFC", key) if isinstance(key, str) else ""
            read = self.keys_read[id(node)] = (key, normal)
        return read

    def _tag_match(self, pattern: re.Pattern[str], node: yaml.Node) -> re.Match[str] | None:
        """``pattern`` (``_TAGGED`` or one built on it) matched at ``node``'s start, where the tag
        it finds is ``node``'s own: within the node as the parser marks it, which ends an anchored
        empty value at its anchor. The pattern reads on past a line break (``&a # why`` then
        ``!!str 5`` on the next line is one node), where a block collection's next entry may start
        instead: until review R90b ``k: &a`` then ``! j: 1`` read the key's tag as the empty
        value's, which loaded as ``''`` where both parsers read null."""
        found = pattern.match(self.text, node.start_mark.index)
        return found if found is not None and found.end() <= node.end_mark.index else None

    def _non_specific(self, node: yaml.Node) -> bool:
        """Whether ``node`` is a plain scalar with the non-specific tag ``!`` that PyYAML resolved
        as if it were untagged (``! 1`` the integer 1): text in YAML 1.2, as ``!!str 1`` is."""
        return (
            node.tag in _RESOLVED
            and isinstance(node, yaml.ScalarNode)
            and not node.style
            and self._tag_match(_NON_SPECIFIC, node) is not None
        )

    def _refuse_verbatim_non_specific(self, node: yaml.Node) -> None:
        """Refuse ``node``, at its tag's '!', if it is tagged ``!<!>`` or ``!<%21>``
        (``_VERBATIM_NON_SPECIFIC``). Until review R89 ``[!<!> 5, !<!> true]`` loaded as
        ``[5, True]`` where ``[! 5, ! true]`` is text, and ``action: !<!>`` was refused with
        libyaml (an action ``''``) and loaded with PyYAML's own parser (no action: ``invoke``)."""
        tagged = self._tag_match(_VERBATIM_NON_SPECIFIC, node)
        if tagged is None:
            return
        at = mark_at(self.text, tagged.start(1) - 1)
        written = "!" + tagged.group(1)
        raise self.error_at(
            _Place(at.line - 1, at.column - 1),
            f"tag {written!r} is not allowed: the non-specific tag '!' written verbatim, which YAML 1.2 "
            "calls invalid and YAML parsers read apart (libyaml reads an empty value after it as '', "
            "PyYAML's own parser as null)",
            "plain YAML values (strings, numbers, booleans, lists, mappings)",
            "remove the tag; for text, quote the value or write '! ' (a '!' and a space) before it",
        )

    def _scalar(self, node: yaml.Node) -> Any:
        if self._non_specific(node):
            # Until review R56 ``! 1`` was the integer PyYAML resolves it to, so ``in: [! 5]`` held
            # what another reader reads as text (as a key, until review R67, refused by PyYAML's
            # own parser, which resolves it so, and text to libyaml, which does not).
            return self._unicode(node)
        if (
            node.tag in _TEXT_1_2
            and node.value in ("=", "<<")
            and isinstance(node, yaml.ScalarNode)
            and not self._tagged(node)  # ``!!merge <<``: a tag YAML 1.2 has not, refused below
        ):
            return node.value  # a plain '=' or '<<' value: YAML 1.1's value and merge tags, text in 1.2
        if (
            node.tag == _TIMESTAMP
            and isinstance(node, yaml.ScalarNode)
            and not node.style
            and not self._tag_match(_TAGGED, node)
        ):
            return node.value  # a plain 2026-01-31: a timestamp in YAML 1.1, text in YAML 1.2
        if node.tag not in _SCALAR_TAGS:
            raise self._tag_error(node)
        if node.tag == _STR:
            return self._text(node)
        # What YAML 1.1 reads as a boolean or a number and YAML 1.2 as text is text here when
        # plain, and refused when tagged (``!!bool yes``): the tag says a boolean (a number) was
        # meant, and YAML 1.2 has none such. Until review R65 a tagged one loaded as its text.
        if node.tag == _BOOL and node.value not in _BOOLEANS:
            # YAML 1.1 reads yes/no/on/off as booleans: ``in: [NO, SE, DK]`` would hold False,
            # not Norway. YAML 1.2 reads them as text, and so does agentgate; a field that wants
            # a boolean then refuses the text with its location.
            if self._tagged(node):
                raise self.error(
                    node,
                    f"not a boolean: {node.value[:40]!r}",
                    "true or false",
                    "write true or false (yes, no, on and off are text, as in YAML 1.2), or drop the tag",
                )
            return node.value
        if node.tag == _NULL and node.value not in _NULLS:
            # Only a tag makes such a null (PyYAML resolves only these texts to it): until review
            # R86 ``tenant: !!null acme`` loaded as no tenant, the text thrown away.
            raise self.error(
                node,
                f"not null: {node.value[:40]!r}",
                "null, ~ or nothing after !!null",
                "drop the tag to write the text, or write null",
            )
        if node.tag == _FLOAT and ":" in node.value:
            if self._tagged(node):
                raise self._not_a_number(node)
            return node.value  # a sexagesimal float (``1:30.5``), text in YAML 1.2
        if node.tag == _INT and not _INTEGER.fullmatch(node.value):
            if _SEXAGESIMAL.fullmatch(node.value):
                if self._tagged(node):
                    raise self._not_a_number(node)
                return node.value  # ``10:30`` is 630 in YAML 1.1, text in YAML 1.2 and here
            if _LEADING_ZERO.fullmatch(node.value):
                raise self._ambiguous(node)
            raise self._not_a_number(node)  # ``!!int ""``, ``!!int +``: no digits to read
        if "_" in node.value and node.tag in (_INT, _FLOAT) and _stray_underscore(node.value):
            raise self.error(
                node,
                f"stray underscore in the number {node.value[:40]!r}",
                "digits with single underscores between them (1_000)",
                "remove the underscore, or quote text",
            )
        if node.tag == _FLOAT and not _FLOAT_TAGGED.fullmatch(node.value):
            # Until review R89 Python's float() read it: ``le: !!float "1\u0660\u0660"`` (Arabic-Indic
            # zeros, which show as dots) loaded as 100.0, ``!!float ' 7'`` as 7.0.
            raise self._not_a_number(node)
        return self._constructed(node)

    def _tagged(self, node: yaml.Node) -> bool:
        """Whether ``node``'s text starts with a tag (``!!bool yes``), not one resolved from its
        plain text; a quoted scalar of a tag other than text always has one."""
        quoted = isinstance(node, yaml.ScalarNode) and bool(node.style)
        return quoted or self._tag_match(_TAGGED, node) is not None

    def _text(self, node: yaml.Node) -> Any:
        """A scalar PyYAML resolved as text: an unquoted, untagged number as YAML 1.2 reads it
        (``0o17``, ``1e3``), where PyYAML's 1.1 rule says text; else the text itself. Raises for
        an integer with a leading zero (ambiguous) or one too long to print."""
        plain = isinstance(node, yaml.ScalarNode) and not node.style  # None, or "" (libyaml)
        # ``!!str 5`` is plain too, but its author said text: only an untagged scalar is a number.
        if plain and not self._tag_match(_TAGGED, node):
            value = node.value
            if _OCTAL_1_2.fullmatch(value):
                number = int(value.replace("0o", "", 1), 8)
                if not -_MAX_INT < number < _MAX_INT:
                    raise self._too_long(node)
                return number
            if _LEADING_ZERO.fullmatch(value):
                raise self._ambiguous(node)
            if _FLOAT_1_2.fullmatch(value):
                return float(value)
        return self._unicode(node)

    def _unicode(self, node: yaml.Node) -> str:
        """The text of a string scalar, refusing a lone surrogate. A double-quoted ``"\\ud800"``
        is one: libyaml refuses the escape, PyYAML's pure-Python reader builds it, and the
        same file would load or not with how PyYAML was installed (and its text, which UTF-8
        cannot encode, would fail wherever it is written out)."""
        value = str(node.value)
        if not value.isascii() and _SURROGATE.search(value):
            raise self.error(
                node,
                "malformed YAML: found invalid Unicode character escape code (a lone surrogate)",
                "text that UTF-8 can encode",
                "write the character itself, or its \\U escape; \\ud800-\\udfff are no characters",
            )
        return value

    def _constructed(self, node: yaml.Node) -> Any:
        """PyYAML's value for a scalar of a number, boolean or null tag, refusing one it cannot
        read (``bad value``, ``not a number``) and an integer too long to print."""
        try:
            value = self.scalars.construct_object(node, deep=True)
        except yaml.YAMLError as exc:
            problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
            raise self.error(node, f"bad value: {problem}", "a plain value", "quote the value") from None
        except (ValueError, IndexError):  # PyYAML reads ``!!float ""`` (or ``"_"``) at [0]
            if len(node.value) <= _MAX_DIGITS:  # no digits at all (``0x_``, ``!!float abc``)
                raise self._not_a_number(node) from None
            raise self._too_long(node) from None  # Python converts at most 4,300 decimal digits
        # ``0x`` with 3,600 hex digits converts (only decimal text is bounded), but is a number
        # nothing can print: every message that quotes it would raise a bare ValueError.
        if type(value) is int and not -_MAX_INT < value < _MAX_INT:
            raise self._too_long(node)
        return value

    def _not_a_number(self, node: yaml.Node) -> SourceError:
        return self.error(
            node,
            f"not a number: {node.value[:40]!r}",
            "a number (0x, 0o and 0b followed by at least one digit)",
            "write the digits, or quote text",
        )

    def _too_long(self, node: yaml.Node) -> SourceError:
        return self.error(
            node, f"number of {len(node.value)} characters", "a number of sensible size", "quote text"
        )

    def _ambiguous(self, node: yaml.Node) -> SourceError:
        return self.error(
            node,
            f"ambiguous number {shortened(node.value)!r}",
            "a decimal integer (or 0x, 0o, 0b with digits)",
            "YAML versions disagree on a leading zero: write the number without it, or quote text",
        )

    def _alias(self, at: Any) -> None:
        # The composer shares one node between an anchor and its aliases, so a node met twice
        # is an alias; counting them stops an alias bomb long before it expands.
        self.aliases += 1
        if self.aliases > MAX_ALIASES:
            raise self.error_at(
                at,
                f"more than {MAX_ALIASES} YAML aliases",
                "at most a few '*alias' references",
                "write the values out; many aliases are how an alias bomb expands",
            )

    def empty_at(self, node: yaml.Node, after: int | None = None) -> Any:
        """Where ``node``, a child of a flow collection, is located if it is an empty plain
        scalar (``{ttl_s: , x: 1}``, ``{? : 1}``), else ``None``. libyaml marks one at the next
        token (the ','), PyYAML's own parser right after the indicator before it: until review
        R67 a policy's ``{ttl_s: }`` was refused at columns two apart. Both are located at the
        next token, past blanks, line breaks and comments; ``after``: where the indicator before
        it ends, where the mark is not at it (an empty key in ``[?, ]``: libyaml marks it past
        the ',' it skips, ``_disagreed``)."""
        if not (isinstance(node, yaml.ScalarNode) and node.value == "" and not node.style):
            return None
        at = node.start_mark.index
        if at != node.end_mark.index:  # an anchor or a tag is written: it is the node's start
            return None
        if after is not None:
            at = after
        text = self.text
        while at < len(text):
            if text[at] in " \t\r\n":
                at += 1
            elif text[at] == "#":
                line_end = _BREAK.search(text, at)
                at = line_end.start() if line_end is not None else len(text)
            else:
                break
        if self.starts is None:
            self.starts = _line_starts(text)
        line = bisect.bisect_right(self.starts, at) - 1
        return _Place(line, at - self.starts[line])

    def _mapping(self, node: yaml.MappingNode, path: Path_) -> dict[str, Any]:
        if node.tag != _MAP:
            raise self._tag_error(node)
        out: dict[str, Any] = {}
        normal: dict[str, str] = {}  # each key in NFC -> the key as first written
        for key_node, value_node in node.value:
            key_at = self.alias_mark(key_node) if self.is_alias(key_node) else key_node.start_mark
            if node.flow_style:
                # A pair inside [...] written with '?' starts at it: its key is after the '?'.
                pair = node.start_mark.index
                after = pair + 1 if self.text.startswith("?", pair) else None
                key_at = self.empty_at(key_node, after) or key_at
            if key_node.tag == "tag:yaml.org,2002:merge":
                raise self.error_at(
                    key_at,
                    "YAML merge keys ('<<') are not allowed",
                    "explicit keys",
                    "write the keys out: a merge silently brings in fields a reviewer does not see",
                )
            if self.verbatim:
                self._refuse_verbatim_non_specific(key_node)
            key, normalized = self._read_key(key_node)
            if not isinstance(key, str):
                raise self.error_at(
                    key_at,
                    "mapping keys must be plain strings",
                    "a string key",
                    "quote keys that look like numbers, booleans or null (e.g. 'yes')",
                )
            child = (*path, key)
            first = normal.setdefault(normalized, key)
            if first in out:
                # Until review R67 ``café`` written once as one character and once as ``e`` and a
                # combining accent loaded as two keys, which every reader sees as one.
                spelled = "" if first == key else ", spelled in another Unicode normalization form"
                at_line = self.locations.keys[(*path, first)].line + 1
                raise self.error_at(
                    key_at,
                    f"duplicate key {shortened(key)!r} (first at line {at_line}{spelled})",
                    "each key once",
                    "remove one of them: YAML would silently keep only the last",
                )
            self.locations.keys.setdefault(child, self.alias_at or key_at)
            if node.flow_style and (empty := self.empty_at(value_node)) is not None:
                self.locations.values.setdefault(child, self.alias_at or empty)
            out[key] = self.build(value_node, child)
        return out

    def _tag_error(self, node: yaml.Node) -> SourceError:
        # Located at the tag's '!', after the node's anchor if any: where PyYAML's own parser
        # refuses a tag libyaml reads (``!*a!``: "while scanning a tag"), located there too.
        tagged = self._tag_match(_TAGGED, node)
        at = mark_at(self.text, tagged.end() - 1) if tagged is not None else None
        return self.error_at(
            _Place(at.line - 1, at.column - 1) if at is not None else node.start_mark,
            f"tag {shortened(node.tag)!r} is not allowed",
            "plain YAML values (strings, numbers, booleans, lists, mappings)",
            "remove the '!' tag; agentgate files use the YAML core schema only",
        )
