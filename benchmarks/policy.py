"""Policy evaluation against Cedar, and lint time, on equivalent policy sets of 10, 100, 1,000 rules.

Each set has N tools ``t{i}.run`` and one role holding N rules, rule i allowing ``t{i}.run`` when
``amount <= 500 + i`` (every rule distinct, so that nothing is shared between them); the principal
holds the role. The Cedar set is the same N ``permit`` policies
(``principal in Role::"worker"``, ``resource == Tool::"t{i}.run"``, ``when { context.amount <= 500 + i }``),
parsed once into a ``cedarpy.PolicySet``, with the entities parsed once into ``cedarpy.Entities``.
Requests are built before timing; both engines answer the same requests (half allowed, half
denied, spread over all tools) and their answers are checked to agree. Sizes and engines are
measured in interleaved blocks, so that load from other processes falls on all of them alike.

Run: ``.venv/bin/python benchmarks/policy.py [--quick] [--json]``. Prints a table, then one JSON line.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import cedarpy

from agentgate.capabilities import Call
from agentgate.policy import PolicyIndex, lint, parse_policy

SIZES = (10, 100, 1000)
DID = "did:key:z6MkqQP5oTUxZ95rgbJg29FwyrJ5N8HrRPpEBQbPrAUCkPXm"


def agentgate_policy(n: int) -> str:
    tools = "".join(
        f"  t{i}.run: {{args: {{amount: {{type: integer, required: true}}}}}}\n" for i in range(n)
    )
    rules = "".join(
        f"      - {{resource: 'tool:t{i}.run', constraints: {{amount: {{le: {500 + i}}}}}}}\n"
        for i in range(n)
    )
    return (
        f"version: 1\nprincipals:\n  svc: {{kind: service, did: {DID}, roles: [worker]}}\n"
        f"tools:\n{tools}roles:\n  worker:\n    ttl_s: 600\n    capabilities:\n{rules}"
    )


def cedar_policy(n: int) -> str:
    return "\n".join(
        f'permit(principal in Role::"worker", action == Action::"invoke", resource == Tool::"t{i}.run") '
        f"when {{ context.amount <= {500 + i} }};"
        for i in range(n)
    )


CEDAR_ENTITIES = json.dumps(
    [
        {
            "uid": {"type": "Principal", "id": "svc"},
            "attrs": {},
            "parents": [{"type": "Role", "id": "worker"}],
        },
        {"uid": {"type": "Role", "id": "worker"}, "attrs": {}, "parents": []},
    ]
)


def percentile(samples: list[int], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] / 1000.0  # ns -> us


class Setup:
    """One policy size: both engines' pre-parsed policies and the same prepared requests."""

    def __init__(self, n: int, calls: int, rng: random.Random) -> None:
        self.n = n
        self.index = PolicyIndex(parse_policy(agentgate_policy(n)))
        self.policy_set = cedarpy.PolicySet.from_str(cedar_policy(n))
        self.entities = cedarpy.Entities.from_json_str(CEDAR_ENTITIES)
        picks = [(rng.randrange(n), rng.choice((100, 2000))) for _ in range(calls)]
        self.calls = [Call.tool(f"t{i}.run", {"amount": amount}) for i, amount in picks]
        self.requests = [
            {
                "principal": 'Principal::"svc"',
                "action": 'Action::"invoke"',
                "resource": f'Tool::"t{i}.run"',
                "context": {"amount": amount},
            }
            for i, amount in picks
        ]
        # The same calls ordered by tool: what is left of the growth with size when the memory a
        # call touches is warm, i.e. whether the growth comes from the CPU caches or from the rules.
        self.sorted_calls = sorted(self.calls, key=lambda c: c.resource)
        self.ours_ns: list[int] = []
        self.sorted_ns: list[int] = []
        self.theirs_ns: list[int] = []
        for call, request in zip(self.calls[:200], self.requests[:200], strict=True):  # the engines agree
            ours = self.index.evaluate("svc", call).allowed
            assert ours == cedarpy.is_authorized(request, self.policy_set, self.entities).allowed

    def run_ours(self, start: int, count: int, *, by_tool: bool = False) -> None:
        clock, evaluate = time.perf_counter_ns, self.index.evaluate
        out, calls = (self.sorted_ns, self.sorted_calls) if by_tool else (self.ours_ns, self.calls)
        for call in calls[start : start + count]:
            t0 = clock()
            evaluate("svc", call)
            out.append(clock() - t0)

    def run_cedar(self, start: int, count: int) -> None:
        clock, out = time.perf_counter_ns, self.theirs_ns
        for request in self.requests[start : start + count]:
            t0 = clock()
            cedarpy.is_authorized(request, self.policy_set, self.entities)
            out.append(clock() - t0)


def measure(rounds: int, block: int, rng: random.Random) -> dict[int, dict[str, float]]:
    """Interleave sizes and engines block by block, so that machine load falls on all of them alike.

    Cedar at 1,000 rules takes milliseconds a call, so it gets a tenth of the calls there.
    """
    setups = [Setup(n, rounds * block, rng) for n in SIZES]
    for r in range(rounds):
        for setup in setups:
            setup.run_ours(r * block, block)
            setup.run_ours(r * block, block, by_tool=True)
            setup.run_cedar(r * block, block if setup.n < 1000 else max(1, block // 10))
    return {
        s.n: {
            "agentgate_p50_us": percentile(s.ours_ns, 0.5),
            "agentgate_p99_us": percentile(s.ours_ns, 0.99),
            "agentgate_p50_us_calls_sorted_by_tool": percentile(s.sorted_ns, 0.5),
            "cedar_p50_us": percentile(s.theirs_ns, 0.5),
            "cedar_p99_us": percentile(s.theirs_ns, 0.99),
        }
        for s in setups
    }


def lint_seconds(n: int, repeats: int) -> float:
    text = agentgate_policy(n)
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        findings = lint(parse_policy(text, source="bench.yaml"))
        times.append(time.perf_counter() - t0)
        assert findings == ()
    return statistics.median(times)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer calls, for a smoke run")
    parser.add_argument("--json", action="store_true", help="(the JSON line is always printed last)")
    args = parser.parse_args()
    rounds = 4 if args.quick else 40
    results = measure(rounds, 250, random.Random(7))
    figures: dict[str, float] = {}
    print(f"{'rules':>6} {'agentgate p50':>14} {'p99':>8} {'cedar p50':>10} {'p99':>8} {'ratio p50':>10}")
    for n in SIZES:
        m = results[n]
        ratio = m["agentgate_p50_us"] / m["cedar_p50_us"]
        print(
            f"{n:>6} {m['agentgate_p50_us']:>11.2f} us {m['agentgate_p99_us']:>8.2f} "
            f"{m['cedar_p50_us']:>7.2f} us {m['cedar_p99_us']:>8.2f} {ratio:>10.3f}"
        )
        for key, value in m.items():
            figures[f"{key}_{n}"] = round(value, 3)
        figures[f"p50_ratio_vs_cedar_{n}"] = round(ratio, 4)
    flat = figures["agentgate_p50_us_1000"] / figures["agentgate_p50_us_10"]
    figures["flatness_p50_1000_over_10"] = round(flat, 3)
    lint_s = lint_seconds(1000, 1 if args.quick else 3)
    figures["load_and_lint_1000_rules_s"] = round(lint_s, 4)
    print(f"agentgate p50 at 1,000 rules / at 10 rules: {flat:.3f}")
    sorted_flat = figures["agentgate_p50_us_calls_sorted_by_tool_1000"] / figures["agentgate_p50_us_10"]
    figures["flatness_p50_1000_over_10_calls_sorted_by_tool"] = round(sorted_flat, 3)
    print(f"  the same, with the calls ordered by tool (warm caches): {sorted_flat:.3f}")
    print(f"load + lint of a 1,000-rule policy: {lint_s:.3f} s")
    goals = {
        **{
            f"p50_ratio_vs_cedar_{n}": {
                "value": figures[f"p50_ratio_vs_cedar_{n}"],
                "limit": 0.5,
                "better": "lower",
            }
            for n in SIZES
        },
        "flatness_p50_1000_over_10": {
            "value": figures["flatness_p50_1000_over_10"],
            "limit": 1.5,
            "better": "lower",
        },
        "load_and_lint_1000_rules_s": {
            "value": figures["load_and_lint_1000_rules_s"],
            "limit": 1.0,
            "better": "lower",
        },
    }
    print(json.dumps({"benchmark": "policy", "figures": figures, "goals": goals}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
