"""What an agent's name may be (``Gate.issue``, ``Gate.delegate``, and ``delegation_tool``, which
checks its sub-agent's name when it is made and delegates through ``Gate.delegate``): one line of
visible text, 1 to ``MAX_AGENT_NAME_CHARS`` (200) characters. A name is signed into a grant's
purpose, recorded in its audit entry (``agent:NAME``) and set on every span of the agent's calls,
which cut names at 200 characters; a character that is not printable (a control character, a
bidi override, an invisible format character, a line separator) hides in, or reorders, what a
reader of the log and the traces sees. Anything else is an ``InputError`` naming the name, with
nothing written. Until review R56 a name of any length (up to the 64 KiB audit entry) and any
character but a lone surrogate was taken.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

import pytest
from test_gate import Setup
from test_gate import setup as setup  # the fixture

from agentgate.errors import InputError
from agentgate.gate import AgentIdentity
from agentgate.integrations.langgraph import delegation_tool

MAX_AGENT_NAME_CHARS = 200
"""``agentgate.gate.MAX_AGENT_NAME_CHARS`` (``test_the_bound_is_the_one_spans_cut_names_at``)."""


def _issue(setup: Setup, name: str) -> AgentIdentity:
    # The agent's key: since review R58 Gate.issue refuses a key the policy does not name (the helper's).
    return setup.gate.issue(setup.keys["root"], name=name, key=setup.keys["agent"], role="worker")


def _delegate(setup: Setup, name: str) -> AgentIdentity:
    return setup.gate.delegate(
        setup.agent,
        name=name,
        key=setup.keys["helper"],
        capabilities=["tool:lookup"],
        ttl=timedelta(seconds=60),
    )


GRANTS: dict[str, Callable[[Setup, str], AgentIdentity]] = {"issue": _issue, "delegate": _delegate}


def _refused_and_nothing_written(
    setup: Setup, grant: Callable[[Setup, str], AgentIdentity], name: str
) -> str:
    setup.gate.flush()
    before = setup.gate.audit.size()
    with pytest.raises(InputError) as refused:
        grant(setup, name)
    setup.gate.flush()
    assert setup.gate.audit.size() == before
    assert setup.gate.delegations == []
    return str(refused.value)


def test_the_bound_is_the_one_spans_cut_names_at() -> None:
    """A name within the bound reaches every span whole (``gen_ai.agent.name``, ``agent:NAME``)."""
    import agentgate.gate
    from agentgate.audit.spans import MAX_CALL_ID_CHARS

    assert agentgate.gate.MAX_AGENT_NAME_CHARS == MAX_AGENT_NAME_CHARS == MAX_CALL_ID_CHARS


@pytest.mark.parametrize("verb", GRANTS)
def test_a_name_longer_than_the_bound_is_refused_naming_it(setup: Setup, verb: str) -> None:
    """Review R56: Gate.issue and Gate.delegate took an agent's name of any length."""
    for length in (MAX_AGENT_NAME_CHARS + 1, 60_000):
        message = _refused_and_nothing_written(setup, GRANTS[verb], "a" * length)
        assert f"name must be at most {MAX_AGENT_NAME_CHARS} characters, got {length:,}" in message
        assert "a" * 100 not in message  # the name is not quoted whole


@pytest.mark.parametrize("verb", GRANTS)
def test_a_name_of_the_bound_is_granted_and_recorded_whole(setup: Setup, verb: str) -> None:
    name = "n" * MAX_AGENT_NAME_CHARS
    identity = GRANTS[verb](setup, name)
    assert identity.name == name
    setup.gate.flush()
    assert list(setup.gate.audit.entries())[-1].resource == f"agent:{name}"


HIDDEN = [
    ("boss\x1b[31m", "control character '\\x1b' (U+001B) at character 5"),
    ("boss\nroot", "control character '\\n' (U+000A) at character 5"),
    ("\u202eboss", "bidirectional-text control character U+202E at character 1"),
    ("bo\u200bss", "invisible format character U+200B at character 3"),
    ("boss\u2028", "line separator U+2028 at character 5"),
]


@pytest.mark.parametrize("verb", GRANTS)
@pytest.mark.parametrize(
    ("name", "named"), HIDDEN, ids=["escape", "newline", "bidi", "zero-width", "line-sep"]
)
def test_a_name_holding_a_character_that_is_not_printable_is_refused(
    setup: Setup, verb: str, name: str, named: str
) -> None:
    """Review R56: an agent's name could hide an escape sequence or a bidi override in the log and traces."""
    message = _refused_and_nothing_written(setup, GRANTS[verb], name)
    assert "name holds " + named in message


def test_visible_text_beyond_ascii_is_a_name(setup: Setup) -> None:
    assert _issue(setup, "Forscher für Räume 研究").name == "Forscher für Räume 研究"


@pytest.mark.parametrize("name", ["r" * (MAX_AGENT_NAME_CHARS + 1), "researcher\u202e"], ids=["long", "bidi"])
def test_delegation_tool_refuses_such_a_name_when_it_is_made(setup: Setup, name: str) -> None:
    """Review R56: the LangGraph sub-agent's name goes through the same check, before any call."""
    with pytest.raises(InputError, match="name "):
        delegation_tool(
            setup.gate,
            name=name,
            agent=object(),
            key=setup.keys["helper"],
            capabilities=["tool:lookup"],
            ttl=timedelta(seconds=60),
        )


def _issue_for_tenant(setup: Setup, tenant: object) -> AgentIdentity:
    return setup.gate.issue(
        setup.keys["root"],
        name="helper",
        key=setup.keys["agent"],  # a principal of the policy (review R58)
        role="worker",
        tenant=tenant,  # type: ignore[arg-type]
    )


@pytest.mark.parametrize(
    ("tenant", "named"),
    [
        ("t" * (MAX_AGENT_NAME_CHARS + 1), f"tenant name must be at most {MAX_AGENT_NAME_CHARS} characters"),
        ("t" * 60_000, f"tenant name must be at most {MAX_AGENT_NAME_CHARS} characters, got 60,000"),
        ("acme\u202e", "tenant name holds bidirectional-text control character U+202E at character 5"),
        ("acme\nroot", "tenant name holds control character '\\n' (U+000A) at character 5"),
        ("ac\u200bme", "tenant name holds invisible format character U+200B at character 3"),
    ],
    ids=["over-bound", "60k", "bidi", "newline", "zero-width"],
)
def test_a_tenant_that_is_no_name_is_refused_naming_it(setup: Setup, tenant: str, named: str) -> None:
    """Review R56: Gate.issue(tenant=...) took any length and any character, onto the identity and its sub-agents."""
    message = _refused_and_nothing_written(setup, _issue_for_tenant, tenant)
    assert named in message
    assert "t" * 100 not in message  # the tenant is not quoted whole


def test_a_tenant_that_is_not_text_is_refused_without_quoting_the_name(setup: Setup) -> None:
    """Review R56: a tenant that was not text was refused with the whole name quoted in the error."""
    with pytest.raises(InputError, match="tenant must be text or None, got 5"):
        _issue_for_tenant(setup, 5)
    with pytest.raises(InputError) as refused:
        setup.gate.issue(
            setup.keys["root"],
            name="n" * 60_000,
            key=setup.keys["helper"],
            role="worker",
            tenant=5,  # type: ignore[arg-type]
        )
    assert len(str(refused.value)) < 200


def test_a_tenant_of_the_bound_in_visible_text_is_the_identitys(setup: Setup) -> None:
    tenant = "Mandant für Räume " + "m" * (MAX_AGENT_NAME_CHARS - 18)
    identity = _issue_for_tenant(setup, tenant)
    assert identity.tenant == tenant
    assert _issue_for_tenant(setup, None).tenant == "default"
