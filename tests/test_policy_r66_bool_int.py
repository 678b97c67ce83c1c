"""Review R66: a policy's decisions on booleans beside the numbers 0 and 1 (Python's
``True == 1``): checked, sound."""

from __future__ import annotations

from agentgate.capabilities import Call
from agentgate.findings import Outcome
from agentgate.policy import PolicyIndex, parse_policy

POLICY = """version: 1
principals:
  bob: {kind: agent, roles: [r]}
tools:
  b: {args: {x: {type: boolean}}}
  i: {args: {x: {type: integer}}}
  n: {args: {x: {type: number}}}
roles:
  r:
    ttl_s: 60
    capabilities:
      - {resource: 'tool:b', constraints: {x: {eq: true}}}
      - {resource: 'tool:i', constraints: {x: {in: [0, 1]}}}
      - {resource: 'tool:n', constraints: {x: {ge: 0, le: 1}}}
"""


def test_a_rule_on_numbers_admits_no_boolean_and_a_rule_on_true_no_number() -> None:
    """Review R66: checked, sound: ``x = true`` on a boolean argument admits ``true`` only (not
    ``1``, ``1.0``, ``false``); ``x in {0, 1}`` on an integer argument and ``0 <= x <= 1`` on a
    number admit no boolean, whatever rule an earlier call was decided by."""
    index = PolicyIndex(parse_policy(POLICY, source="p.yaml"))
    allowed = {
        tool: [
            v
            for v in (True, False, 1, 0, 1.0, 0.0)
            if index.evaluate("bob", Call.tool(tool, {"x": v})).outcome == Outcome.ALLOW
        ]
        for tool in ("b", "i", "n")
    }
    assert allowed == {"b": [True], "i": [1, 0], "n": [1, 0, 1.0, 0.0]}
    assert [type(v) for v in allowed["i"] + allowed["n"]] == [int, int, int, int, float, float]
