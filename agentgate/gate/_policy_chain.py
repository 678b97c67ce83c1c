"""A chain presented to the Gate, held to the policy (``PolicyChains``): the root grant's lifetime
and budget against its holder's roles, and each delegation below it against the delegating
principal's ``delegation`` rule, as ``Gate.delegate`` checks a new one.

The authority engine checks that each link narrows its parent; only the policy knows how far a
principal may hand on, or how long its root grant may live and how much it may spend. A chain
made outside the Gate (the library's ``issue``/``delegate``, ``agentgate grant issue`` without
``--policy``, ``agentgate grant delegate``) never met those rules, so every decision asks them of
the chain it decides on, and ``Gate.delegate`` of the chain it hands on from.
The answer is a pure function of the chain's token and the policy, which does not change under a
Gate (``Policy`` is frozen, the Gate's index is built once): it is computed once per chain and
kept, so a repeated call pays one dict lookup.
"""

from __future__ import annotations

from dataclasses import replace

from agentgate._names import policy_unit
from agentgate.authority import Chain, parse_chain
from agentgate.errors import TokenFormatError
from agentgate.findings import Finding, FindingKind
from agentgate.policy import PolicyIndex

POLICY_CHAINS_MAX = 4096
"""How many chains' verdicts a Gate keeps (cleared when full, as its other caches)."""
POLICY_CHAINS_MAX_CHARS = 8 * 1024 * 1024
"""How many characters of chain tokens the verdicts are kept under (cleared past it): a token may
hold up to ``MAX_TOKEN_BYTES`` (32 KiB), so 4,096 of them, each a key, would hold 128 MiB."""


def _named(index: PolicyIndex, did: str) -> str:
    """``did`` by its policy name, else shortened as the authority's findings show a key."""
    return index.principal_name(did) or (did if len(did) <= 24 else did[:16] + "..." + did[-6:])


def chain_fault(index: PolicyIndex, chain: Chain) -> Finding | None:
    """What the policy refuses in ``chain`` (read from its links), or ``None``.

    ``non_revocable_grant`` ``root_ttl_above_policy``: a root grant that lives longer than the
    longest ``ttl_s`` of its holder's roles, each capped by ``settings.max_ttl_s``.
    ``scope_creep`` ``root_budget_above_policy``: a root grant whose budget is not within the
    ``budget`` of one of its holder's roles (``PolicyIndex.root_budgets``: another unit, a larger
    amount, or none at all where every role has one). For each link
    below the root, in order: what ``PolicyIndex.delegation_fault`` refuses of the principal that
    delegated it (``delegation_not_in_policy``, ``delegation_wider_than_policy``,
    ``delegation_ttl_above_policy``, ``delegation_budget_above_policy``), and
    ``delegation_wider_than_policy`` for a link deeper than the root holder's roles let a chain
    go (``delegation.max_depth``). A link's lifetime is its expiry less its not-before; its budget
    the one it carries, in its unit (one other than the rule's is over it).
    """
    root = chain.root
    holder = _named(index, root.audience)
    lifetime = root.expires - root.not_before
    longest = index.root_ttl_s(root.audience)
    if lifetime > longest:
        return Finding(
            kind=FindingKind.NON_REVOCABLE_GRANT,
            code="root_ttl_above_policy",
            message=(
                f"the root grant {root.id[:16]} to {holder} lives {lifetime}s, longer than the "
                f"policy lets a grant to it live ({longest}s: its role's ttl_s, at most "
                "settings.max_ttl_s); have a trust anchor issue one within the policy "
                "(Gate.issue, agentgate grant issue --policy --role)"
            ),
            grant=root.id,
            field="expiry",
        )
    budgets = index.root_budgets(root.audience)
    carried = root.budget
    if budgets is not None and not any(
        carried is not None and policy_unit(carried.unit) == b.unit and carried.amount <= b.limit
        for b in budgets
    ):
        allowed = " or ".join(f"{b.limit} {b.unit}" for b in budgets)
        asked = "no budget (no limit)" if carried is None else f"a budget of {carried.amount} {carried.unit}"
        return Finding(
            kind=FindingKind.SCOPE_CREEP,
            code="root_budget_above_policy",
            message=(
                f"the root grant {root.id[:16]} to {holder} carries {asked}, more than the policy "
                f"lets a grant to it carry ({allowed}: its role's budget); have a trust anchor "
                "issue one within the policy (Gate.issue, agentgate grant issue --policy --role)"
            ),
            grant=root.id,
            field="budget",
        )
    depth = index.delegation_depth(root.audience)
    for step, link in enumerate(chain.links[1:], start=1):
        delegator = chain.links[step - 1].audience
        who = _named(index, delegator)
        budget, unit = (link.budget.amount, link.budget.unit) if link.budget is not None else (None, None)
        fault = index.delegation_fault(
            delegator,
            root.audience,
            link.capabilities,
            link.expires - link.not_before,
            budget,
            who,
            unit=unit,
        )
        where = f"link {step} ({link.id[:16]}), which {who} delegated, is outside the policy"
        if fault is not None:
            return replace(
                fault,
                message=f"{where}: {fault.message}; delegate again within the policy "
                "(Gate.delegate checks its delegation rule)",
                grant=link.id,
            )
        if step > depth:
            return Finding(
                kind=FindingKind.SCOPE_CREEP,
                code="delegation_wider_than_policy",
                message=(
                    f"{where}: it is delegation step {step} below the root grant to {holder}, "
                    f"whose roles let a chain go {depth} step(s) deep; delegate again within the "
                    "policy (Gate.delegate checks its delegation rule)"
                ),
                grant=link.id,
                field="max_depth",
            )
    return None


class PolicyChains:
    """``chain_fault`` of the chains presented to one Gate, computed once per chain token."""

    def __init__(
        self, index: PolicyIndex, size: int = POLICY_CHAINS_MAX, max_chars: int = POLICY_CHAINS_MAX_CHARS
    ) -> None:
        self._index = index
        self._size = size
        self._max_chars = max_chars
        self._chars = 0  # of the tokens kept as keys
        self._faults: dict[str, Finding | None] = {}

    def fault(self, chain: Chain) -> Finding | None:
        """``chain_fault`` of ``chain`` as its token reads (never its object's fields, which a
        ``Chain`` built by hand may set apart from its token; the authority engine verifies the
        token). ``None`` for a token that does not parse, which the authority engine refuses
        (``malformed_token``)."""
        token = chain.token
        if not isinstance(token, str):  # a hand-built chain: the authority engine refuses it
            return None
        try:
            return self._faults[token]
        except KeyError:
            pass
        try:
            fault = chain_fault(self._index, parse_chain(token))
        except TokenFormatError:
            fault = None
        faults = self._faults
        if len(faults) >= self._size or self._chars + len(token) > self._max_chars:
            faults.clear()
            self._chars = 0
        faults[token] = fault
        self._chars += len(token)
        return fault
