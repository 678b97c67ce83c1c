"""Review R66: ``dotted_path`` joined a location's keys with dots, so a key that holds a dot
(a tool named ``payments.refund``, an argument ``a.b``) read as two levels of nesting:
``tools.payments.refund.rate`` named a ``refund`` under a tool ``payments``, and an argument
``a.b`` read as ``b`` under ``a``. Such a key is quoted as a Python string shows it, as a key
holding a character that is not printable already was; so is a key that reads as a list index."""

from __future__ import annotations

import pytest

from agentgate._yaml import dotted_path
from agentgate.errors import PolicyError
from agentgate.policy import parse_policy


@pytest.mark.parametrize(
    ("loc", "shown"),
    [
        (("tools", "payments.refund", "rate"), "tools.'payments.refund'.rate"),
        (("roles", "r", "capabilities", 3, "constraints", "a.b"), "roles.r.capabilities.3.constraints.'a.b'"),
        (("roles", "3", "ttl_s"), "roles.'3'.ttl_s"),
        (("settings", "'x'"), "settings.\"'x'\""),
        (("roles", "lead", "ttl_s"), "roles.lead.ttl_s"),
        (("roles", ""), "roles.''"),
    ],
)
def test_a_key_that_would_read_as_another_path_is_quoted(loc: tuple[str | int, ...], shown: str) -> None:
    """Review R66: each shown path names one location only."""
    assert dotted_path(loc) == shown


def test_an_error_under_a_tool_named_with_a_dot_names_the_tool_whole() -> None:
    """Review R66: the message a reader acts on, from a policy."""
    text = "version: 1\ntools:\n  payments.refund:\n    rate:\n"
    with pytest.raises(PolicyError) as caught:
        parse_policy(text, source="p.yaml")
    assert "tools.'payments.refund'.rate" in caught.value.message, caught.value.message
