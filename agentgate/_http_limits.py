"""``HttpLimits``: the bounds of the HTTP/1.1 protocol that the gateway and the simulator serve.

The protocol itself (``agentgate/_bounded_http.py``) imports uvicorn and httptools; this module
imports neither, so that a ``SimServer`` or a ``GatewayServer`` checks its limits when it is made
and ``import agentgate.sim`` stays light. Each server passes its own limits: the gateway's
defaults are the values below, the simulator's are its own (``agentgate/sim/_server.py``).
``declared_length`` reads a ``Content-Length`` value, for the protocol and the gateway's pool alike.
"""

from __future__ import annotations

from dataclasses import dataclass

from agentgate._shown import quoted
from agentgate.errors import InputError

MAX_HEAD_BYTES = 64 * 1024
"""The gateway's most bytes of one request's line and headers (a chain token is at most 32 KiB)."""
HEAD_TIMEOUT_S = 10.0
"""The gateway's seconds for a client to send a whole request head."""
STREAM_STALL_S = 30.0
"""The gateway's seconds an answer may wait for its caller to read anything before the
connection is cut."""
UNREAD_BODY_S = 10.0
"""The gateway's seconds for the rest of a request's body to arrive once the request was answered
before all of it had (the app refused it: a body too large, an encoding not supported); then the
connection is closed."""

LEAST_HEAD_BYTES = 1024
"""The least head limit: a request line and a ``Host`` header fit, a chain token does not."""
MOST_HEAD_BYTES = 16 * 1024 * 1024
"""The most head limit (four times vLLM's, ``--h11-max-incomplete-event-size``)."""
MOST_PORT = 65535
"""The largest TCP port number (a port is 16 bits; 0 asks the operating system for a free one)."""
MOST_SECONDS = 24 * 3600.0
"""The most any of the time limits may be: a day. (uvloop's timers refuse a delay past about
2**63 milliseconds; a limit that long bounds nothing.)"""


@dataclass(frozen=True, slots=True)
class HttpLimits:
    """What one connection of the bounded HTTP/1.1 protocol may hold, in bytes and in time.

    Raises ``InputError`` naming the field for a value out of its range: ``max_head_bytes`` a
    whole number from ``LEAST_HEAD_BYTES`` to ``MOST_HEAD_BYTES``; each time a number of seconds
    above 0 and at most ``MOST_SECONDS`` (``stall_s`` may also be ``None``: never cut).
    """

    max_head_bytes: int = MAX_HEAD_BYTES
    """Most bytes of a request's line and headers (431 past it), and of a chunked body's framing
    and trailer fields beyond the body's own bytes."""
    head_timeout_s: float = HEAD_TIMEOUT_S
    """Seconds a request head may take to arrive, from the connection opening or the head's first
    byte (408 past it)."""
    stall_s: float | None = STREAM_STALL_S
    """Seconds an answer may wait for a caller that takes none of its bytes before the connection
    is reset; ``None``: it waits for ever (uvicorn's own behaviour)."""
    unread_body_s: float = UNREAD_BODY_S
    """Seconds for the rest of a body to arrive (read and dropped) once its request was answered."""

    def __post_init__(self) -> None:
        heads = self.max_head_bytes
        if (
            not isinstance(heads, int)
            or isinstance(heads, bool)
            or not LEAST_HEAD_BYTES <= heads <= MOST_HEAD_BYTES
        ):
            raise InputError(
                f"max_head_bytes must be a whole number of bytes from {LEAST_HEAD_BYTES} to "
                f"{MOST_HEAD_BYTES}, not {heads!r}"
            )
        object.__setattr__(self, "head_timeout_s", positive_seconds(self.head_timeout_s, "head_timeout_s"))
        if self.stall_s is not None:
            object.__setattr__(self, "stall_s", positive_seconds(self.stall_s, "stall_s"))
        object.__setattr__(self, "unread_body_s", positive_seconds(self.unread_body_s, "unread_body_s"))


def positive_seconds(value: float, name: str) -> float:
    """``value`` as a float if it is a number of seconds above 0 and at most ``MOST_SECONDS``;
    else ``InputError`` naming ``name``, the setting it limits."""
    if isinstance(value, bool) or not (isinstance(value, int | float) and 0 < value <= MOST_SECONDS):
        raise InputError(
            f"{name} must be a positive number of seconds, at most {MOST_SECONDS:g}, not {quoted(value)}"
        )
    return float(value)


def port_number(value: int) -> int:
    """``value`` if it is a TCP port a server may listen on: a whole number from 0 (any free
    port, chosen when it starts) to ``MOST_PORT`` (a bool is none); else ``InputError`` naming
    ``port``. The one check of ``SimServer``'s and ``GatewayServer``'s port (until review R85 the
    gateway's was not checked: 70000 listened on 4464 and reported 70000)."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MOST_PORT:
        raise InputError(
            f"port must be an integer from 0 to {MOST_PORT} (0: any free port), not {quoted(value)}"
        )
    return value


MOST_DECLARED_DIGITS = 20
"""The most significant digits of a ``Content-Length`` the parsers read (2**64 - 1 has 20)."""


def declared_length(value: str | bytes) -> int | None:
    """The bytes a ``Content-Length`` header's ``value`` (as sent) declares, or ``None`` for a
    value that is not ASCII digits alone (white space around aside). ``1*DIGIT`` (RFC 9110, 8.6)
    allows any number of leading zeros, and ``int`` refuses a text of more than 4,300 digits:
    the zeros are dropped before the digits are read (until review R88 a length after 5,000
    zeros, which the parser reads, raised ``ValueError``). A value of more significant digits
    than ``MOST_DECLARED_DIGITS``, which the parser refuses first, is read as ``10**20``: larger
    than any limit."""
    digits = value.strip() if isinstance(value, bytes) else value.strip().encode("latin-1", "replace")
    if not digits.isdigit():
        return None
    significant = digits.lstrip(b"0")
    if len(significant) > MOST_DECLARED_DIGITS:
        return 10**20  # the least number of more digits
    return int(significant or b"0")
