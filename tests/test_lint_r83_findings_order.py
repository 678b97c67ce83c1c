"""Review R83: the docstring of ``RULES`` (agentgate/policy/_lint/__init__.py) said that their
order is the order of the findings on one line; ``lint`` sorts by line, then by code."""

from __future__ import annotations

from pathlib import Path

from agentgate.errors import PolicyError
from agentgate.policy import RULES, lint, load_policy

CORPUS = Path(__file__).parent / "corpus"


def test_findings_are_ordered_by_line_then_code_whatever_the_order_of_the_rules() -> None:
    """The same findings in the same order, with the rules run in reverse; within one line by
    code. Holds for every corpus policy that loads."""
    for path in sorted(CORPUS.glob("*/policy.yaml")):
        try:
            policy = load_policy(path)
        except PolicyError:  # a corpus case that is a load error has no findings to order
            continue
        found = lint(policy)
        assert lint(policy, tuple(reversed(RULES))) == found, path
        keys = [(f.line or 0, f.code) for f in found]
        assert keys == sorted(keys), path
