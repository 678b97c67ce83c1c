"""How the broker's errors quote what a caller or an operator gave: bounded, on one line.

Apart from the value types (``_model``) so that the topology, which they import, quotes with it.
"""

from __future__ import annotations

import reprlib

MAX_QUOTED_CHARS = 200
"""The most characters of a caller's text (a lease id, a tenant, a GPU type) an error quotes, as
names are bounded elsewhere (``agentgate._names.MAX_NAME_CHARS``)."""


_SHORT_REPR = reprlib.Repr()
"""The ``repr`` of a value that is not text, bounded as it is written (a list of a million items
is not written out first)."""
_SHORT_REPR.maxlevel = 3
_SHORT_REPR.maxlist = _SHORT_REPR.maxtuple = _SHORT_REPR.maxdict = _SHORT_REPR.maxset = 6
_SHORT_REPR.maxstring = _SHORT_REPR.maxother = _SHORT_REPR.maxlong = 60


def quoted(value: object) -> str:
    """``value`` as the broker's errors quote what a caller gave: text as its ``repr``, cut to
    ``MAX_QUOTED_CHARS`` characters with its length said; anything else as a bounded ``repr``
    (``reprlib``: a few items, each cut). Until review R61 each was quoted whole: a 1 MB lease id
    given to ``release`` was a 1 MB ``LeaseLost`` message, logged and sent back as it was."""
    if not isinstance(value, str):
        try:
            return _SHORT_REPR.repr(value)
        except ValueError:  # an integer of more digits than Python writes (``reprlib`` writes it whole)
            return f"a {type(value).__name__} holding an integer of more than 4300 digits"
    if len(value) <= MAX_QUOTED_CHARS:
        return repr(value)
    return f"{value[:MAX_QUOTED_CHARS]!r}... ({len(value)} characters)"
