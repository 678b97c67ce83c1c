"""``agentgate.policy.explain`` (agentgate/policy/_explain.py): the decision and its account in
words, for any call ``PolicyIndex.evaluate`` decides."""

from __future__ import annotations

from typing import Any

from agentgate.capabilities import Call
from agentgate.findings import Outcome
from agentgate.policy import PolicyIndex, explain, parse_policy

POLICY = """version: 1
principals:
  bot: {kind: service, roles: [r]}
tools:
  t: {args: {x: {type: number}}}
models:
  m: {cost_per_mtok: {input: 1, output: 1}}
roles:
  r:
    capabilities:
      - resource: tool:t
        constraints: {x: {ge: 5}}
      - resource: model:m
    ttl_s: 60
"""


def test_a_call_holding_an_integer_too_long_to_write_is_explained() -> None:
    """Mutant: the account's first line wrote the call's arguments with ``repr``, which Python
    refuses for an integer of more than 4,300 digits: ``explain`` raised a bare ``ValueError``
    for a call that ``evaluate`` decides (a deny that says why).

    Rule: ``explain`` returns the decision and its account for every call; an argument it
    cannot write in decimal is named, the others are written as they are."""
    index = PolicyIndex(parse_policy(POLICY, source="p.yaml"))
    huge = 10**5000
    decision, said = explain(index, "bot", Call.tool("t", {"x": huge}))
    # Denied since review R58: an integer argument lies within -2**63 < v < 2**63.
    assert decision.outcome is Outcome.DENY and "beyond the range -2**63 < v < 2**63" in said
    assert said.splitlines()[0] == (
        'DENY: bot calling tool:t with {"x": <int with an integer of too many digits to write>}'
    )
    decision, said = explain(index, "bot", Call.tool("t", {"x": -huge}))
    assert decision.outcome is Outcome.DENY and "too many digits" in said
    decision, said = explain(index, "bot", Call.model("m", {"max_tokens": 5, "stop": [huge]}))
    # Denied since review R86c, as the Gate denies it: no canonical JSON writes such an integer.
    assert decision.outcome is Outcome.DENY and "(args_not_canonical)" in said
    assert '{"max_tokens": 5, "stop": <list with an integer of too many digits to write>}' in said


def test_a_bytes_principal_is_named_as_given_not_as_the_principal_it_spells() -> None:
    """Review R93: a principal given as bytes (from a Python caller) is denied, its reason quoting
    ``b'bot'``; the account's first line decoded the bytes and read "DENY: bot calling ...",
    naming a principal that is allowed the call. It now quotes the value as the reason does."""
    index = PolicyIndex(parse_policy(POLICY, source="p.yaml"))
    call = Call.tool("t", {"x": 7})
    given: Any = b"bot"
    decision, said = explain(index, given, call)
    assert decision.outcome is Outcome.DENY
    assert said.splitlines()[0] == "DENY: b'bot' (of type bytes, not text) calling tool:t with {\"x\": 7}"
    assert decision.reasons == ("b'bot' (of type bytes, not text) is not a principal of this policy",)
    # A number or None reads as none of the policy's principals ("123", "None") either.
    for given in (123, None):
        decision, said = explain(index, given, call)
        kind = type(given).__name__
        assert said.startswith(f"DENY: {given} (of type {kind}, not text) calling tool:t"), said
    decision, said = explain(index, "bot", call)
    assert decision.outcome is Outcome.ALLOW
    assert said.splitlines()[0] == 'ALLOW: bot calling tool:t with {"x": 7}'
