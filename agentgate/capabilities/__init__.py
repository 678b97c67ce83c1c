"""The capability and constraint algebra: the one vocabulary that policies and grants speak.

A capability is a resource pattern, an action and constraints on the call's arguments::

    tool:payments.refund  invoke  {amount: {le: 500}, currency: {in: [EUR, USD]}}

Constraints are a small closed algebra over one argument each: ``eq``, ``in`` (one-of), the
numeric bounds ``lt``/``le``/``gt``/``ge``, and string ``prefix``; the operators given for one
field are a conjunction, and so are the fields. Because the algebra is closed and small, every
conjunction has a normal form (empty, a finite set, a numeric interval, or a string prefix),
and inclusion between normal forms is decidable exactly. That is what makes scope creep
*detectable*: ``attenuates(parent, child)`` is exact, and when it is false ``witness`` returns a
concrete call that the child allows and the parent does not.

Numbers are the reals: ``amount <= 500`` admits 499.5, so an interval is never a subset of a
finite set unless it is a single point. Booleans are not numbers (``True`` never equals ``1``).
NaN and infinities, and strings that are not Unicode text (a lone surrogate), are refused
wherever a value enters the algebra. Values, names and a call's arguments are held as exact
built-in types: a ``str``, ``int`` or ``float`` subclass is read as the plain value it holds, so
no check ever calls a method its caller wrote (``_values._plain``).

Resource names are canonical or refused, never guessed: a tool name is lower-case ASCII
segments (``[a-z0-9_-]``) joined by dots, so ``Run_Shell``, `` run_shell``, ``run_shell\\n``,
a zero-width or look-alike character, or ``../`` is a ``CapabilityError`` (the caller denies).
Model names may also use upper case, ``/`` and ``:`` (``model:Qwen/Qwen3-32B``), matched exactly.
A pattern ending in ``.*`` matches one or more further segments; ``tool:*`` matches every tool.

Where each part lives (private modules: import the public names from this package):
``_values`` (the scalars the algebra admits, checked where they enter, and how two compare),
``_normal_forms`` (the four normal forms, exact inclusion between them, candidate members for
witnesses), ``_constraints`` (``Constraint``, ``intersects``), ``_resources`` (canonical names,
patterns, ``pattern_matches``, ``pattern_within``), ``_call`` (``Call``), ``_capability``
(``Capability`` and its one-line form, ``parse_capability`` / ``format_capability``, which use
each other), ``_coverage`` (``covers``, ``attenuates``, ``witness``; against several parents,
``uncovered_call`` and ``covered_together``), and ``_canonical`` (the
token parser's fast path: ``capability_from_canonical``, ``_prechecked``).
"""

from __future__ import annotations

from agentgate.capabilities._call import Call
from agentgate.capabilities._canonical import capability_from_canonical as capability_from_canonical
from agentgate.capabilities._capability import Capability, format_capability, parse_capability
from agentgate.capabilities._constraints import OPERATORS as OPERATORS
from agentgate.capabilities._constraints import Constraint, intersects
from agentgate.capabilities._coverage import attenuates, covers, witness
from agentgate.capabilities._coverage import covered_together as covered_together
from agentgate.capabilities._coverage import uncovered_call as uncovered_call
from agentgate.capabilities._resources import (
    DEFAULT_ACTIONS,
    canonical_resource,
    pattern_matches,
    pattern_within,
)
from agentgate.capabilities._resources import MAX_NAME_LENGTH as MAX_NAME_LENGTH
from agentgate.capabilities._resources import RESOURCE_KINDS as RESOURCE_KINDS
from agentgate.capabilities._values import MAX_SET_SIZE as MAX_SET_SIZE
from agentgate.capabilities._values import Scalar as Scalar
from agentgate.capabilities._values import token_number_refusal as token_number_refusal
from agentgate.capabilities._values import token_refusal as token_refusal

__all__ = [
    "DEFAULT_ACTIONS",
    "Call",
    "Capability",
    "Constraint",
    "attenuates",
    "canonical_resource",
    "covers",
    "format_capability",
    "intersects",
    "parse_capability",
    "pattern_matches",
    "pattern_within",
    "witness",
]
