"""A ``ToolCall`` made without an ``arguments_digest`` (a scheduler used without the Gate) keys
its idempotency by its ``arguments`` as they are when the key is read: R92 kept the key computed
at the first read with every call, so the same call object submitted again after its arguments
dict changed got the first submit's result, its tool never run (R92's regression review of
f69a7c5b). A call with an ``arguments_digest`` (the Gate's) keeps its key: its digest is fixed."""

from __future__ import annotations

from typing import Any

from agentgate.tasks import SyncScheduler, ToolCall


def test_a_call_submitted_again_after_its_arguments_changed_runs_with_them() -> None:
    arguments: dict[str, Any] = {"amount": 10}
    call = ToolCall("refund", arguments, run_id="r", call_id="c")
    ran: list[int] = []

    def tool(attempt: Any) -> str:
        ran.append(call.arguments["amount"])
        return f"refunded {call.arguments['amount']}"

    with SyncScheduler() as scheduler:
        assert scheduler.submit(call, tool) == "refunded 10"
        arguments["amount"] = 50
        assert scheduler.submit(call, tool) == "refunded 50"
    assert ran == [10, 50]


def test_a_key_read_before_the_arguments_were_filled_in_is_not_kept() -> None:
    arguments: dict[str, Any] = {}
    call = ToolCall("refund", arguments, run_id="r", call_id="c")
    early = call.idempotency_key()
    arguments["amount"] = 50
    assert call.idempotency_key() != early


def test_a_call_with_an_arguments_digest_keeps_its_key() -> None:
    arguments: dict[str, Any] = {"amount": 10}
    call = ToolCall("refund", arguments, run_id="r", call_id="c", arguments_digest="ab" * 32)
    first = call.idempotency_key()
    arguments["amount"] = 50
    assert call.idempotency_key() == first
