"""How long a line the command writes may be: an error line on standard error and a ``REFUSED:``
line on standard output each quote what they were given (a path, a key, a request id), which may
be 10,000 characters long. Both are cut by one rule, here (``shortened``); escaping is each
writer's own (``one_line``, for error and warning lines; ``_common.refusal``). Imports nothing, so
that the error path of a verb that loads little (``policy lint``) stays light."""

from __future__ import annotations

LINE_HEAD, LINE_TAIL = 1000, 960
"""What a line longer than 2,000 characters keeps of its start and of its end."""


def shortened(line: str) -> str:
    """``line`` itself when it is at most 2,000 characters long (and a little more); a longer one
    loses its middle, not its end: the value quoted first is cut, and what is wrong with it, said
    last, is kept, with ``... (N characters not shown) ...`` between."""
    if len(line) <= LINE_HEAD + LINE_TAIL + 40:
        return line
    cut = len(line) - LINE_HEAD - LINE_TAIL
    return f"{line[:LINE_HEAD]} ... ({cut:,} characters not shown) ... {line[-LINE_TAIL:]}"


def one_line(text: str) -> str:
    """An error or a warning as one line of at most 2,000 characters (and the note of what was
    cut), safe on a terminal: white space runs made one space, and what could still move the
    cursor or reorder the text (escape sequences, bidi overrides from a hostile token quoted in the
    message) escaped. A longer line loses its middle, not its end (``shortened``: until review R59
    the end was cut, and the line was 2,000 characters of the value alone)."""
    from agentgate._shown import not_printable  # on the error path only: keeps --help light

    line = shortened(" ".join(text.split()))
    return "".join(c.encode("unicode_escape").decode("ascii") if not_printable(c) else c for c in line)
