"""Redaction of what a backend's words must not carry out of the client: its API key, whole or a
piece of it, and the start of a prompt's message it echoed (``_scrub``), and a value of its
answer quoted so (``_quoted_echo``)."""

from __future__ import annotations

import bisect
import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from agentgate._shown import quoted

_FRAGMENT = 8
"""The shortest piece of a key, or start of a prompt's message, that ``_scrub`` redacts."""


def _scrub(
    text: str,
    key: str | None,
    prompts: Sequence[str] = (),
    *,
    cut: bool = False,
    upto: int | None = None,
    escaped: Sequence[str] = (),
) -> str:
    """``text`` with ``key``, every start of it ``_FRAGMENT`` or more characters long (what a quote
    cut mid-key, or a masked key, shows) and every other piece of it twice that long (a quote that
    cut the key's start: a shorter piece may be a word of ours, ``credentials``, that a key holds),
    and each of ``prompts`` with every start of it ``_FRAGMENT`` long or more (a backend's echo of
    its input, cut), replaced by ``[redacted]``: each run of ``text`` that any of these cover, as
    one marker.

    The work is never ``text``'s length times the number of prompts: each place in ``text`` is
    measured once against them all (``_prompt_runs``), however many messages share its start.
    Until review R89 each prompt was looked for on its own and each place it started kept as a
    span, so a body of N messages ``aaaaaaaa`` and an error echoing 1,024 ``a`` cost N x 1,024
    spans (a second of the event loop for 2,000 such messages). Measuring a place costs up to the
    length of the echo standing there, so an echo of one character repeated costs ``text``'s
    length squared: every caller scrubs only a start of the backend's words, at most 1,296
    characters (until review R90 a transport failure's text was scrubbed whole: a header line of
    60,000 characters echoing the prompt held the event loop over a second, ``_failure_text``).

    A key or prompt shorter than ``_FRAGMENT`` is left where it stands: a key that short is no
    secret (``ollama``, ``EMPTY``, ``1``: the words an endpoint's own message holds), and redacting
    it garbled that message (``Error code: 40[redacted]``). The runs are found in ``text`` as it
    came, never in what redaction wrote: until review R87b a second pass rescanned the markers
    the first had written (``Inv[red[red[redacted]cted]cted]lid API key`` for the key ``a``).

    Where ``cut`` (``text`` is the start of the backend's words, cut there for the quote), the
    longest end of ``text``, fewer than ``_FRAGMENT`` characters and not redacted, that is a
    start of the key or of one of ``prompts`` (each as the scrub looks for it, ``_FRAGMENT``
    characters or longer) is left out (``_cut_start``): a start standing there is too short to
    be found. Until review R90 it was quoted: an error body's runs of white space, folded after
    the scrub, brought a prompt's start at the end of the 1,024 bytes read into the 200
    characters quoted (``HTTP 400: <pre> 078-05-``); until a regression review of R90b the last
    ``_FRAGMENT - 1`` characters were left out whatever they were, and a short error body read
    as cut lost the end of the backend's own words (``max_tokens must be at most``, its
    ``4096"}`` left out) with nothing to redact. So too the longest end, fewer than twice
    ``_FRAGMENT`` characters and not redacted, that is any other piece of the key
    ``_KEY_PIECE_AT_THE_CUT`` characters or longer: where the words go on past what was read
    (the first piece of an error body to arrive, or what a transport returned of it), an echo of
    the key less its first characters standing at the end is too short to be found; until a
    regression review of R91b it was quoted, 9 of its characters for a first piece of 1,030
    bytes.

    Where ``upto`` is given, only what stands in ``text``'s first ``upto`` characters is written,
    its runs found in all of ``text``: a run standing across ``upto`` is written as its marker,
    so a quote cut there shows no piece of an echo that ``text`` holds whole past it
    (``_scrub_start``).

    ``escaped`` are further forms of the prompts and the key, as ``repr`` writes them
    (``_repr_texts``), each looked for as a prompt is, by its start, but measured in the
    characters it writes, not in those of their escapes (``_escaped_runs``)."""
    stop = len(text) if upto is None else min(upto, len(text))
    reach = [0] * len(text)  # reach[i]: where the longest run found starting at i ends (0: none)
    found = _prompt_runs(text, prompts) + _escaped_runs(text, escaped)
    if key and len(key) >= _FRAGMENT:
        found += _starts(text, key) + _pieces(text, key, 2 * _FRAGMENT)
    for start, end in found:
        reach[start] = max(reach[start], end)
    parts: list[str] = []
    done = 0
    for start, end in enumerate(reach[:stop]):
        if end <= done:
            continue
        if start > done or not parts:
            parts += [text[done:start], _MARKER]
        done = end
    # Each run redacted is ``_FRAGMENT`` long or more, so what may be left out follows the last.
    left_out = _cut_start(text[max(done, len(text) - 2 * _FRAGMENT + 1) :], key, prompts) if cut else 0
    return "".join(parts) + text[done : min(stop, len(text) - left_out)]


_SEEN_PAST_THE_CUT = 2 * _FRAGMENT
"""How many characters past a quote's cut ``_scrub_start`` scrubs: an echo standing across the
cut is found whole, however little of it stands before the cut (a piece of the key that is not
its start is redacted only where it is twice ``_FRAGMENT`` long)."""


def _scrub_start(
    text: str, key: str | None, prompts: Sequence[str], limit: int, *, in_repr: bool = False
) -> str:
    """The first ``limit`` characters of ``text`` scrubbed (``_scrub``): what every quote of the
    backend's words that are text scrubs, so the scrub's work stays bounded by ``limit``. The
    scrub reads ``_SEEN_PAST_THE_CUT`` characters further and writes what stands before the cut
    (``upto``), so an echo across the cut is redacted whole (what stands at the end of what it
    reads is past the cut, so it needs no ``cut``); the scrubbed text is cut to ``limit``
    characters again (a marker is longer than a run of 8), where all it reads is scrubbed, a
    marker standing across that cut kept whole (``_cut_whole``).
    Until a regression review of R91 the text was cut first and scrubbed as cut there (``cut``),
    which hides only a start of the key or a prompt at the cut: an inner piece of the key shorter
    than twice ``_FRAGMENT`` standing there (an echo of the key less its first characters,
    begun 15 characters before the cut) was quoted.

    Where ``in_repr`` (a parser's refusal quoting a line with ``repr``, ``_failure_text``), the
    prompts and the key are also looked for as ``repr`` writes them (``_repr_texts``, from what
    the scrub reads)."""
    seen = text[: limit + _SEEN_PAST_THE_CUT]
    escaped = _repr_texts(seen, prompts, key) if in_repr else ()
    return _cut_whole(_scrub(seen, key, prompts, upto=limit, escaped=escaped), limit)


_MARKER = "[redacted]"
"""What ``_scrub`` writes for each run it redacts."""


def _cut_whole(text: str, limit: int) -> str:
    """The first ``limit`` characters of ``text`` (scrubbed, ``_scrub``), and the rest of a marker
    standing across the cut: until a regression review of R91b a quote whose echo began just
    before its cut ended in half a marker (``...xxx[red``). So it may run up to
    ``len(_MARKER) - 1`` (9) characters past ``limit``, as docs/dispatch.md says."""
    at = text.find(_MARKER, max(limit - len(_MARKER) + 1, 0), limit + len(_MARKER) - 1)
    return text[: at + len(_MARKER) if 0 <= at < limit else limit]


_KEY_PIECE_AT_THE_CUT = 4
"""The shortest piece of the key, other than its start, that ``_scrub`` leaves out at the end
of words cut there (``_cut_start``). A key is random, so the backend's own words end in a piece
of it this long rarely (some 50 pieces of 4 among 62 ** 4 = 14.8 million strings of letters and
digits: in a review's scratch run, docs/dispatch.md and docs/gateway.md cut at each character never did for 200 random keys of 24; once in 1.6
million cuts for hex keys, once in 10,000 for keys starting ``sk-proj-``, whose ``proj`` a word
may end in), and then lose at most 15 characters where they are cut anyway; a shorter piece
standing there is quoted (3 characters of a random key tell little)."""


def _cut_start(end: str, key: str | None, prompts: Sequence[str]) -> int:
    """How many of the last characters of ``end`` (the end of words cut there, up to
    ``2 * _FRAGMENT - 1`` of them) to leave out: the most that are a start, fewer than
    ``_FRAGMENT`` characters, of ``key`` or of one of ``prompts`` that ``_scrub`` looks for (those
    ``_FRAGMENT`` characters or longer, in each form ``_prompt_texts`` gives), or any other piece
    of ``key`` ``_KEY_PIECE_AT_THE_CUT`` characters or longer (a longer piece is redacted, cut or
    not); 0 where none. Only the key's pieces are looked for so: a prompt's inner piece is words
    a backend's own may share (until a regression review of R90b its last characters were left
    out whatever they were)."""
    secrets = [s for s in [*prompts, key or ""] if len(s) >= _FRAGMENT and s[0] in end]
    start = next(
        (
            size
            for size in range(min(len(end), _FRAGMENT - 1), 0, -1)
            if any(secret.startswith(end[-size:]) for secret in secrets)
        ),
        0,
    )
    if not key or len(key) < _FRAGMENT:
        return start
    piece = next(
        (size for size in range(len(end), _KEY_PIECE_AT_THE_CUT - 1, -1) if end[-size:] in key),
        0,
    )
    return max(start, piece)


def _starts(text: str, secret: str) -> list[tuple[int, int]]:
    """Where in ``text`` a start of ``secret``, ``_FRAGMENT`` characters or longer, stands, as
    ``(start, end)`` spans, each as long as ``text`` goes on as ``secret`` does: found with
    ``str.find`` and measured by halving, so a long conversation's message costs little."""
    head = secret[:_FRAGMENT]
    spans = []
    i = text.find(head)
    while i >= 0:
        low, high = _FRAGMENT, min(len(secret), len(text) - i)  # text goes on as secret[:low] does
        while low < high:
            middle = (low + high + 1) // 2
            if text.startswith(secret[low:middle], i + low):
                low = middle
            else:
                high = middle - 1
        spans.append((i, i + low))
        i = text.find(head, i + 1)
    return spans


def _pieces(text: str, secret: str, size: int) -> list[tuple[int, int]]:
    """Where in ``text`` a piece of ``secret``, ``size`` characters or longer (all of it, where
    it is shorter), stands, as ``(start, end)`` spans: one for each ``size`` characters of ``text``
    that stand in ``secret``, whose union is every longer piece too."""
    size = min(size, len(secret))
    pieces = {secret[k : k + size] for k in range(len(secret) - size + 1)}
    return [(i, i + size) for i in range(len(text) - size + 1) if text[i : i + size] in pieces]


def _prompt_runs(text: str, prompts: Sequence[str]) -> list[tuple[int, int]]:
    """Where in ``text`` a start of any of ``prompts``, ``_FRAGMENT`` characters or longer, stands:
    one ``(start, end)`` span for each place some prompt's start stands at, as long as the longest
    of them goes on there. Only prompts whose first ``_FRAGMENT`` characters stand somewhere in
    ``text`` are kept, each cut to ``text``'s length (no echo is longer) and kept once, in order:
    the prompt that goes on furthest as ``text`` does from a place is one of the two around where
    ``text`` from there would stand among them, found by bisection. So the work is each prompt's
    start read once, and for each place of ``text`` where one starts one bisection among those
    kept, whose comparisons read as far as the echo there goes (``_scrub``'s callers cut ``text``)."""
    heads = [text[i : i + _FRAGMENT] for i in range(len(text) - _FRAGMENT + 1)]
    shown = set(heads)
    echoed = sorted({prompt[: len(text)] for prompt in prompts if prompt[:_FRAGMENT] in shown})
    if not echoed:
        return []
    starts = {prompt[:_FRAGMENT] for prompt in echoed}
    longest = max(map(len, echoed))
    spans = []
    for i, head in enumerate(heads):
        if head in starts:
            here = text[i : i + longest]
            at = bisect.bisect_left(echoed, here)
            end = max(_common(here, prompt) for prompt in echoed[max(at - 1, 0) : at + 1])
            spans.append((i, i + end))
    return spans


def _escaped_runs(text: str, forms: Sequence[str]) -> list[tuple[int, int]]:
    """Where in ``text`` a start of any of ``forms`` (as ``repr`` writes a prompt or the key,
    ``_repr_texts``) stands that writes ``_FRAGMENT`` characters or more, as ``(start, end)``
    spans (``_prompt_runs``), each ending where a character written ends (``_written_starts``).
    Until a regression review of R91b a run was measured in the characters of the escapes, so
    one letter was enough (``\\xd0\\x9f`` is eight, for ``П``), and a backend's own header line
    that shared its first letter with the prompt was redacted there, the marker cutting an escape
    in two (``X-Error: [redacted]1\\x80\\xd0\\xb5``).

    A run that reaches the end of ``text`` (what the scrub reads), or a quote right after it
    (the end of a ``repr`` that a parser cut, aiohttp's quoting only the part of the line that
    came in one read), is redacted whatever it writes, to the end it reaches: the echo may go on
    past what was read. Until a regression review of R91c such a run under 8 characters was
    quoted, up to 7 CJK characters of a prompt whose echo began just before a cut."""
    spans = _prompt_runs(text, forms)
    if not spans:
        return []
    starts = _written_starts(text)
    kept = []
    for start, end in spans:
        first, last = bisect.bisect_left(starts, start), bisect.bisect_right(starts, end) - 1
        if end == len(text) or text[end] in "'\"":
            if starts[first] < end:
                kept.append((starts[first], end))
        elif last - first >= _FRAGMENT:
            kept.append((starts[first], starts[last]))
    return kept


_ESCAPE = re.compile(r"(\\x[89ab][0-9a-f])|\\(?:x[0-9a-f]{2}|u[0-9a-f]{4}|U[0-9a-f]{8}|.)|.", re.DOTALL)
"""One character of ``text`` as ``repr`` writes it, or one byte of it (an escape ``\\xd0``), the
byte that goes on a character of UTF-8 (``\\x80`` to ``\\xbf``) in the first group."""


def _written_starts(text: str) -> list[int]:
    """Where in ``text`` each character that ``repr`` wrote starts, and its end: an escape and the
    escapes of the bytes that go on its character of UTF-8 are one (a byte from ``\\x80`` to
    ``\\xbf`` of Latin-1, which they may be too, is taken for one that goes on)."""
    return [found.start() for found in _ESCAPE.finditer(text) if found[1] is None] + [len(text)]


def _common(text: str, other: str) -> int:
    """How many characters ``text`` and ``other`` start with alike, measured by halving."""
    low, high = 0, min(len(text), len(other))  # text goes on as other[:low] does
    while low < high:
        middle = (low + high + 1) // 2
        if text.startswith(other[low:middle], low):
            low = middle
        else:
            high = middle - 1
    return low


def _prompt_texts(payload: Mapping[str, Any] | None) -> list[str]:
    """The texts of the request's messages that ``_scrub`` redacts: each ``_FRAGMENT`` characters
    or longer, as sent and as JSON writes it (an echo inside a JSON body keeps its escapes), with
    characters past ASCII as they are (FastAPI's, vLLM's) and escaped (Python's ``json`` by
    default, Flask's), each text once however many messages hold it (until review R89 a body of
    N messages alike gave N texts alike, and ``_scrub`` looked for each). None for no payload (a
    call without a body). A message's texts are its content (a text, or the ``text`` of each of
    its parts), its ``reasoning`` (vLLM's name now), ``reasoning_content`` and ``refusal``, and
    the ``arguments`` of each of its ``tool_calls`` and of its ``function_call`` (deprecated) (model output built from the user's data: until review R93 a backend's 400
    echoing them was quoted, while the gate keeps the same values out of the audit log)."""
    messages = payload.get("messages") if payload is not None else None
    found: dict[str, None] = {}
    seen: set[str] = set()
    for message in messages if isinstance(messages, list) else ():
        for text in _message_texts(message):
            if isinstance(text, str) and len(text) >= _FRAGMENT and text not in seen:
                seen.add(text)
                found.update(dict.fromkeys(_written(text)))
    return list(found)


def _message_texts(message: object) -> list[object]:
    """The values of ``message`` (one of a request's ``messages``, of any shape) that may hold a
    text of the prompt (``_prompt_texts`` keeps those that are text)."""
    if not isinstance(message, Mapping):
        return []
    content = message.get("content")
    parts = content if isinstance(content, list) else [content]
    texts = [part.get("text") if isinstance(part, Mapping) else part for part in parts]
    texts += [message.get("reasoning"), message.get("reasoning_content"), message.get("refusal")]
    calls = message.get("tool_calls")
    functions = (
        [call.get("function") if isinstance(call, Mapping) else None for call in calls]
        if isinstance(calls, list)
        else []
    )
    # The deprecated ``function_call`` carries what ``tool_calls`` do (a regression review of R93).
    functions.append(message.get("function_call"))
    texts += [function.get("arguments") for function in functions if isinstance(function, Mapping)]
    return texts


def _written(text: str) -> tuple[str, ...]:
    """``text`` as sent and as JSON writes it, non-ASCII characters as they are and escaped: one
    form only where JSON writes it as it stands (printable ASCII, no quote nor backslash), as
    most messages are, which spares a body of many short messages two encodings of each."""
    if text.isascii() and text.isprintable() and '"' not in text and "\\" not in text:
        return (text,)
    return text, json.dumps(text, ensure_ascii=False)[1:-1], json.dumps(text)[1:-1]


_PAST_LATIN_1 = re.compile("[^\x00-\xff]")
"""A character that Latin-1 has not."""


def _repr_texts(seen: str, prompts: Sequence[str], key: str | None) -> list[str]:
    """The forms other than as sent in which ``repr`` writes each of ``prompts`` (``_prompt_texts``)
    and ``key`` (``_repr_written``), that ``seen`` (the start of a failure's text that ``_scrub``
    reads) may hold: what an HTTP parser's refusal quotes of the line it refused (h11's
    ``bytearray(b'...')``, aiohttp's ``b'...'``, its pure-Python parser's ``'...'``), where
    neither an echo past ASCII nor one holding a backslash reads as sent. The key so written is
    looked for as a prompt is, by its start: a key holding a quote or a backslash is rare, and
    ``_scrub`` looks for one key's pieces.

    None where ``seen`` holds no backslash, with which every escape that makes a form differ
    starts, or no quote; the forms of bytes only where it holds ``b'`` or ``b"``: a transport
    failure that quotes nothing (a refused connection) costs nothing here. Only the texts whose
    first ``_FRAGMENT`` characters stand in ``seen`` as sent, or whose form's first ``_FRAGMENT``
    characters do (a run that reaches a cut is redacted however few characters it writes,
    ``_escaped_runs``), are written, each cut to ``seen``'s length first, as no echo
    in ``seen`` holds more of it. Until a regression review of R91b every form of every whole
    message was written, a character at a time, on every transport failure: a refused connection
    with a conversation of 2 MB past ASCII held the event loop 2.6 s."""
    if "\\" not in seen or ("'" not in seen and '"' not in seen):
        return []
    of_bytes = "b'" in seen or 'b"' in seen
    starting: dict[str, list[str]] = {}
    for text in [*prompts, key or ""]:
        if len(text) >= _FRAGMENT:
            starting.setdefault(text[:_FRAGMENT], []).append(text[: len(seen)])
    forms: list[str] = []
    for start, texts in starting.items():
        if any(form[:_FRAGMENT] in seen for form in [start, *_repr_written(start, of_bytes)]):
            for text in texts:
                forms += _repr_written(text, of_bytes)
    return list(dict.fromkeys(forms))


def _repr_written(text: str, of_bytes: bool) -> list[str]:
    """``text`` as ``repr`` writes it within a quote of text and, where ``of_bytes``, within a
    quote of its UTF-8 bytes and of its Latin-1 bytes (of its start up to a character Latin-1 has
    not, where that is ``_FRAGMENT`` long: a header value as Python's ``http.server`` writes it,
    which httpx and aiohttp read as the ``Content-Encoding`` path does,
    ``_latin_1_where_not_utf_8``; until a regression review of R91b such an echo was quoted, a
    card number after ``Résumé``), each with a quote ``'`` escaped and bare (``repr`` leaves it
    bare only where the whole it quotes holds no ``"``, which it then quotes with): the forms
    other than ``text`` itself, none for printable ASCII without a quote ``'`` or a backslash, as
    most texts are. Each form is one call of ``repr``, given a ``"`` more so that it quotes with
    ``'``."""
    if text.isascii() and text.isprintable() and "'" not in text and "\\" not in text:
        return []
    written = [repr(text + '"')[1:-2]]
    if of_bytes:
        written.append(repr(text.encode("utf-8", "replace") + b'"')[2:-2])
        past = _PAST_LATIN_1.search(text)
        latin_1 = text if past is None else text[: past.start()]
        if len(latin_1) >= _FRAGMENT and not latin_1.isascii():  # else a start of the UTF-8 form
            written.append(repr(latin_1.encode("latin-1") + b'"')[2:-2])
    if "'" in text:
        written += [form.replace("\\'", "'") for form in written]
    return [form for form in written if form != text]


def _quoted_echo(
    value: object, request: Mapping[str, Any] | None, limit: int = 80, *, key: str | None = None
) -> str:
    """``value``, taken from a backend's answer (a finish reason, a usage count, a choice index),
    as a refusal quotes it (``quoted``), scrubbed of ``key`` (the backend's API key, ``None``
    without one) and of the prompt of ``request`` (``_prompt_texts``) before it is cut: each text
    in it, alone or held in a list or an object (a key of it too), as it came, before ``repr``
    escapes it (``_echo_written``). Until review R91 the API key was scrubbed after the cut, from
    the message (``BackendClient._shown``): a start of it shorter than ``_FRAGMENT`` characters at
    the cut, or a piece shorter than twice that, was quoted. Until review R90 a value that is no text
    was written with ``repr`` first and scrubbed after: ``repr`` writes a no-break space as
    ``\\xa0`` (JSON as ``\\u00a0``), a control character as ``\\x01`` and a quote as ``\\'``
    beside the other kind, so an echo in a list was redacted only up to that character and the
    rest of the prompt quoted. The prompt is scrubbed where the backend's words enter a message,
    never from the message whole: until a regression review of R89 ``BackendClient._shown``
    scrubbed it from all of it, agentgate's own words too (the prompt ``request 0: hello`` made a
    stream's failure read ``no first token within 0.5s of the [redacted](first_token_s)``)."""
    prompts = _prompt_texts(request)
    if not prompts and not key:
        return quoted(value, limit)
    text = _echo_written(value, key, prompts, limit)
    return text if len(text) <= limit else _cut_whole(text, limit - 3) + "..."


def _echo_written(value: object, key: str | None, prompts: Sequence[str], limit: int) -> str:
    """``value`` (a value of JSON: text, a list, an object, a number) as ``repr`` writes it, each
    text in it scrubbed of ``key`` and ``prompts`` (``_scrub``) as it came, its first ``16 * limit``
    characters (an echo cut in two would not be found; ``repr`` escapes make each character up to
    ten), before ``repr`` escapes it; what is no text nor a container as ``quoted`` writes it,
    scrubbed so (a card number echoed as a JSON number: until a regression review of R90 it was
    quoted whole, ``prompt_tokens ... 1000000000: 4111111111111111``), and a float of a whole
    number also by its integer text (``_echoed_as_integer``). Written only until it is past
    ``limit`` characters, the most a refusal quotes: a list of a
    million texts costs what its first few do. A value nested deeper than Python's recursion
    limit is named by its type, as ``quoted`` names it."""
    parts: list[str] = []
    size = 0

    def write(piece: str) -> None:
        nonlocal size
        parts.append(piece)
        size += len(piece)

    def walk(item: object) -> None:
        if isinstance(item, str):
            write(repr(_scrub_start(item, key, prompts, 16 * limit)))
        elif isinstance(item, Mapping):
            write("{")
            for count, (name, each) in enumerate(item.items()):
                if size > limit:
                    return
                write(", " if count else "")
                walk(name)
                write(": ")
                walk(each)
            write("}")
        elif isinstance(item, list):
            write("[")
            for count, each in enumerate(item):
                if size > limit:
                    return
                write(", " if count else "")
                walk(each)
            write("]")
        elif _echoed_as_integer(item, key, prompts):
            write(_MARKER)
        else:  # a number, ``True``, ``None``: its ``repr`` is searched as a text is
            write(_scrub(quoted(item, 16 * limit), key, prompts))

    try:
        walk(value)
    except RecursionError:
        return f"a {type(value).__name__} nested too deep to write"
    return "".join(parts)


def _echoed_as_integer(item: object, key: str | None, prompts: Sequence[str]) -> bool:
    """Whether ``item`` is a float of a whole number whose integer text holds a start of one of
    ``prompts`` or a piece of ``key`` (``_scrub``): orjson reads an integer too big for 64 bits as a float, whose
    ``repr`` (``9.876543210987654e+19``) no longer reads as the digits the backend wrote. Its
    integer text holds them up to the float's precision only, the digits after are the float's
    own, so such a number is redacted whole. Until a regression review of R90b it was quoted as
    its ``repr``, 16 digits of a prompt starting ``98765432109876543210`` with them."""
    if not isinstance(item, float) or not item.is_integer():  # ``inf`` and ``nan`` are not
        return False
    digits = f"{item:.0f}"
    return _scrub(digits, key, prompts) != digits
