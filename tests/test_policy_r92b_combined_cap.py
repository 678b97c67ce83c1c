"""Review R92's regression review of fd7984d4: besides the cap of MAX_RULES_ON_ONE_RESOURCE rules a
role holds on each pattern, the fix capped a role's own pattern and the wildcard patterns over it
together. That refused policies that loaded before (40 rules on ``tool:*`` and 30 on
``tool:payments.refund``), while the same 70 inherited from two roles loaded; and it looked each
own pattern up in every held role once per wildcard over it (9 s instead of 0.58 s to load a role
with 4,000 rules on deep tool names). Now each pattern is capped on its own. Work is counted."""

from __future__ import annotations

import collections
from collections.abc import Iterable, Mapping

import pytest

import agentgate.policy._load as load_module
from agentgate.errors import PolicyError
from agentgate.policy import parse_policy
from agentgate.policy._load import MAX_RULES_ON_ONE_RESOURCE as MOST

HEAD = [
    "version: 1",
    "tools:",
    "  x: {args: {n: {type: integer}}}",
    "  payments.refund: {args: {n: {type: integer}}}",
]


def _rules(pattern: str, n: int, start: int = 0) -> list[str]:
    return [f"      - {{resource: '{pattern}', constraints: {{n: {{le: {start + i}}}}}}}" for i in range(n)]


def _role(name: str, rules: list[str], inherits: Iterable[str] = ()) -> list[str]:
    parents = list(inherits)
    return [
        f"  {name}:",
        "    ttl_s: 60",
        *([f"    inherits: [{', '.join(parents)}]"] if parents else []),
    ] + (["    capabilities:", *rules] if rules else [])


REFUND = "tool:payments.refund"
BASE_AND_PAY = [*_role("base", _rules("tool:*", 40)), *_role("pay", _rules(REFUND, 30, 100))]
# The review's realistic.py cases refused at fd7984d4; each loaded before it and loads again.
LOADED_BEFORE = {
    "own 40 on tool:* and 30 on the refund": _role("r", [*_rules("tool:*", 40), *_rules(REFUND, 30, 100)]),
    "40 on tool:* from one parent, 30 own on the refund": [
        *_role("base", _rules("tool:*", 40)),
        *_role("r", _rules(REFUND, 30, 100), ["base"]),
    ],
    "40 and 30 from two parents, one own on the refund": [
        *BASE_AND_PAY,
        *_role("r", [f"      - {{resource: '{REFUND}'}}"], ["base", "pay"]),
    ],
    "own 5 on tool:* and 60 on the refund": _role("r", [*_rules("tool:*", 5), *_rules(REFUND, 60, 100)]),
    "own 40 on tool:payments.* and 30 on the refund": _role(
        "r", [*_rules("tool:payments.*", 40), *_rules(REFUND, 30, 100)]
    ),
}


def _text(body: list[str]) -> str:
    return "\n".join([*HEAD, "roles:", *body]) + "\n"


@pytest.mark.parametrize("body", LOADED_BEFORE.values(), ids=LOADED_BEFORE)
def test_rules_on_a_pattern_and_on_wildcards_over_it_are_capped_each_on_its_own(body: list[str]) -> None:
    assert parse_policy(_text(body), source="p.yaml").rules["r"]


def test_each_pattern_is_still_capped() -> None:
    with pytest.raises(PolicyError) as caught:
        parse_policy(
            _text(_role("r", [*_rules("tool:*", MOST), *_rules(REFUND, MOST + 1, 100)])), source="p.yaml"
        )
    assert caught.value.line == len(HEAD) + 5 + MOST  # the role's first rule on the refund
    assert f"role r holds {MOST + 1} rules on {REFUND}, its own and inherited ones" in caught.value.message
    assert f"at most {MOST} rules of a role on one resource pattern" in str(caught.value)


class _CountingCounter(collections.Counter[str]):
    """Counts the patterns looked up in, or added to, a role's rule counts."""

    work = 0

    def get(self, key: str, default: int | None = None) -> int | None:  # type: ignore[override]
        _CountingCounter.work += 1
        return super().get(key, default)

    def update(self, iterable: object = None, /, **kwds: int) -> None:  # type: ignore[override]
        if isinstance(iterable, Mapping):
            _CountingCounter.work += len(iterable)
        super().update(iterable, **kwds)  # type: ignore[arg-type]


def test_an_own_pattern_is_looked_up_once_in_each_held_role_however_deep_its_name(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The review's perf_deep shape, small: a chain of one-rule roles and a role inheriting its end
    with rules on deep names (``tool:a.a.....z00001``, dozens of wildcards over each)."""
    chain, own = 30, 200
    body = ["  c0: {capabilities: [{resource: 'tool:y0'}]}"]
    body += [
        f"  c{i}: {{inherits: [c{i - 1}], capabilities: [{{resource: 'tool:y{i}'}}]}}"
        for i in range(1, chain)
    ]
    body += ["  big:", f"    inherits: [c{chain - 1}]", "    capabilities:"]
    body += [f"      - {{resource: 'tool:{'a.' * 40}z{i:05d}'}}" for i in range(own)]
    monkeypatch.setattr(load_module, "Counter", _CountingCounter)
    _CountingCounter.work = 0
    parse_policy(_text(body), source="p.yaml")
    held_lookups = (
        own * (chain + 1) + chain * chain
    )  # big's patterns in it and the chain; each c_i's in its own
    assert _CountingCounter.work <= 2 * held_lookups  # at fd7984d4: about 40 times that
