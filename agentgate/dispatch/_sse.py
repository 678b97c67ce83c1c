"""Reading a streamed answer (OpenAI's server-sent events): its lines (``split_lines``), each
event's chunk (``_parse_chunk``), and what a chunk brings (``carries_output``, ``_advances``,
``_answer_chars``) against the bounds a stream is held to (``MAX_LINE_BYTES``,
``MAX_CHARS_PER_TOKEN``), and the usage that counts what it brought (``_StreamUsage``)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from agentgate._json import MAX_DEPTH
from agentgate.dispatch._answers import (
    ChatChunk,
    Usage,
    _finish_reason,
    _reject_error,
    _usage,
    output_limit,
    reports_usage,
)
from agentgate.dispatch._redaction import _cut_whole, _quoted_echo, _scrub_start
from agentgate.errors import BackendFailed, UsageUnreadable

MAX_LINE_BYTES = 1 << 20
"""The longest line of a streamed answer held (an SSE event with every token's log-probabilities
is a few kB): a longer one fails the stream as it arrives, never buffered whole."""
MAX_CHARS_PER_TOKEN = 1024
"""How many characters of a streamed answer (content, tool call fragments, reasoning) one token of
``max_tokens`` may bring before the stream is taken for a backend that ignores ``max_tokens``:
a bound against a stream without end, set some hundred times above the few characters a token
usually decodes to, so that an answer keeping to its limit is not cut."""
LINES_PER_TURN = 256
"""The most lines ``split_lines`` hands out before it lets the event loop run once (``await
asyncio.sleep(0)``): aiohttp's ``iter_any`` and httpx's ``aiter_raw`` hand over what is already
buffered without suspending, so a backend flooding keep-alive comments or empty events would
otherwise hold the loop for as long as its lines last. 256 lines, each costing the stream's
reader a few microseconds, bound that hold to about a millisecond, while one turn of the loop
(tens of microseconds) spread over 256 lines keeps the cost per line flat; and a count down from
256 stays within the integers Python keeps cached, so counting allocates nothing per line."""
_SSE_IGNORED = (":", "event:", "id:", "retry:")
"""Stream lines that carry no chunk: SSE comments and the fields other than ``data``."""


async def split_lines(
    pieces: AsyncIterator[bytes], limit: int, too_long: Callable[[str], Exception] = ValueError
) -> AsyncIterator[str]:
    """The lines of a body read as ``pieces``, decoded as UTF-8, their ends removed: ``\\r\\n``,
    ``\\n`` or a bare ``\\r``, as the SSE format allows all three (a ``\\r`` that ends one piece and
    a ``\\n`` that starts the next are one line end, not two); raises ``too_long(message)`` once a
    line passes ``limit`` bytes, as it arrives (httpx's ``aiter_lines`` holds a line whole, however
    long), and so for a line that arrives whole in one piece (until review R66 it was yielded
    whatever its length: httpx decompresses a few kB of gzip into one piece of megabytes).
    ``pieces`` is closed at the end, when it is an async generator. Used by every client
    path: the dispatcher's httpx and aiohttp clients and the gateway's pool.

    Linear in the bytes read: each piece is searched once for each of the two line end bytes,
    from where the unfinished line before it ended, and each line copied once (cutting the rest
    of the buffer off after every line copied the piece once per line: a piece of 256 KiB of
    short lines held the event loop for seconds).

    Lets the event loop run after every ``LINES_PER_TURN`` lines, whatever they are (comments and
    empty lines too, which the stream's reader skips): until review R92 a backend flooding
    ``":"`` lines as fast as loopback carried them held the loop, every other call, the gateway
    and its health probes, for 1-2 s at a time, and a stream's ``first_token_s`` fired that late.
    """
    buffer = bytearray()
    until_turn = LINES_PER_TURN
    after_cr = False  # the last piece ended with a \r: a \n starting this one belongs to it
    try:
        async for piece in pieces:
            if not piece:
                continue  # an empty piece between a \r and its \n parts neither
            search = len(buffer)  # the unfinished line held has no line end
            buffer += piece
            if after_cr and buffer[search : search + 1] == b"\n":
                del buffer[search]
            after_cr = False
            begin = 0
            # The next \n and \r at or after ``search``; -1 once there is none left in the buffer.
            lf = buffer.find(b"\n", search)
            cr = buffer.find(b"\r", search)
            while lf >= 0 or cr >= 0:
                end = lf if cr < 0 or 0 <= lf < cr else cr
                after = end + 1
                if end == cr:
                    if after == len(buffer):
                        after_cr = True
                    elif buffer[after] == 0x0A:  # \r\n: one line end
                        after += 1
                if end - begin > limit:  # whole in one piece (a decompressed one may be megabytes)
                    raise too_long(f"a streamed line is over {limit} bytes")
                yield buffer[begin:end].decode("utf-8", "replace")
                until_turn -= 1
                if not until_turn:
                    until_turn = LINES_PER_TURN
                    await asyncio.sleep(0)
                begin = search = after
                if 0 <= lf < search:
                    lf = buffer.find(b"\n", search)
                if 0 <= cr < search:
                    cr = buffer.find(b"\r", search)
            del buffer[:begin]
            if len(buffer) > limit:
                raise too_long(f"a streamed line is over {limit} bytes")
        if buffer:
            yield buffer.decode("utf-8", "replace")
    finally:
        if isinstance(pieces, AsyncGenerator):
            await pieces.aclose()


def _parse_chunk(
    backend: str,
    data: str,
    key: str | None = None,
    asked: int = 1,
    request: Mapping[str, Any] | None = None,
) -> ChatChunk | None:
    """One SSE event's chunk (``None`` for an event with neither choices nor usage; a usage
    without ``completion_tokens`` counts as none), for a call that asked for ``asked`` choices;
    an error event's message is quoted scrubbed of ``key`` and of ``request``'s prompt
    (``_reject_error``).

    orjson, not ``json``: it refuses ``NaN``, ``Infinity`` and numbers beyond float range, and
    nesting past 1024 levels, as a ``ValueError`` (``json`` would read ``1e999`` as infinity and
    overflow the stack on a line of a million ``[``).
    Raises ``BackendFailed`` for a malformed event (its choices as ``_checked_choices`` refuses
    them, or nested past ``MAX_DEPTH`` levels: ``_within_depth``): ``UsageUnreadable`` for one
    whose usage is not token counts.
    """
    try:
        event = orjson.loads(data)
        _within_depth(event)
        _reject_error(backend, event, key, request)
        # vLLM sends ``"usage": null`` on every chunk but the last: a null usage is none. So is
        # one without a completion count (charged as nothing generated, its output would go free:
        # the stream is then settled as one that reported no usage, at its reservation), or
        # without a prompt count, as a whole answer's is (``reports_usage``; until review R70 a
        # stream read it as 0 prompt tokens reported, and said so of its charge). A usage that is
        # no object is garbage, as in a whole answer (``_usage``): until review R83 one that was
        # falsy (``0``, ``[]``, ``""``, ``false``) was read as none and passed on to a caller that
        # asked for usage, as its usage.
        raw = event.get("usage")
        try:
            usage = _usage(raw, request, key) if raw is not None else None
        except ValueError as exc:
            # The backend ran the call (a usage counts what it did), what it cost unreadable: not
            # a failure to send it elsewhere, even before any output (until review R69 the next
            # backend ran it again, the caller charged for no run), as for a whole answer's.
            raise UsageUnreadable(f"{backend}: malformed stream event: {exc}") from None
        if usage is not None and not reports_usage(raw):
            usage = None
        # Absent or null alone is no choice (vLLM's last chunk, of the usage, has ``[]``): until
        # review R88c a falsy one that is no list (``false``, ``0``, ``{}``, ``""``) was read as
        # none, and an event holding a usage beside it was passed on as it came.
        raw_choices = event.get("choices")
        choices = _checked_choices([] if raw_choices is None else raw_choices, "delta", asked, request, key)
        if not choices:
            return ChatChunk("", None, usage, event=event, backend=backend, size=len(data)) if usage else None
        choice = choices[0]
        delta = choice.get("delta") or {}  # an object, or absent or null (``_checked_choices``)
        # Its content, tool calls and finish_reason were checked with the others' (``_checked_choices``).
        return ChatChunk(
            _content(delta), choice.get("finish_reason"), usage, _tool_calls(delta), event, backend, len(data)
        )
    except (ValueError, KeyError, IndexError, TypeError, AttributeError) as exc:
        raise BackendFailed(f"{backend}: malformed stream event: {exc}") from None


def _within_depth(event: object) -> None:
    """Return if ``event`` is nested at most ``MAX_DEPTH`` (254) levels deep, orjson's bound for
    writing JSON; raises ``ValueError`` if not. orjson reads 1,024 levels, but an event is passed
    on encoded again (the gateway's ``_sse``), as a JSON answer is, which is refused past that
    bound (the gateway's ``_as_read``): until review R88 an event nested ~990 deep was read, then
    overflowed the stack where the gateway encoded it again (an internal error, the call charged
    its reservation, where a JSON answer so nested is released). No chunk is nested more than a
    few levels (a token's top log-probabilities, its deepest field, are 8 down).

    orjson writing the event is the check (a fraction of reading it): what orjson read, it refuses
    to write for its depth alone (an integer past 64 bits is read as a float, a lone surrogate not
    at all)."""
    try:
        orjson.dumps(event)
    except orjson.JSONEncodeError:
        raise ValueError(f"it is nested more than {MAX_DEPTH} levels deep") from None


def _content(part: Mapping[str, Any]) -> str:
    """The ``content`` of a whole answer's ``message`` or a stream event's ``delta``: its text,
    ``""`` when absent or null; raises ``TypeError`` for any other value, falsy ones included
    (``false``, ``0``, ``[]``, ``{}``: until review R88 each was read as the empty answer)."""
    content = part.get("content")
    if content is None:
        return ""
    if not isinstance(content, str):
        raise TypeError("content is not a string")
    return content


def _tool_calls(delta: Mapping[str, Any]) -> tuple[Mapping[str, Any], ...]:
    """The ``tool_calls`` fragments of a stream event's ``delta``: none when absent or null;
    raises ``TypeError`` for any value but a list of objects (until review R88 a falsy one that is
    no list, ``{}``, ``0``, ``false``, passed as none, and on to the caller in the event)."""
    calls = delta.get("tool_calls")
    if calls is None:
        return ()
    if not isinstance(calls, list) or not all(isinstance(call, dict) for call in calls):
        raise TypeError("tool_calls is not a list of objects")
    return tuple(calls)


def _listed_tool_calls(message: Mapping[str, Any]) -> None:
    """Return if a whole answer's ``message.tool_calls`` is a list or absent or null; raises
    ``TypeError`` for any other value, falsy or not (until review R88c ``{}``, ``0``, ``false`` and
    ``{"a": 1}`` were passed on in the body, where a stream's were refused: ``_tool_calls``). The
    calls in the list are the caller's to parse, as LangChain's OpenAI model does: one that is not
    an object is an ``invalid_tool_calls`` entry of ``DispatchedChatModel``'s answer, not a
    failure of the backend (a stream's fragment must be an object to be merged by its index)."""
    if (calls := message.get("tool_calls")) is not None and not isinstance(calls, list):
        raise TypeError("tool_calls is not a list")


def _is_choice(choice: object, part: str) -> bool:
    """Whether ``choice`` is a choice of OpenAI's shape: an object whose ``part`` (a stream's
    ``delta``, an answer's ``message``) is an object, or absent or null. Every choice is checked,
    not the first alone: the gateway passes the backend's answer on whole, and until review R57
    one whose second choice was ``5`` reached the caller as a 200 (the OpenAI SDKs build no
    choice of it: the caller's code failed on it)."""
    return isinstance(choice, Mapping) and ((value := choice.get(part)) is None or isinstance(value, Mapping))


def _checked_choices(
    choices: object,
    part: str,
    asked: int,
    request: Mapping[str, Any] | None = None,
    key: str | None = None,
) -> list[Mapping[str, Any]]:
    """``choices``, of a whole answer (``part``: ``message``) or of a stream event (``delta``) for
    a call that asked for ``asked``; raises ``TypeError`` unless each is a choice (``_is_choice``)
    whose content is text or none (``_content``), whose streamed tool calls are a list of objects
    or none (``_tool_calls``), an answer's a list or none (``_listed_tool_calls``), and whose
    ``finish_reason`` is a reason (``_finish_reason``),
    ``ValueError`` for more than
    ``asked`` of them or an ``index`` that is not one of the ``asked`` (0 to ``asked`` - 1;
    absent or null passes). One rule for both: until review R86 a stream event was held to
    neither the count nor the index, nor a choice after the first to its reason (a second choice
    of a call of one, with a reason of 60,000 characters holding an escape, reached the caller),
    and a whole answer checked the reason of its first choice only; until review R88 the content
    and tool calls of the first choice alone were checked (a second choice's ``false`` or ``{}``
    was passed on). A value quoted is scrubbed of the API key ``key`` and the prompt of
    ``request`` (``_quoted_echo``)."""
    if not isinstance(choices, list) or not all(_is_choice(choice, part) for choice in choices):
        raise TypeError(f"choices is not a list of objects, each with a {part} object or none")
    if len(choices) > asked:
        # Until review R62 100,000 choices for a call of one were an answer.
        raise ValueError(f"{len(choices)} choices for a call that asked for {asked}")
    for choice in choices:
        index = choice.get("index")
        if index is not None and (
            isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < asked
        ):
            raise ValueError(
                f"choice index {_quoted_echo(index, request, key=key)} for a call that asked for {asked} choices"
            )
        body = choice.get(part) or {}  # an object, or absent or null (``_is_choice``)
        _content(body)
        if part == "delta":
            _tool_calls(body)
        else:
            _listed_tool_calls(body)
        _finish_reason(choice, request, key)
    return choices


def carries_output(chunk: ChatChunk) -> bool:
    """Whether ``chunk`` passes on any of the answer: a character of it or more
    (``_answer_chars``: content, tool call ids, names and arguments, a reasoning model's
    ``reasoning_content``: tokens generated and sent, charged as output), the rule ``_advances``
    counts a chunk's text by. A delta whose values hold no text (the role alone, a tool call
    fragment that is its ``index`` alone, a number beside empty content) carries none: until
    review R88 any value but the role counted, so a stream that broke after ``{"tool_calls":
    [{"index": 0}]}`` was not failed over, though its caller had nothing it could use."""
    return _answer_chars(chunk) > 0


@dataclass(slots=True)
class _Seen:
    """What a stream has brought so far that it brings once: a finish reason, a usage."""

    finished: bool = False
    reported: bool = False


def counts_answer(usage: Usage, chars: int, before: Usage | None = None) -> bool:
    """Whether ``usage`` can be the count of an answer of ``chars`` characters (``_answer_chars``,
    ``message_chars``): at least one output token for each ``MAX_CHARS_PER_TOKEN`` of them (an
    answer of any text took a token at least), and, for a usage said again in one stream, no
    fewer prompt or output tokens than the one ``before`` it (usage counts the whole stream so
    far: vLLM's continuous usage only grows). Until review R66 a usage was charged whatever it
    said of its answer: five characters streamed, then ``completion_tokens: 0``, went free, and
    a usage said a second time, lower, was the one charged."""
    if chars > usage.completion_tokens * MAX_CHARS_PER_TOKEN:
        return False
    return before is None or (
        usage.prompt_tokens >= before.prompt_tokens and usage.completion_tokens >= before.completion_tokens
    )


@dataclass(slots=True)
class _StreamUsage:
    """The usage a stream has reported that counts all its output so far (``see`` each chunk): a
    usage counts the output sent with it and before it (OpenAI's comes last, vLLM's continuous
    one with each chunk), so output past the last one reported leaves none (``usage`` None,
    ``stale`` True) until another is reported; so does a usage that cannot count that output
    (``counts_answer``: fewer output tokens than its characters need, or fewer tokens than a
    usage reported before it). What the gateway charges (a stale usage: the reservation) and
    what its token counter counts (a stale usage: nothing) both read this."""

    usage: Usage | None = None
    stale: bool = False
    chars: int = 0
    """The characters of answer seen so far (``_answer_chars``)."""
    highest: Usage | None = None
    """The highest counts reported so far (each count's own highest), ``None`` before any."""

    def see(self, chunk: ChatChunk) -> None:
        chars = _answer_chars(chunk)  # ``carries_output`` is ``chars > 0``
        self.chars += chars
        if (reported := chunk.usage) is not None:
            if counts_answer(reported, self.chars, self.highest):
                self.usage, self.stale = reported, False
            else:
                self.usage, self.stale = None, True
            if (highest := self.highest) is not None:
                reported = Usage(
                    max(reported.prompt_tokens, highest.prompt_tokens),
                    max(reported.completion_tokens, highest.completion_tokens),
                )
            self.highest = reported
        elif self.usage is not None and chars > 0:
            self.usage, self.stale = None, True


def _advances(chunk: ChatChunk, seen: _Seen, chars: int) -> bool:
    """Whether ``chunk``, which brings ``chars`` characters of the answer (``_answer_chars``),
    carries any of it: one character or more, or the stream's first finish reason or first usage
    (``seen`` is updated). A chunk that carries none (an empty delta, the role alone: what an
    engine opens with; a delta whose values hold no text, such as a tool call fragment that is its
    ``index`` alone) passes on, but is chatter: it does not push a stream's deadline out; nor does
    a finish reason or usage said again. Until review R54 a backend repeating
    ``finish_reason: stop``, or its usage, and never ``[DONE]`` held the call for ever, and until
    review R57 one repeating a delta without text (``{"tool_calls": [{"index": 0}]}``) did: the
    answer limit counts none of them."""
    fresh = (bool(chunk.finish_reason) and not seen.finished) or (
        chunk.usage is not None and not seen.reported
    )
    seen.finished = seen.finished or bool(chunk.finish_reason)
    seen.reported = seen.reported or chunk.usage is not None
    return fresh or chars > 0


def _answer_limit(payload: Mapping[str, Any]) -> int | None:
    """The most characters a stream for ``payload`` may bring: ``MAX_CHARS_PER_TOKEN`` for each
    token of its output limit (``output_limit``, which raises ``DispatchError`` for one that is no
    whole number); ``None`` when it names none (the backend's own default applies, and nothing
    here knows it). Until review R61 a float limit, which vLLM honours (``max_tokens: 1.0`` as
    1), was streamed without any bound, and so was text (``"100"``) the router read as a limit."""
    tokens = output_limit(payload)
    return None if tokens is None else tokens * MAX_CHARS_PER_TOKEN


def _answer_chars(chunk: ChatChunk) -> int:
    """The characters of the answer ``chunk`` carries: the text of every value in its choices'
    deltas but the role (content, tool call names and arguments, a reasoning model's
    ``reasoning_content``), counted however the engine nests them."""
    choices = chunk.event.get("choices")
    if isinstance(choices, list):
        return _choice_chars(choices, "delta")
    return text_chars([chunk.content, list(chunk.tool_calls)])  # a chunk made without its event


def message_chars(body: Mapping[str, Any]) -> int:
    """The characters of a whole (not streamed) answer ``body``: as ``_answer_chars`` counts a
    chunk's, of its choices' messages."""
    choices = body.get("choices")
    return _choice_chars(choices, "message") if isinstance(choices, list) else 0


def _choice_chars(choices: list[object], part: str) -> int:
    """The characters of the text of every value in ``choices``' ``part`` (``delta``, ``message``)
    but the role."""
    pending: list[object] = []
    for choice in choices:
        if isinstance(choice, Mapping) and isinstance(values := choice.get(part), Mapping):
            pending.extend(value for name, value in values.items() if name != "role")
    return text_chars(pending)


def text_chars(pending: list[object]) -> int:
    """The characters of every string in ``pending``, however nested in objects and lists, each
    object and list counted once: one may hold itself (a hand-made LangChain answer's tool call
    arguments, ``integrations.langgraph``), and until review R88 the count never ended then.
    Each object and list counted is kept, by its id, until the count ends: an id is unique only
    among live objects, and a mapping that makes its values on each read hands objects freed once
    counted, so that until review R88b the next one could take a counted one's id and be passed
    over."""
    count = 0
    seen: dict[int, object] = {}
    while pending:
        value = pending.pop()
        if isinstance(value, str):
            count += len(value)
        elif not isinstance(value, Mapping | list | tuple) or id(value) in seen:
            continue
        else:
            seen[id(value)] = value
            pending.extend(value.values() if isinstance(value, Mapping) else value)
    return count


def _line_shown(line: str, key: str | None, prompts: Sequence[str] = ()) -> str:
    """What a stream's line that is not an SSE event is shown as: a JSON object (an NDJSON
    stream, Ollama's native ``{"message": {"content": ...}}``: its values are generated text) by
    its first keys only, anything else (a proxy's words, an HTML page) as its first 80
    characters, the key and ``prompts`` (``_prompt_texts``) redacted before it is cut and written
    with ``repr`` (which escapes what would hide an echoed prompt from a later scrub)."""
    try:
        value = orjson.loads(line[:65536]) if line.startswith("{") else None
    except orjson.JSONDecodeError:
        value = None
    if isinstance(value, dict):
        keys = ", ".join(
            repr(_cut_whole(_scrub_start(str(k), key, prompts, 1024), 32)) for k in list(value)[:8]
        )
        return f"a JSON object with keys {keys} (an NDJSON stream? the backend must speak OpenAI's SSE)"
    return repr(_cut_whole(_scrub_start(line, key, prompts, 1024), 80))
