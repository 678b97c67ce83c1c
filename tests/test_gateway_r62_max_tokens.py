"""The gateway's reading of an output limit of 0 (review R62).

vLLM reads ``max_completion_tokens or max_tokens`` and its ``SamplingParams`` refuses a limit
below 1 (``max_tokens: 0`` is a 400 there, and OpenAI's API refuses 0 for either field as
"below minimum value"); the gateway signs, reserves and enforces the limit, so 0 cannot mean
"no limit" to it either: it is refused before a decision, the message naming the field read and
what to send instead. Real loopback HTTP against the gateway tests' ``env`` fixture."""

from __future__ import annotations

from typing import Any

import pytest
from test_gateway import MODEL, Env, _messages, _post

from agentgate.dispatch.gateway import invocation_headers, max_tokens_of
from agentgate.errors import InputError

pytest_plugins = ("test_gateway",)  # its ``backends`` and ``env`` fixtures


@pytest.mark.parametrize("field", ["max_tokens", "max_completion_tokens"])
def test_a_limit_of_zero_is_refused_naming_the_field_and_what_to_send(field: str) -> None:
    """Review R62: ``max_completion_tokens: 0`` was refused as "max_tokens must be ...", naming a
    field the body did not send, and neither message said what to send instead."""
    with pytest.raises(InputError) as raised:
        max_tokens_of({field: 0})
    message = str(raised.value)
    assert message.startswith(f"{field} must be a whole number from 1 to "), message
    assert "not 0" in message and "leave it out" in message, message


def test_the_field_read_is_the_one_named_when_both_are_sent() -> None:
    """Review R62: ``max_completion_tokens`` is the field read when both are sent: a bad one is
    reported under its own name, not as the (valid) ``max_tokens``."""
    with pytest.raises(InputError, match=r"^max_completion_tokens must be a whole number"):
        max_tokens_of({"max_completion_tokens": -3, "max_tokens": 8})


@pytest.mark.parametrize("field", ["max_tokens", "max_completion_tokens"])
def test_a_limit_of_zero_at_the_gateway_is_an_openai_400_with_nothing_charged(env: Env, field: str) -> None:
    """Review R62: over HTTP, a limit of 0 is a 400 ``invalid_request_error`` whose message names
    the field; nothing is reserved or charged."""
    body: dict[str, Any] = {"model": MODEL, "messages": _messages(), "max_tokens": 8}
    headers = invocation_headers(env.agent.key, env.agent.chain, body)  # any valid signature
    body.pop("max_tokens")
    body[field] = 0
    before = env.ledger()
    answer = _post(env, body, headers)
    assert answer.status_code == 400, answer.text
    error = answer.json()["error"]
    assert error["type"] == "invalid_request_error"
    assert f"{field} must be a whole number from 1 to " in error["message"], error
    assert "leave it out" in error["message"], error
    assert env.ledger() == before
