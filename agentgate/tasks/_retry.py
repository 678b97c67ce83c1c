"""Retry decisions: may this failed attempt be tried again?

A rule looks at one ``Failure`` and returns an objection (a short reason) or None. Rules compose
with ``&``: the combination objects with the first objection of its parts, so the reason a call
gave up is always the rule that stopped it, and it is what the dead letter records. The
scheduler's rule for a tool is ``rule_for(limits)``:

    retry_on_classes(policy.retry_on) & safe_to_repeat() & attempts_left(policy.attempts)

``safe_to_repeat`` is the safety rule: after an ambiguous failure (a timeout, a lost connection,
any error but a transient one) the effect may have happened, so the attempt is repeated only for a tool that is idempotent or
that takes the call's idempotency key (and the call has one). No policy setting overrides it.
The deadline is checked by the scheduler, which knows the backoff delay.
"""

from __future__ import annotations

from dataclasses import dataclass

from agentgate.tasks._config import SAFE_CLASS, ToolLimits


@dataclass(frozen=True)
class Failure:
    """One failed attempt, as the retry rules see it."""

    error: BaseException
    error_class: str
    attempt: int
    limits: ToolLimits
    has_idempotency_key: bool

    @property
    def ambiguous(self) -> bool:
        """True when the effect may or may not have happened: every class but ``transient``, the
        built-in ``AMBIGUOUS_CLASSES`` and every custom class (no classifier can vouch that a
        class of its own comes before the effect; classify such a failure ``transient``)."""
        return self.error_class != SAFE_CLASS


class RetryRule:
    """Returns why ``failure`` must not be retried, or None when this rule allows a retry."""

    def objection(self, failure: Failure) -> str | None:
        raise NotImplementedError

    def __and__(self, other: RetryRule) -> RetryRule:
        return _AllOf((self, other))


class _AllOf(RetryRule):
    def __init__(self, parts: tuple[RetryRule, ...]) -> None:
        self.parts = parts

    def objection(self, failure: Failure) -> str | None:
        for part in self.parts:
            reason = part.objection(failure)
            if reason is not None:
                return reason
        return None


class retry_on_classes(RetryRule):
    """Retry only failures whose error class is listed."""

    def __init__(self, classes: tuple[str, ...]) -> None:
        self.classes = frozenset(classes)

    def objection(self, failure: Failure) -> str | None:
        return None if failure.error_class in self.classes else "not_retryable"


class safe_to_repeat(RetryRule):
    """Never repeat a possibly-done effect unless the tool is idempotent or deduplicates by key."""

    def objection(self, failure: Failure) -> str | None:
        if not failure.ambiguous:
            return None
        if failure.limits.idempotent:
            return None
        if failure.limits.takes_idempotency_key and failure.has_idempotency_key:
            return None
        return "ambiguous_not_idempotent"


class attempts_left(RetryRule):
    """At most ``attempts`` attempts in all."""

    def __init__(self, attempts: int) -> None:
        self.attempts = attempts

    def objection(self, failure: Failure) -> str | None:
        return None if failure.attempt < self.attempts else "attempts_exhausted"


def rule_for(limits: ToolLimits) -> RetryRule:
    """The retry rule the scheduler applies to ``limits``' tool."""
    policy = limits.retry
    return retry_on_classes(policy.retry_on) & safe_to_repeat() & attempts_left(policy.attempts)
