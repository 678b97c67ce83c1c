"""Review R84 (regression): ``prefix.prompt_text`` refused a message's content that cannot be
written (nested deeper than the recursion limit, an integer of more than 4,300 digits) with an
``InputError``, but wrote the ``role`` unprotected, so the same values as a role still raised
``RecursionError`` or ``ValueError`` out of ``prompt_text``, ``estimate_prompt_tokens`` and
``Dispatcher.chat`` and ``stream``. The role is now refused alike, naming the message and the
role, before the call is routed."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from agentgate.dispatch import Dispatcher, estimate_prompt_tokens, inventory_from_mapping, prompt_text
from agentgate.dispatch.router import Router
from agentgate.errors import InputError

INVENTORY = inventory_from_mapping(
    {"backends": [{"name": "b", "url": "http://127.0.0.1:9", "engine": "vllm", "models": ["m"]}]}
)


def _nested(depth: int) -> list[Any]:
    deep: list[Any] = []
    for _ in range(depth):
        deep = [deep]
    return deep


ROLES = {
    "lists-2000-deep": (_nested(2000), r"^message 1's role is nested too deeply$"),
    "integer-of-5000-digits": (10**5000, r"^message 1's role holds an integer too long to write$"),
}


def _messages(role: object) -> list[dict[str, object]]:
    return [{"role": "system", "content": "s"}, {"role": role, "content": "hi"}]


@pytest.mark.parametrize("case", sorted(ROLES))
def test_a_role_with_no_text_is_an_input_error_naming_the_message(case: str) -> None:
    role, message = ROLES[case]
    for count in (prompt_text, estimate_prompt_tokens):
        with pytest.raises(InputError, match=message):
            count(_messages(role))


@pytest.mark.parametrize("verb", ["chat", "stream"])
@pytest.mark.parametrize("case", sorted(ROLES))
def test_the_dispatcher_refuses_such_a_role_before_routing(verb: str, case: str) -> None:
    role, message = ROLES[case]
    payload = {"model": "m", "messages": _messages(role)}
    router = Router(INVENTORY)

    async def call() -> None:
        async with Dispatcher(INVENTORY, router, max_attempts=1, recovery_wait_s=0) as dispatcher:
            if verb == "chat":
                await dispatcher.chat(payload)
            else:
                async for _ in dispatcher.stream(payload):
                    pass

    with pytest.raises(InputError, match=message):
        asyncio.run(call())
    assert router.states["b"].in_flight == 0


def test_a_role_that_is_not_text_is_still_written_as_its_str() -> None:
    assert prompt_text([{"role": 7, "content": "x"}, {"content": "y"}]) == "<7>\nx\n<>\ny\n"
