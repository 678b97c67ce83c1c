"""The names a caller gives that readers see (an agent's name, a tenant): ``check_name`` and
``check_tenant``, below ``gate`` and ``dispatch`` so that both check a tenant the one way
(``Gate.dispatch`` and ``Dispatcher.chat``, which the gateway and direct callers reach)."""

from __future__ import annotations

from agentgate._shown import character_named, not_printable
from agentgate.errors import InputError

MAX_NAME_CHARS = 200
"""The most characters a name may hold: what spans keep of a name (``audit.spans.MAX_CALL_ID_CHARS``,
tests/test_gate_agent_names.py holds the two equal)."""


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
