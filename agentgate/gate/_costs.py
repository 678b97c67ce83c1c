"""What a call costs (``_Costs``): in calls, tokens and micro-dollars, from its token counts or a
GPU lease's price; which budgets can be metered; what a model call's reported usage is charged."""

from __future__ import annotations

import logging
from collections.abc import Mapping

from agentgate._names import METERED_IN_WORDS, METERED_UNITS
from agentgate._shown import quoted
from agentgate.authority import Decision
from agentgate.capabilities import Call
from agentgate.dispatch._answers import MAX_USAGE_TOKENS
from agentgate.errors import BudgetExceeded, InputError
from agentgate.gate._authorization import AgentIdentity, Authorization
from agentgate.policy import Policy
from agentgate.store import Transaction
from agentgate.store.ledger import MAX_AMOUNT, BudgetLedger

_log = logging.getLogger("agentgate.gate")


def _token_counts(tokens: object) -> tuple[int, int]:
    """``(prompt, output)`` token counts as two non-negative integers; ``InputError`` otherwise (a
    negative estimate would make a call's cost negative and skip its reservation)."""
    if isinstance(tokens, tuple | list) and len(tokens) == 2:
        prompt, output = tokens
        if all(type(n) is int and n >= 0 for n in (prompt, output)):
            return prompt, output
    raise InputError(f"token counts must be two non-negative integers (prompt, output), got {quoted(tokens)}")


def _token_estimate(tokens: object) -> tuple[int, int]:
    """``Gate.authorize``'s ``tokens``: ``_token_counts`` whose output count (the ``max_tokens``
    the call is sent, the most output its outcome is charged) is at least 1; ``InputError``
    otherwise. 0 is refused, not read as "no limit", as the gateway (``max_tokens_of``) and the
    LangGraph middleware refuse ``max_tokens`` 0: until review R85 an estimate of ``(100, 0)``
    capped nothing, and one backend report of 10^6 completion tokens was charged whole."""
    prompt, output = _token_counts(tokens)
    if output == 0:
        raise InputError(
            "token counts (prompt, output) must give an output count of at least 1, got 0: it is the "
            "max_tokens the call is sent and the most output it is charged, and 0 is not read as no limit"
        )
    return prompt, output


def _usage_counts(usage: object) -> tuple[int, int] | None:
    """The ``(input, output)`` token counts a call reported using (``Gate.run``'s ``spent``, the
    LangGraph middleware's ``usage_metadata``), or ``None`` when ``usage`` is not two integers from
    0 to ``MAX_USAGE_TOKENS``: garbage, read as the dispatcher reads such a count in a backend's
    answer (``dispatch._answers._count``), never a bill. The Gate charges such a call as reserved
    and records no usage on its span. Until review R56 only the sign was checked: a model that
    reported 10^20 tokens was charged them, and spent its budget out."""
    if isinstance(usage, tuple | list) and len(usage) == 2:
        prompt, output = usage
        if all(type(n) is int and 0 <= n <= MAX_USAGE_TOKENS for n in (prompt, output)):
            return prompt, output
    return None


def _output_capped(usage: tuple[int, int], limit: int | None) -> tuple[int, int]:
    """The usage a model call is charged: ``usage`` itself, or, when it reports more completion
    tokens than ``limit`` (the output reserved: the ``max_tokens`` the call was sent), the prompt
    tokens as reported with ``limit`` completion tokens. A backend that reports more output than it
    was allowed is broken or hostile; charged as reported, one call could drain a budget. (The
    prompt is not capped here: the reservation's prompt is only an estimate. A decider that
    bounds it sets ``Authorization.prompt_tokens``, which ``_reported_cost`` caps it at.) ``limit``
    ``None`` (no output was reserved): ``usage`` unchecked; a ``limit`` of 0 caps the output at 0
    (until review R85 it was taken for no limit)."""
    prompt, output = usage
    return (prompt, limit) if limit is not None and output > limit else usage


_METERED = METERED_UNITS
"""The budget units ``Gate._cost`` charges (``agentgate._names``; ``micro_usd``: an alias of ``usd_micros``)."""
_METERED_BY_TOKENS = frozenset({"tokens", "usd_micros", "micro_usd"})
"""The units a model call is charged in from its token counts."""


def prompt_unreported(usage: tuple[int, int], auth: Authorization) -> bool:
    """Whether ``usage`` (two counts, ``_usage_counts``) reports 0 prompt tokens for a prompt
    agentgate bounded (``Authorization.prompt_tokens`` above 0), which was sent, so is never
    empty: no count of it; the call is charged its reservation (``_Costs._reported_cost``), and
    the gateway says so to its caller."""
    return usage[0] == 0 and bool(auth.prompt_tokens)


def charged_counts(usage: tuple[int, int], auth: Authorization) -> tuple[int, int]:
    """The ``(prompt, output)`` tokens a model call decided as ``auth`` is charged for the
    ``usage`` its backend reported (two counts, ``_usage_counts``): its prompt at most
    ``auth.prompt_tokens``, its output at most ``auth.output_tokens``, as ``_reported_cost``
    charges them (and records why). The gateway passes these on to its caller."""
    prompt, output = usage
    if auth.prompt_tokens is not None and prompt > auth.prompt_tokens:
        prompt = auth.prompt_tokens
    return _output_capped((prompt, output), auth.output_tokens)


class _Costs:
    """The ``Gate``'s metering: what a call costs in each budget unit (``_cost``), a decision's
    budget caps by unit (``_caps``), why a call on budgets that cannot be metered or are spent is
    refused, and what a reported usage costs (``_reported_cost``: output capped at what was
    reserved)."""

    # The gate's state this part reads (``Gate.__init__`` sets it).
    policy: Policy
    ledger: BudgetLedger

    @staticmethod
    def _unmetered(by_unit: Mapping[str, object]) -> str:
        """Why a call on budgets that cannot be metered is refused (fail closed: a budget never
        charged would let its grant spend without limit)."""
        unknown = sorted(by_unit.keys() - _METERED)
        if unknown:
            return (
                f"the chain's budget in {unknown[0]!r} cannot be metered (agentgate charges "
                f"{METERED_IN_WORDS}): no call may spend from it"
            )
        return "a model call on a tokens or usd_micros budget needs its token estimate (tokens=)"

    @staticmethod
    def _never_fits(identity: AgentIdentity, amounts: Mapping[str, int]) -> str | None:
        """Why a call is refused whose cost alone (``amounts``, ``_cost``) is more than a budget of
        ``identity``'s chain holds in all, the caller's own budget looked at first: no budget, even
        unspent, could hold it, so asking again is pointless, and asking for less is not (as for a
        quota's ``quota_never_fits``). ``None`` when every budget could hold it unspent (a budget
        of 0 holds nothing: that is an exhausted one). Until review R82 such a call was refused as
        "budget exhausted (0 of 1000 tokens spent ...)" and ``budget_exhausted``: the amount asked
        was not said, and the gateway and the LangGraph middleware took the budget for spent."""
        for link in reversed(identity.chain.links):
            budget = link.budget
            if budget is None:
                continue
            asked = amounts.get(budget.unit, 0)
            if 0 < budget.amount < asked:
                # An estimate past what any budget holds is not quoted whole (it may have 4,000 digits).
                said = asked if asked <= MAX_AMOUNT else f"more than {MAX_AMOUNT}"
                return (
                    f"the call asks for {said} {budget.unit}, more than the whole budget "
                    f"of grant {link.id[:12]} ({budget.amount} {budget.unit}), which can never hold it: "
                    "ask for less (for a model call, a lower max_tokens)"
                )
        return None

    def _budget_reason(self, identity: AgentIdentity, exc: BudgetExceeded, tx: Transaction) -> str:
        # Read in the decision's transaction: it holds the write lock and the outcomes it carries.
        parts = []
        for link in identity.chain.links:
            if link.budget is not None:
                spent, held = self.ledger.usage(link.id, tx=tx)
                in_flight = f" and {held} held by calls in flight" if held else ""
                parts.append(
                    f"{spent} of {link.budget.amount} {link.budget.unit} spent{in_flight} on grant {link.id[:12]}"
                )
        return f"budget exhausted ({'; '.join(parts) or exc})"

    @staticmethod
    def _caps(decision: Decision) -> dict[str, dict[str, int]]:
        """Budget caps by unit and grant; the unit of the budget nearest the tip (the caller's own)
        first: audit entries report their ``budget_delta`` in that unit."""
        by_unit: dict[str, dict[str, int]] = {}
        for grant_id, budget in reversed(decision.budgets):
            by_unit.setdefault(budget.unit, {})[grant_id] = budget.amount
        return by_unit

    def _cost(self, call: Call, tokens: tuple[int, int] | None) -> dict[str, int]:
        """What a call is estimated to cost in each budget unit, to reserve: ``_priced``, except
        that a model call's estimate that costs nothing in tokens or money counts one prompt
        token more (every model call sends a prompt; the integrations estimate one at least).
        Until review R61 a direct caller's estimate of ``(0, 0)`` cost 0, was not reserved, and
        left its outcome no reservation to charge the usage it reported (nor did a spent budget
        refuse it). An estimate that costs something is reserved as it is. A model whose prompt
        is free and whose output is not is reserved one output token more in money instead: until
        review R61 its ``(p, 0)`` cost no money, reserved none, and the output it reported was
        never charged in ``usd_micros`` (nor did a spent money budget refuse it). A model free
        for both costs nothing, and reserves nothing in money.

        Since review R85 ``Gate.authorize`` refuses an estimate of 0 output tokens
        (``_token_estimate``), as the gateway and the LangGraph middleware refuse ``max_tokens``
        0. Through them an estimate costs nothing only on a model whose output is free: ``(0, k)``
        with a priced prompt, reserved one prompt token's price (held by
        test_regress_r85_gate_free_output_estimate.py), or any estimate on a model free for both.
        The rest of this branch, a count of 0 in ``tokens`` and the free-input model's one output
        token more (whose ``(p, 0)`` only a 0 output estimate makes), no public path reaches: only
        a decider that passes its own estimate to ``_record_allow`` meets it."""
        cost = self._priced(call, tokens)
        if tokens is not None and (cost.get("tokens") == 0 or cost.get("usd_micros") == 0):
            prompt, output = _token_counts(tokens)
            cost = self._priced(call, (prompt + 1, output))
            if cost.get("usd_micros") == 0:  # its prompt is free: what one output token costs
                money = self._priced(call, (prompt, output + 1))["usd_micros"]
                cost["usd_micros"] = cost["micro_usd"] = money
        return cost

    def _priced(self, call: Call, tokens: tuple[int, int] | None) -> dict[str, int]:
        """What a call costs in each budget unit: calls always 1; tokens and money for model calls;
        money for a GPU lease of a type the policy prices (``count`` GPUs for ``hold_s``, else
        ``ttl_s``, seconds: ``policy._schema.lease_cost``). Raises ``InputError`` for a priced
        lease call whose count or time is not one (nothing is recorded then)."""
        cost = {"calls": 1}
        gpu = (
            self.policy.document.gpus.get(call.resource.removeprefix("gpu:"))
            if call.resource.startswith("gpu:")
            else None
        )
        if gpu is not None:
            args = call.args
            try:
                micros = gpu.lease_cost(args["count"], args["hold_s"] if "hold_s" in args else args["ttl_s"])
            except (KeyError, ValueError) as exc:
                raise InputError(f"{call.resource}: the lease cannot be priced: {exc}") from exc
            cost["usd_micros"] = cost["micro_usd"] = micros
        elif tokens is not None and call.resource.startswith("model:"):
            prompt, output = _token_counts(tokens)
            cost["tokens"] = prompt + output
            spec = self.policy.document.models.get(call.resource.removeprefix("model:"))
            if spec is not None:
                # Integers only, rounded up: a float would round large counts and lose micro-dollars.
                per_million = prompt * spec.cost_per_mtok.input + output * spec.cost_per_mtok.output
                cost["usd_micros"] = cost["micro_usd"] = -(-per_million // 1_000_000)
        return cost

    def _reported_cost(
        self, auth: Authorization, usage: tuple[int, int], reasons: list[str]
    ) -> dict[str, int] | None:
        """What the ``usage`` a call reported costs in each budget unit, its output capped at the
        call's ``max_tokens``; ``None`` for usage that is not two token counts from 0 to
        ``MAX_USAGE_TOKENS`` (``_usage_counts``: the reservation is charged whole). Why a cost
        differs from what was reported is added to ``reasons``: for garbage, what was reported
        and what the caller's budget was charged. ``None`` too for 0 prompt tokens reported for
        a prompt agentgate bounded (``Authorization.prompt_tokens`` above 0): no count of a
        prompt that was sent, charged as a usage that leaves its prompt out is."""
        counts = _usage_counts(usage)
        if counts is None:
            charged = f" ({auth.reservations[0][2]} {auth.reservations[0][1]})" if auth.reservations else ""
            reasons.append(
                f"reported usage {quoted(usage)} is not two token counts from 0 to "
                f"{MAX_USAGE_TOKENS:,}; charged as reserved{charged}"
            )
            return None
        if prompt_unreported(counts, auth):
            # A prompt agentgate bounded was sent (the gateway's request body, a dispatched
            # LangGraph call's payload: never empty, a chat template's tokens at least), so 0
            # prompt tokens is no count of it: charged as a usage that leaves ``prompt_tokens``
            # out is (``reports_usage``). Until review R69 the prompt went free.
            zero = (
                f"the backend reported 0 prompt tokens for a prompt of at most {auth.prompt_tokens}; "
                "charged as reserved"
            )
            reasons.append(zero)
            _log.warning("agentgate: audit entry %s: %s", auth.audit_index, zero)
            return None
        if auth.prompt_tokens is not None and counts[0] > auth.prompt_tokens:
            # Until review R67 a backend's count was charged whatever the prompt: 10^9 prompt
            # tokens for a prompt of 100 bytes drained the caller's budget in one call.
            over = (
                f"the backend reported {counts[0]} prompt tokens, over the {auth.prompt_tokens} "
                f"the prompt as sent can hold; charged {auth.prompt_tokens}"
            )
            reasons.append(over)
            _log.warning("agentgate: audit entry %s: %s", auth.audit_index, over)
            counts = (auth.prompt_tokens, counts[1])
        capped = _output_capped(counts, auth.output_tokens)
        if capped is not counts:
            over = (
                f"the backend reported {counts[1]} completion tokens, over the call's max_tokens "
                f"of {capped[1]}; charged {capped[1]}"
            )
            reasons.append(over)
            _log.warning("agentgate: audit entry %s: %s", auth.audit_index, over)
        return self._priced(auth.call, capped)
