"""Review R88: the idempotency key joined tenant, principal, grant, run and call ids, tool and
argument digest with NUL, and a ``ToolCall`` takes a NUL in any of them: tenant "acme" with
principal "ops\\0bot" had the key of tenant "acme\\0ops" with principal "bot", and the second
tenant's call was handed the first one's result without its tool running. A part with a NUL now
keys the call by the JSON array of its parts; keys without a NUL are what they were (a store's
once-only rows still match them).

Real components: a ``Scheduler`` and the public ``idempotency_key``."""

from __future__ import annotations

import asyncio
import hashlib
import itertools

from agentgate.tasks import Attempt, Scheduler, ToolCall, idempotency_key

_DIGEST = "0" * 64


def _call(tenant: str, principal: str) -> ToolCall:
    return ToolCall("refund", {"amount": 10}, tenant=tenant, principal=principal, run_id="r1", call_id="c1")


def test_a_nul_moved_between_tenant_and_principal_is_another_call() -> None:
    first, second = _call("acme", "ops\0bot"), _call("acme\0ops", "bot")
    assert first.idempotency_key() != second.idempotency_key()

    async def main() -> list[str]:
        scheduler = Scheduler()
        try:

            async def refund(attempt: Attempt) -> str:
                return f"refunded for {attempt.call.tenant!r}"

            return [await scheduler.submit(first, refund), await scheduler.submit(second, refund)]
        finally:
            await scheduler.aclose()

    assert asyncio.run(main()) == ["refunded for 'acme'", "refunded for 'acme\\x00ops'"]


def test_every_neighbouring_pair_of_parts_is_told_apart_through_a_nul() -> None:
    names = ("tenant", "principal", "grant", "run_id", "tool", "call_id", "digest")
    base = dict(zip(names, ("t", "p", "g", "r", "x", "c", _DIGEST), strict=True))

    def key(parts: dict[str, str]) -> str:
        return idempotency_key(
            parts["run_id"],
            parts["tool"],
            parts["call_id"],
            parts["digest"],
            tenant=parts["tenant"],
            principal=parts["principal"],
            grant=parts["grant"],
        )

    for left, right in itertools.pairwise(names):
        nul_on_the_left = dict(base, **{left: "a\0b", right: "c"})
        nul_on_the_right = dict(base, **{left: "a", right: "b\0c"})
        assert key(nul_on_the_left) != key(nul_on_the_right), (left, right)


def test_a_key_without_a_nul_is_unchanged() -> None:
    material = "\0".join(("agentgate-idempotency-v2", "acme", "bot", "g1", "r1", "refund", "c1", _DIGEST))
    expected = hashlib.sha256(material.encode("utf-8")).hexdigest()
    assert (
        idempotency_key("r1", "refund", "c1", _DIGEST, tenant="acme", principal="bot", grant="g1") == expected
    )
