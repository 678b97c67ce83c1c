"""Grants and chains: the values, the format's limits and the wire form (docs/token-format.md).

A grant is a canonical JSON payload signed with Ed25519 by its issuer; a chain is the root grant
followed by each delegation, each naming its parent by hash. The algorithm is fixed: nothing in a
token names an algorithm or carries a key the verifier would trust.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from agentgate._names import BUDGET_UNIT, BUDGET_UNIT_RULE, BUDGET_UNITS, METERED_IN_WORDS
from agentgate._names import MAX_PURPOSE as MAX_PURPOSE  # read here with the other token limits
from agentgate.authority._encoding import b64url_encode
from agentgate.capabilities import Capability, format_capability
from agentgate.errors import TokenFormatError

VERSION = 1
TOKEN_PREFIX = "ag1"
GRANT_CONTEXT = b"agentgate/grant/v1\x00"
MAX_TOKEN_BYTES = 32 * 1024
SIGNATURE_TEXT_BYTES = 86
"""A 64-byte Ed25519 signature in unpadded base64url, as it stands in a token."""
MAX_LINKS = 16
MAX_DEPTH = MAX_LINKS - 1
MAX_PAYLOAD_BYTES = 8 * 1024
MAX_CAPABILITIES = 16
"""Per grant; bounds attenuation checking to 16 x 16 capability pairs per link."""
MAX_TIME = 2**40
MAX_AMOUNT = 2**63 - 1
DEFAULT_SKEW = 30
"""Seconds of clock skew tolerated on not-before and on invocation times (never on expiry)."""
MAX_SKEW = 3600
"""The most clock skew a verifier may be configured to tolerate (an hour): a larger tolerance makes
a grant's not-before, and an invocation's signing time, mean nothing (review R53: ``skew=10**12``
allowed an invocation dated three hours ahead)."""

_UNIT = BUDGET_UNIT


def _shown_amount(amount: object) -> str:
    """An amount that is not an integer, for its error: text quoted as ``_quoted`` does, anything
    else (``1.5``, ``None``) as its ``repr``, cut at 40 characters."""
    if isinstance(amount, str):
        return _quoted(amount)
    shown = repr(amount)
    return shown if len(shown) <= 40 else f"{shown[:40]}... (a {type(amount).__name__})"


def _quoted(text: str) -> str:
    """``text`` quoted for an error: whole up to 40 characters, else its first 40 and its length
    (a unit typed or signed may be 100,000 characters)."""
    return repr(text) if len(text) <= 40 else f"{text[:40]!r}... ({len(text)} characters)"


@dataclass(frozen=True)
class Budget:
    """A spending limit in integer minor units of one unit (``usd_micros``, ``tokens``, ``calls``)."""

    amount: int
    unit: str = "usd_micros"

    def __post_init__(self) -> None:
        if isinstance(self.amount, bool) or not isinstance(self.amount, int):
            raise TokenFormatError(
                f"budget amount must be an integer number of minor units, got {_shown_amount(self.amount)}"
            )
        if not 0 <= self.amount <= MAX_AMOUNT:
            # Not written out: an integer of more than 4300 digits cannot be (a ValueError until
            # review R62), and one of thousands says nothing more than its sign.
            shown = (
                self.amount if abs(self.amount) <= MAX_AMOUNT + 1 else "<0" if self.amount < 0 else ">2**63-1"
            )
            raise TokenFormatError(f"budget amount {shown} is outside 0 .. 2**63-1")
        if not isinstance(self.unit, str):
            raise TokenFormatError(f"budget unit must be text, got {type(self.unit).__name__}")
        if not _UNIT.fullmatch(self.unit):
            raise TokenFormatError(f"budget unit {_quoted(self.unit)} is not a unit name: {BUDGET_UNIT_RULE}")

    @classmethod
    def parse(cls, text: str, *, metered: bool = False) -> Budget:
        """``AMOUNT[:UNIT]``, e.g. ``500000`` or ``1000:calls``; without ``:UNIT``, ``usd_micros``.

        Raises ``TokenFormatError`` for signs, fractions, NaN, overflow, spaces anywhere, an
        amount written in more than 19 digits (leading zeros count: ``007`` is 7, but 7 padded
        to 20 digits is refused, told to drop them), and a ``:`` with no unit after it
        (``500:``): a forgotten unit is refused, never defaulted.
        ``metered``: also for a unit that is not one of ``BUDGET_UNITS`` (``agentgate._names``: the
        units agentgate meters; ``5:usd``, a slip for ``usd_micros``), which a person typing a
        budget never means. The token format allows any unit ``_UNIT`` names, but a grant in
        another has every call refused, so the CLI makes none.
        """
        amount, colon, unit = str(text).partition(":")
        if re.fullmatch(r"[0-9]+", amount) and (len(amount) > 19 or int(amount) > MAX_AMOUNT):
            # Well formed and too large (20 digits and more were said not to be a whole number
            # until review R55): judged by its digits, converted only once at most 19 of them.
            shown = repr(str(text)[:40]) + ("..." if len(str(text)) > 40 else "")
            significant = amount.lstrip("0") or "0"
            if len(significant) > 19 or int(significant) > MAX_AMOUNT:
                raise TokenFormatError(
                    f"budget {shown}: the amount is too large; the largest is {MAX_AMOUNT} (2**63-1) minor units"
                )
            # Leading zeros are no fault (``007`` is 7); their count is: until review R87 this
            # said "(no leading zeros)", which ``007`` is not refused for. The value to write keeps
            # its unit (until a regression review of R87 ``0...07:calls`` was told ``7``, which is
            # 7 usd_micros), a unit that is no unit name being shown as ``UNIT``, to be named; so
            # is one ``metered`` refuses (until a regression review, round c, of R87 ``7:usd`` was
            # suggested, which is then refused as a unit agentgate does not meter).
            kept = _UNIT.fullmatch(unit) and (not metered or unit in BUDGET_UNITS)
            suffix = "" if not colon else f":{unit}" if kept else ":UNIT"
            raise TokenFormatError(
                f"budget {shown}: the amount is written in {len(amount):,} digits, leading zeros "
                f"included, and at most 19 are read; write it without its leading zeros ({significant}{suffix})"
            )
        if not re.fullmatch(r"[0-9]{1,19}", amount):
            raise TokenFormatError(
                f"budget {text!r}: the amount must be a whole, non-negative number of minor units (e.g. 500000:usd_micros)"
            )
        if colon and not unit:
            raise TokenFormatError(
                f"budget {text!r}: name the unit after ':' (e.g. {amount}:calls) or drop the ':'"
            )
        if metered and colon and unit not in BUDGET_UNITS:
            raise TokenFormatError(
                f"budget {_quoted(str(text))}: unit {_quoted(unit)} is not one agentgate meters; "
                f"use {METERED_IN_WORDS}"
            )
        return cls(int(amount), unit if colon else "usd_micros")

    def to_dict(self) -> dict[str, Any]:
        return {"amount": self.amount, "unit": self.unit}

    def __str__(self) -> str:
        return f"{self.amount} {self.unit}"


@dataclass(frozen=True)
class Grant:
    """One signed link: ``issuer`` gives ``audience`` these capabilities, budget and lifetime."""

    issuer: str
    audience: str
    capabilities: tuple[Capability, ...]
    budget: Budget | None
    not_before: int
    expires: int
    max_depth: int
    """How many further delegation levels may follow this grant (0: none)."""
    nonce: str
    purpose: str
    parent: str | None
    """Hash (id) of the parent grant; ``None`` for a root grant."""
    payload: bytes
    """The exact signed bytes (canonical JSON)."""
    signature: bytes
    id: str
    """SHA-256 of ``payload``, hex: the grant's id and revocation id."""

    def to_dict(self) -> dict[str, Any]:
        """A readable form for ``grant inspect --json`` (not the signed bytes)."""
        return {
            "id": self.id,
            "issuer": self.issuer,
            "audience": self.audience,
            "capabilities": [format_capability(c) for c in self.capabilities],
            "budget": self.budget.to_dict() if self.budget else None,
            "not_before": self.not_before,
            "expires": self.expires,
            "max_depth": self.max_depth,
            "purpose": self.purpose,
            "parent": self.parent,
        }


@dataclass(frozen=True)
class Chain:
    """Root grant first, the caller's grant (the tip) last. ``token`` is its wire form.

    ``ids``, ``not_before``, ``expires`` and ``budgets`` are computed once, when the chain is built.
    """

    links: tuple[Grant, ...]
    token: str
    ids: tuple[str, ...] = field(init=False, repr=False, compare=False)
    """Grant ids, root first."""
    not_before: int = field(init=False, repr=False, compare=False)
    """The latest not-before of any link: the chain is valid from then on."""
    expires: int = field(init=False, repr=False, compare=False)
    """The earliest expiry of any link: the chain is dead from then on."""
    budgets: tuple[tuple[str, Budget], ...] = field(init=False, repr=False, compare=False)
    """(grant id, budget) of every link that has a budget, root first."""
    _parsed: ClassVar[Chain | None] = None
    """This chain as its token parsed, a separate object, set on the instance once an operation
    that trusts its fields has checked them against the token (``_operations._signed_chain``):
    later ones compare the fields with it instead of parsing the token again. ``None`` (this class
    default) for one not checked yet, ``dataclasses.replace`` and a ``Chain`` built by hand
    included. Not a dataclass field: equality, ``repr`` and ``asdict`` see the links and token only."""
    _sound: ClassVar[bool] = False
    """Set on the instance once ``delegate`` has found this chain to hold together (its
    signatures verify, its links connect and attenuate: ``unsound_finding``), on the parsed copy
    that ``_parsed`` keeps: a supervisor delegating many times from the chain it holds verifies
    its signatures once. Not a dataclass field, as ``_parsed``."""

    def __post_init__(self) -> None:
        """Raises ``TokenFormatError`` for links no chain is made of: not a tuple, none, or one
        that is not a ``Grant`` and lacks a grant's fields (until review R85 a bare ``ValueError``
        or ``AttributeError``). Links that are not the token's (grants, or objects with a grant's
        fields) are refused where the chain is used (``tip_mismatch``).

        Until review R89 a list of the token's own grants was taken: ``verify_chain``, ``delegate``
        and ``record`` refused the chain as ``tip_mismatch`` (its list never equals the parsed
        tuple), which said falsely that the links were not the token's, while ``decide_held``
        allowed it. A list is refused here, for every entry point alike."""
        links = self.links
        if not isinstance(links, tuple):
            raise TokenFormatError(_not_links(links))
        set_ = object.__setattr__
        try:
            set_(self, "ids", tuple([link.id for link in links]))
            set_(self, "not_before", max([link.not_before for link in links]))
            set_(self, "expires", min([link.expires for link in links]))
            set_(
                self, "budgets", tuple([(link.id, link.budget) for link in links if link.budget is not None])
            )
        except (AttributeError, TypeError, ValueError):
            # Diagnosed only once the sums fail: a parsed chain pays no check of its own.
            raise TokenFormatError(_not_links(links)) from None

    @property
    def tip(self) -> Grant:
        return self.links[-1]

    @property
    def root(self) -> Grant:
        return self.links[0]

    @property
    def id(self) -> str:
        """The tip's grant id."""
        return self.links[-1].id

    @property
    def holder(self) -> str:
        """The only principal that may invoke with this chain: the tip's audience."""
        return self.links[-1].audience

    def __str__(self) -> str:
        return self.token


def _not_links(links: object) -> str:
    """What makes ``links`` no chain's links, for ``Chain``'s refusal."""
    shape = "a chain's links are a tuple of one or more Grant objects, root first"
    if not isinstance(links, tuple):
        return f"{shape}; got a {type(links).__name__}"
    if not links:
        return f"{shape}; got none"
    for i, link in enumerate(links):
        if not isinstance(link, Grant):
            return f"{shape}; link {i} is a {type(link).__name__}"
    return f"{shape}; their fields are not a grant's"


def _encode_chain(links: Sequence[Grant]) -> str:
    parts = [TOKEN_PREFIX]
    for link in links:
        parts += [b64url_encode(link.payload), b64url_encode(link.signature)]
    return ".".join(parts)
