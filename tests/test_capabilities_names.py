"""A capability's action and its argument names are bounded as a call's action is: a lower-case
identifier (or ``*``) and identifier segments, each at most ``MAX_NAME_LENGTH`` (200) characters,
wherever a capability enters: built in Python, read from a grant token, loaded from a policy."""

from __future__ import annotations

import base64
from typing import Any

import pytest

from agentgate.authority import parse_chain, verify_chain
from agentgate.authority._encoding import canonical_json
from agentgate.capabilities import MAX_NAME_LENGTH, Capability, parse_capability
from agentgate.errors import CapabilityError, PolicyError, TokenFormatError
from agentgate.keys import SigningKey
from agentgate.policy import parse_policy

ROOT, AGENT = SigningKey.generate(), SigningKey.generate()
LONG = "a" * (MAX_NAME_LENGTH + 1)


def test_a_capability_action_over_the_bound_is_refused_naming_the_action() -> None:
    """Review R57: a capability's action had no length limit (a call's action had one)."""
    assert Capability.of("tool:pay", "a" * MAX_NAME_LENGTH).action == "a" * MAX_NAME_LENGTH
    assert Capability.of("tool:pay", "*").action == "*"
    with pytest.raises(CapabilityError, match=r"a capability's action 'a{40}'\.\.\. is 201 characters long"):
        Capability.of("tool:pay", LONG)
    with pytest.raises(CapabilityError, match="a capability's action"):
        parse_capability(f"tool:pay#{LONG}")


def test_a_constraint_argument_name_over_the_bound_is_refused_naming_the_argument() -> None:
    """Review R57: a constraint's argument name had no length limit."""
    name = "n" * MAX_NAME_LENGTH
    assert Capability.of("tool:pay", None, {name: {"le": 5}}).constraints[0][0] == name
    with pytest.raises(
        CapabilityError, match=r"tool:pay: argument name 'a{40}'\.\.\. is 201 characters long"
    ):
        Capability.of("tool:pay", None, {LONG: {"le": 5}})
    with pytest.raises(CapabilityError, match="argument name"):
        parse_capability(f"tool:pay?{LONG}<=5")
    with pytest.raises(CapabilityError, match="is not an identifier"):
        Capability.of("tool:pay", None, {"not one": {"le": 5}})


def _token(cap: dict[str, Any]) -> str:
    """A root grant from ``ROOT`` to ``AGENT`` holding ``cap``, signed, in its wire form."""
    payload = canonical_json(
        {
            "v": 1,
            "iss": ROOT.did,
            "aud": AGENT.did,
            "caps": [cap],
            "budget": None,
            "nbf": 1_800_000_000 - 60,
            "exp": 1_800_000_000 + 3600,
            "depth": 0,
            "nonce": "0" * 32,
            "purpose": "",
            "parent": None,
        }
    )
    signature = ROOT.sign(b"agentgate/grant/v1\x00" + payload)

    def b64(data: bytes) -> str:
        return base64.urlsafe_b64encode(data).rstrip(b"=").decode()

    return f"ag1.{b64(payload)}.{b64(signature)}"


@pytest.mark.parametrize(
    ("cap", "named"),
    [
        ({"resource": "tool:pay", "action": LONG, "constraints": {}}, "a capability's action"),
        (
            {"resource": "tool:pay", "action": "invoke", "constraints": {LONG: {"le": 5}}},
            "tool:pay: argument name",
        ),
    ],
    ids=["action", "argument-name"],
)
def test_a_signed_grant_with_a_name_over_the_bound_is_a_format_error_naming_the_field(
    cap: dict[str, Any], named: str
) -> None:
    """Review R57: a grant token whose capability held an action or an argument name of 201
    (or 8,000) characters verified; the verifier now refuses it, naming the link, the capability
    and the field."""
    within = {**cap, "action": "a" * MAX_NAME_LENGTH} if cap["action"] == LONG else cap
    if within is not cap:
        assert verify_chain(_token(within), [ROOT.did], now=1_800_000_000).holder == AGENT.did
    token = _token(cap)
    for refuse in (lambda: parse_chain(token), lambda: verify_chain(token, [ROOT.did], now=1_800_000_000)):
        with pytest.raises(TokenFormatError) as refused:
            refuse()
        assert f"link 0 caps[0]: {named}" in str(refused.value)
        assert "is 201 characters long, more than 200" in str(refused.value)
        assert len(str(refused.value)) < 300


def _policy_error(text: str) -> PolicyError:
    with pytest.raises(PolicyError) as refused:
        parse_policy(text, source="p.yaml")
    return refused.value


def test_a_policy_action_over_the_bound_is_refused_at_its_line() -> None:
    """Review R57: a policy rule's action had no length limit."""
    error = _policy_error(
        f"version: 1\nroles:\n  r:\n    capabilities:\n      - resource: tool:t\n        action: {LONG}\n"
    )
    assert error.line == 6
    assert "a capability's action 'aaaa" in error.message and "is 201 characters long" in error.message


def test_a_policy_argument_name_over_the_bound_is_refused_at_its_key() -> None:
    """Review R57: a policy rule's constrained argument name had no length limit."""
    error = _policy_error(
        "version: 1\nroles:\n  r:\n    capabilities:\n      - resource: tool:t\n"
        f"        constraints:\n          n: {{le: 1}}\n          {LONG}: {{le: 1}}\n"
    )
    assert error.line == 8
    assert "tool:t: argument name 'aaaa" in error.message and "is 201 characters long" in error.message


def test_an_approval_gate_argument_name_over_the_bound_is_refused_at_its_key() -> None:
    """Review R57: an approval gate's ``when`` argument name had no length limit."""
    head = "version: 1\nprincipals:\n  boss: {kind: human}\napprovals:\n  g:\n    resource: tool:t\n"
    fine = parse_policy(
        head + f"    approvers: [boss]\n    when:\n      {'n' * 200}: {{le: 1}}\n", source="p.yaml"
    )
    assert fine is not None
    error = _policy_error(head + f"    approvers: [boss]\n    when:\n      {LONG}: {{le: 1}}\n")
    assert error.line == 9
    assert "approval gate g: argument name 'aaaa" in error.message and "201 characters long" in error.message
