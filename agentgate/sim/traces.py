"""Public request traces: the Azure LLM inference CSV and the Mooncake JSONL formats.

Both become ``TraceRequest`` values with arrival times in seconds from the first request. The
Mooncake ``hash_ids`` (one id per 512-token block, equal ids = equal prefix) become chained block
hashes; Azure rows carry no prefix information, so their hashes are unique per request.
"""

from __future__ import annotations

import csv
import hashlib
import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import BinaryIO

from agentgate._numbers import finite
from agentgate._shown import quoted
from agentgate.errors import InputError

MOONCAKE_BLOCK_TOKENS = 512
"""Tokens per ``hash_ids`` entry in the Mooncake traces."""

MAX_TRACE_TOKENS = 1 << 20
"""The most tokens a trace row's prompt or output may count (1,048,576: eight times Llama 3.1's
context, and far above every row of the published traces). An Azure row's block hashes are made
from its count (one per 512 tokens), so a row of ``1000000000000`` tokens asked for two billion of
them and took the loading process's memory (review R54)."""


@dataclass(frozen=True, slots=True)
class TraceRequest:
    """One request of a trace."""

    id: str
    arrival: float
    """Seconds from the start of the trace."""
    prompt_tokens: int
    output_tokens: int
    hashes: tuple[int, ...] = ()
    """Chained hashes of the prompt's blocks (``block_tokens`` each; the last may be partial)."""
    block_tokens: int = MOONCAKE_BLOCK_TOKENS
    session: str | None = None
    """The agent run or conversation the request belongs to, when known."""
    tenant: str = "default"
    priority: int = 1
    """0 = interactive (highest) ... larger = lower."""
    slo_ttft_s: float = 10.0
    """Time-to-first-token objective."""


def chain_hashes(ids: Iterable[object]) -> tuple[int, ...]:
    """Chained 63-bit hashes: block ``i``'s hash covers blocks ``0..i`` (equal hash = equal prefix)."""
    out: list[int] = []
    prev = b""
    for block_id in ids:
        digest = hashlib.blake2b(prev + repr(block_id).encode(), digest_size=8).digest()
        prev = digest
        out.append(int.from_bytes(digest, "big") >> 1)
    return tuple(out)


def load_trace(path: str | Path, limit: int | None = None) -> list[TraceRequest]:
    """Read an Azure CSV or Mooncake JSONL trace (chosen by suffix), first ``limit`` requests
    (``None``: all of them).

    Raises ``InputError`` naming the file and line for unreadable or malformed rows, and for a
    ``limit`` that is not ``None`` or an integer of 0 or more (until review R93 ``"2"`` was a bare
    ``TypeError`` from the read loop, ``-1`` read nothing and ``1.5`` read two rows).
    """
    p = Path(path)
    if p.suffix == ".csv":
        return load_azure(p, limit)
    if p.suffix in (".jsonl", ".json"):
        return load_mooncake(p, limit)
    raise InputError(f"{p}: unknown trace format (expected .csv or .jsonl)")


def _check_limit(limit: object) -> None:
    """Refuse a ``limit`` of requests that is not ``None`` or an integer of 0 or more."""
    if limit is not None and not (isinstance(limit, int) and not isinstance(limit, bool) and limit >= 0):
        raise InputError(f"limit must be None or an integer of 0 or more, not {quoted(limit, 40)}")


def load_mooncake(path: Path, limit: int | None = None) -> list[TraceRequest]:
    """Read a Mooncake JSONL trace (``timestamp`` ms, ``input_length``, ``output_length``, ``hash_ids``)."""
    _check_limit(limit)
    out: list[TraceRequest] = []
    try:
        with path.open("rb") as fh:
            for lineno, line in enumerate(_text_lines(fh, path), 1):
                if limit is not None and len(out) >= limit:
                    break
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                    ids = row["hash_ids"]
                    if not isinstance(ids, list):
                        raise TypeError(f"hash_ids must be a list, not {ids!r:.40}")
                    prompt = _tokens(row["input_length"], "input_length")
                    _block_ids_of(ids, prompt)
                    req = TraceRequest(
                        id=f"r{lineno}",
                        arrival=_seconds(row["timestamp"], "timestamp") / 1000.0,
                        prompt_tokens=prompt,
                        output_tokens=_tokens(row["output_length"], "output_length"),
                        hashes=chain_hashes(ids),
                        session=f"s{ids[1]}" if len(ids) > 1 else None,
                    )
                except (ValueError, KeyError, TypeError, IndexError, RecursionError) as exc:
                    raise InputError(f"{path}:{lineno}: malformed trace row: {exc}") from None
                out.append(req)
    except OSError as exc:
        raise InputError(f"{path}: cannot read: {exc}") from None
    return _from_zero(out)


def load_azure(path: Path, limit: int | None = None) -> list[TraceRequest]:
    """Read an Azure LLM inference CSV (``TIMESTAMP``, ``ContextTokens``, ``GeneratedTokens``).

    A ``TIMESTAMP`` with no zone (the published trace's) is read on the trace's own clock (as
    UTC), never in the loading machine's zone, so that arrivals are the same everywhere; one with
    a zone, in its zone (until review R82 a stamp with a fraction of a second lost it: the text
    was cut at 26 characters, which ``fromisoformat`` has not needed since Python 3.11)."""
    _check_limit(limit)
    out: list[TraceRequest] = []
    try:
        with path.open("rb") as fh:
            reader = csv.DictReader(_text_lines(fh, path))
            try:
                for row in reader:
                    if limit is not None and len(out) >= limit:
                        break
                    lineno = reader.line_num  # the file's line: blank lines and quoted newlines count
                    try:
                        stamp = datetime.fromisoformat(row["TIMESTAMP"])
                        if stamp.tzinfo is None:
                            # The trace's clock, whatever the loading machine's zone: a naive
                            # time read as local shifted arrivals by an hour across a daylight
                            # saving change there (until review R66).
                            stamp = stamp.replace(tzinfo=UTC)
                        prompt = _tokens(int(row["ContextTokens"]), "ContextTokens")
                        req = TraceRequest(
                            id=f"r{lineno}",
                            arrival=stamp.timestamp(),
                            prompt_tokens=prompt,
                            output_tokens=_tokens(int(row["GeneratedTokens"]), "GeneratedTokens"),
                            hashes=chain_hashes(
                                (lineno, i) for i in range(-(-prompt // MOONCAKE_BLOCK_TOKENS))
                            ),
                        )
                    except (ValueError, KeyError, TypeError) as exc:
                        raise InputError(f"{path}:{lineno}: malformed trace row: {exc}") from None
                    out.append(req)
            except csv.Error as exc:  # the DictReader's line_num is not yet the failing row's
                raise InputError(f"{path}:{reader.reader.line_num}: malformed trace row: {exc}") from None
    except OSError as exc:
        raise InputError(f"{path}: cannot read: {exc}") from None
    return _from_zero(out)


def _text_lines(fh: BinaryIO, path: Path) -> Iterator[str]:
    """The lines of ``fh`` as text; ``InputError`` naming the first line that is not UTF-8.

    Decoded one line at a time: a text-mode file decodes ahead in blocks, so its
    ``UnicodeDecodeError`` belonged to no line and escaped as a traceback. A UTF-8 byte order mark
    opening the file (as Excel and PowerShell save a CSV) is dropped: until review R83 it was read
    as part of the first column's name, and an Azure trace so saved was refused as
    "malformed trace row: 'TIMESTAMP'".
    """
    for lineno, raw in enumerate(fh, 1):
        try:
            yield raw.decode("utf-8-sig" if lineno == 1 else "utf-8")
        except UnicodeDecodeError as exc:
            raise InputError(f"{path}:{lineno}: not UTF-8 text: {exc}") from None


def _tokens(value: object, column: str) -> int:
    """A token count: an integer from 0 to ``MAX_TRACE_TOKENS`` (a boolean or a fraction is no count)."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_TRACE_TOKENS:
        raise ValueError(
            f"{column} must be a whole number of tokens from 0 to {MAX_TRACE_TOKENS}, not {value!r:.40}"
        )
    return value


def _block_ids_of(ids: list[object], prompt_tokens: int) -> None:
    """Raise ``ValueError`` for more ``hash_ids`` than a prompt of ``prompt_tokens`` has blocks
    (one per ``MOONCAKE_BLOCK_TOKENS``, the last partial: every row of the published trace has
    exactly that many). The engine reads no id past the prompt, and each costs a hash: until
    review R60 a 15 MB row of five million ids for a 10-token prompt took 15 s and 430 MB to load."""
    blocks = -(-prompt_tokens // MOONCAKE_BLOCK_TOKENS)
    if len(ids) > blocks:
        raise ValueError(
            f"hash_ids has {len(ids)} block ids, but an input_length of {prompt_tokens} tokens has "
            f"{blocks} blocks of {MOONCAKE_BLOCK_TOKENS}"
        )


def _seconds(value: object, column: str) -> float:
    """A finite number: an arrival at infinity or NaN would never come, and the replay would wait for it.

    An integer too large for a float is no finite time either (``float`` raises ``OverflowError``
    for it, which is none of the errors the loaders name a line for).
    """
    if not finite(value):
        raise ValueError(f"{column} must be a finite number, not {value!r:.40}")
    return float(value)


def _from_zero(requests: list[TraceRequest]) -> list[TraceRequest]:
    if not requests:
        return requests
    requests.sort(key=lambda r: r.arrival)
    t0 = requests[0].arrival
    return [replace(r, arrival=r.arrival - t0) for r in requests]
