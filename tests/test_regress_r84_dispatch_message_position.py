"""Review R84: ``Dispatcher.chat`` passed over the entries of ``messages`` that are not objects
before writing the prompt's text, so a message whose role or content cannot be written was named
by its position among the objects: ``['junk', {'role': 10**5000, ...}]`` said "message 0's role".
It is now named by its position in the caller's list, and ``prompt_text`` and
``estimate_prompt_tokens`` pass over such an entry there, keeping the positions."""

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
HUGE = 10**5000
MESSAGES: list[Any] = ["junk", 7, {"role": "user", "content": "hi"}, {"role": HUGE, "content": "x"}]


def test_the_dispatcher_names_the_message_by_its_position_in_the_callers_list() -> None:
    router = Router(INVENTORY)

    async def call() -> None:
        async with Dispatcher(INVENTORY, router, max_attempts=1, recovery_wait_s=0) as dispatcher:
            await dispatcher.chat({"model": "m", "messages": MESSAGES})

    with pytest.raises(InputError, match=r"^message 3's role holds an integer too long to write$"):
        asyncio.run(call())
    assert router.states["b"].in_flight == 0


def test_prompt_text_and_the_estimate_keep_the_positions_past_an_entry_that_is_not_an_object() -> None:
    for measure in (prompt_text, estimate_prompt_tokens):
        with pytest.raises(InputError, match=r"^message 3's role"):
            measure(MESSAGES)


def test_an_entry_that_is_not_an_object_adds_nothing_to_the_prompt() -> None:
    messages = [{"role": "user", "content": "hi"}]
    assert prompt_text(["junk", *messages, None]) == prompt_text(messages)
    assert estimate_prompt_tokens(["junk", *messages, None]) == estimate_prompt_tokens(messages)
