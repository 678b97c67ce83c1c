"""How long a line the command writes may be: an error line on standard error and a ``REFUSED:``
line on standard output each quote what they were given (a path, a key, a request id), which may
be 10,000 characters long. Both are cut by one rule, here (``shortened``); escaping is each
writer's own (``main._one_line``, ``_common.refusal``). Imports nothing, so that the error path of
a verb that loads little (``policy lint``) stays light."""

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
