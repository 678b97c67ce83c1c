"""Authority engine benchmark: decisions over a 3-link chain against biscuit-python 0.4.0.

Measured side by side in one process and one run, one sample of each contender in turn (so that
machine load hits every contender alike), with the garbage collector off while timing:

- floor: one Ed25519 verification of the same bytes with PyNaCl (the library agentgate uses)
  and with ``cryptography`` (to justify the choice);
- biscuit: ``Biscuit.from_base64`` (parse + verify 3 blocks) and authorizing one request with
  an ``AuthorizerBuilder``, over a 3-block token equivalent to the chain (the same right, amount
  and currency limits and lifetimes per block; the goals use it), and, for comparison only, over
  a lighter 3-block token (amount limits and one expiry) that this benchmark used before;
- cold decision: nothing cached (chain cache and did:key cache empty), the invocation decoded
  from its wire form (``agi1.PAYLOAD.SIGNATURE``, as the gateway receives it: the only path to a
  decision with an invocation signature), chain parsed and 3 link
  signatures verified, invocation (holder) signature verified, revocation + nonce in SQLite. The
  trust anchor's key is decoded once when the verifier is configured (``Authority``), as
  biscuit's root ``PublicKey`` is built before its timing; the other three did:keys (two link
  issuers and the holder) are decoded in every cold sample;
- warm decision: chain cached by token; the fresh invocation decoded from its wire form (biscuit
  is timed from its base64 token too), its signature, call binding, times, coverage, revocation
  and nonce still checked on every decision. For comparison only, the same warm decision of an
  ``Invocation`` object already decoded (``warm_decision_from_object``, what this benchmark timed
  before review R32) and the decoding alone (``invocation_decode``);
- store statement: the one SQLite statement of every decision alone (revocation check of the
  3 links + nonce insert, WAL, synchronous=NORMAL), to show how much of a decision it is.

After these, kept apart so that they cannot warm the cold samples above, a breakdown pass times
the parts of cold decisions from inside them (Ed25519 verification, did:key decoding, parsing the
chain, link checks, the store statement; the rest by difference), one biscuit sample between
decisions as above, and cold decisions with the did:key cache kept (a new chain between
principals whose keys were decoded before; for comparison only).

Goals: cold p50 <= 1.25 x biscuit p50, warm p50 <= 0.5 x biscuit p50.
Run: ``.venv/bin/python benchmarks/authority.py [--quick] [--json]``.
"""

from __future__ import annotations

import argparse
import datetime
import gc
import json
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this tree's agentgate, not an installed one

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from agentgate.authority import (
    Authority,
    Budget,
    ChainCache,
    GrantRepository,
    Invocation,
    _chain_findings,
    _decision,
    _signatures,
    delegate,
    issue,
)
from agentgate.authority._decision import _decide
from agentgate.authority._grant import DEFAULT_SKEW, GRANT_CONTEXT
from agentgate.authority._signatures import _KEY_CACHE
from agentgate.capabilities import Call
from agentgate.keys import SigningKey
from agentgate.store import SQLiteStore


def _percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _rfc3339(t: int) -> str:
    return datetime.datetime.fromtimestamp(t, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _biscuit_setup(now: int, *, minimal: bool = False) -> Callable[[], None]:
    """A biscuit token equivalent to the agentgate chain: same right, constraints and lifetimes.

    Authority block: the right on ``tool:payments.refund``/``invoke``, ``amount <= 500`` and
    ``currency in {EUR, USD}``, valid from ``now`` for 1 h; two attenuation blocks narrow it to
    ``amount <= 100``, ``currency = EUR`` (30 min) and ``amount <= 60`` (10 min), as the three
    links do. Each run parses and verifies the token (3 block signatures) and authorizes one
    request (the same call: amount 50 EUR at ``now``). Biscuit checks no holder signature, no
    revocation and no replay.

    ``minimal=True``: a lighter 3-block token, for comparison only (the one this benchmark used
    before): the right, one expiry, and only the amount limits in the attenuation blocks.
    """
    from biscuit_auth import AuthorizerBuilder, Biscuit, BiscuitBuilder, BlockBuilder, KeyPair

    def block(limit: int, currencies: str, expires: int) -> str:
        if minimal:
            return f'check if resource("tool:payments.refund"), amount($a), $a <= {limit};'
        return (
            f'check if resource("tool:payments.refund"), operation("invoke"), amount($a), $a <= {limit}, '
            f"currency($c), {currencies}.contains($c);"
            f"check if time($t), $t >= {_rfc3339(now)}, $t < {_rfc3339(expires)};"
        )

    root = KeyPair()
    token = (
        BiscuitBuilder(
            'right("tool:payments.refund", "invoke");'
            + (f"check if time($t), $t < {_rfc3339(now + 3600)};" if minimal else "")
            + block(500, '{"EUR", "USD"}', now + 3600)
        )
        .build(root.private_key)
        .append(BlockBuilder(block(100, '{"EUR"}', now + 1800)))
        .append(BlockBuilder(block(60, '{"EUR"}', now + 600)))
        .to_base64()
    )
    public = root.public_key

    def policy(amount: int) -> str:
        return (
            f'resource("tool:payments.refund"); operation("invoke"); amount({amount}); currency("EUR"); '
            f"time({_rfc3339(now)}); allow if right($r, $op), resource($r), operation($op);"
        )

    def authorize(source: str) -> None:
        parsed = Biscuit.from_base64(token, public)
        builder = AuthorizerBuilder(source)
        limits = builder.limits()  # type: ignore[attr-defined]  # in 0.4.0, not in its __init__.pyi
        limits.max_time = datetime.timedelta(milliseconds=100)  # default 1 ms trips under machine load
        builder.set_limits(limits)  # type: ignore[attr-defined]  # likewise
        builder.build(parsed).authorize()

    allowed = policy(50)
    authorize(allowed)
    try:  # the token must be as narrow as the chain: 70 is within the first two blocks, not the third
        authorize(policy(70))
    except Exception:  # biscuit_auth raises its own AuthorizationError
        pass
    else:
        raise AssertionError("the biscuit token allowed amount 70; it is not equivalent to the chain")

    def run() -> None:
        authorize(allowed)

    return run


PARTS = {
    "signatures": "Ed25519 verifications (3 links + holder)",
    "did_keys": "did:key decoding (2 issuers + holder, twice)",
    "parse": "parsing the 3 links (parse_chain)",
    "links": "link checks (parents, holders, attenuation)",
    "store": "store statement (revocation + nonce)",
    "decode": "decoding the invocation's wire form",
    "rest": "the rest (invocation, call, coverage, decision)",
}


@contextmanager
def _timing_parts(repo: GrantRepository, spent: dict[str, int]) -> Iterator[None]:
    """While active, time spent in the parts of a decision is added to ``spent`` (ns)."""

    def timed(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(*args: Any) -> Any:
            start = time.perf_counter_ns()
            try:
                return fn(*args)
            finally:
                spent[name] = spent.get(name, 0) + time.perf_counter_ns() - start

        return wrapper

    patches = [
        (_signatures, "_sign_open", "signatures"),
        (_signatures, "did_public_key", "did_keys"),
        (_decision, "parse_chain", "parse"),
        (_chain_findings, "first_link_finding", "links"),
        (repo, "consume_nonce", "store"),
    ]
    originals = [(owner, attr, getattr(owner, attr)) for owner, attr, _ in patches]
    for owner, attr, name in patches:
        setattr(owner, attr, timed(name, getattr(owner, attr)))
    try:
        yield
    finally:
        for owner, attr, original in originals:
            if owner is repo:
                delattr(repo, attr)
            else:
                setattr(owner, attr, original)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="short run (fewer rounds)")
    parser.add_argument("--json", action="store_true", help="(the JSON line is always printed last)")
    args = parser.parse_args(argv)
    rounds, per_round = (5, 100) if args.quick else (20, 250)

    root, alice, bob, carol = (SigningKey.generate() for _ in range(4))
    now = int(time.time())
    c1 = issue(root, alice.did, ["tool:payments.refund?amount<=500&currency=EUR|USD"], ttl=3600,
               budget=Budget(1_000_000), now=now)  # fmt: skip
    c2 = delegate(c1, alice, bob.did, ["tool:payments.refund?amount<=100&currency=EUR"], ttl=1800, now=now)
    chain = delegate(c2, bob, carol.did, ["tool:payments.refund?amount<=60&currency=EUR"], ttl=600, now=now)
    call = Call.tool("payments.refund", {"amount": 50, "currency": "EUR"})

    tmp = tempfile.mkdtemp(prefix="agentgate-bench-")
    store = SQLiteStore(Path(tmp) / "bench.db")
    repo = GrantRepository(store)
    authority = Authority(repo, root.public)
    anchors = authority.anchors

    message = GRANT_CONTEXT + chain.tip.payload
    signature = chain.tip.signature
    nacl_key = bob.public._verifier
    crypto_key = Ed25519PublicKey.from_public_bytes(bob.public.raw)
    biscuit = _biscuit_setup(now)
    biscuit_minimal = _biscuit_setup(now, minimal=True)

    def wire() -> str:
        """A fresh invocation in the wire form a decision starts from (signed outside the timing)."""
        return Invocation.sign(carol, chain.token, call, now=now).encode()

    def warm_sample() -> float:
        text = wire()
        start = time.perf_counter_ns()
        decision = authority.decide(Invocation.decode(text, chain.token, call), now=now)
        elapsed = time.perf_counter_ns() - start
        assert decision.allowed, decision.reasons
        return elapsed / 1000

    def warm_object_sample() -> float:
        inv = Invocation.sign(carol, chain.token, call, now=now)
        start = time.perf_counter_ns()
        decision = authority.decide(inv, now=now)
        elapsed = time.perf_counter_ns() - start
        assert decision.allowed, decision.reasons
        return elapsed / 1000

    def decode_sample() -> float:
        text = wire()
        start = time.perf_counter_ns()
        Invocation.decode(text, chain.token, call)
        return (time.perf_counter_ns() - start) / 1000

    def cold_sample() -> float:
        text = wire()
        _KEY_CACHE.clear()
        cache = ChainCache()
        start = time.perf_counter_ns()
        inv = Invocation.decode(text, chain.token, call)
        decision = _decide(inv, repo, anchors, None, now, DEFAULT_SKEW, cache)
        elapsed = time.perf_counter_ns() - start
        assert decision.allowed, decision.reasons
        return elapsed / 1000

    def timed(fn: Callable[[], object]) -> Callable[[], float]:
        def sample() -> float:
            start = time.perf_counter_ns()
            fn()
            return (time.perf_counter_ns() - start) / 1000

        return sample

    counter = iter(range(10**9))

    def store_sample() -> float:
        nonce = f"{next(counter):032x}"
        start = time.perf_counter_ns()
        status = repo.consume_nonce("did:key:bench", nonce, now + 60, chain.ids)
        elapsed = time.perf_counter_ns() - start
        assert status == "fresh"
        return elapsed / 1000

    contenders: dict[str, Callable[[], float]] = {
        "floor_pynacl_verify": timed(lambda: nacl_key.verify(message, signature)),
        "floor_cryptography_verify": timed(lambda: crypto_key.verify(signature, message)),
        "biscuit_verify_authorize": timed(biscuit),
        "biscuit_minimal_verify_authorize": timed(biscuit_minimal),
        "cold_decision": cold_sample,
        "warm_decision": warm_sample,
        "warm_decision_from_object": warm_object_sample,
        "invocation_decode": decode_sample,
        "store_statement": store_sample,
    }
    samples: dict[str, list[float]] = {name: [] for name in contenders}
    authority.decide(Invocation.sign(carol, chain.token, call, now=now), now=now)  # warm the cache
    gc.disable()
    try:
        for _ in range(rounds):
            for _ in range(per_round):  # one sample of each in turn: load spikes hit all alike
                for name, sample in contenders.items():
                    samples[name].append(sample())
            gc.collect()
        # Breakdown pass: cold decisions timed from inside, and with the did:key cache kept.
        parts: dict[str, list[float]] = {name: [] for name in PARTS}
        known_keys: list[float] = []
        for i in range(rounds * per_round // 4):
            spent: dict[str, int] = {}
            biscuit()
            text = wire()
            _KEY_CACHE.clear()
            with _timing_parts(repo, spent):
                start = time.perf_counter_ns()
                inv = Invocation.decode(text, chain.token, call)
                # decode checks the holder's did:key by decoding it: counted under did_keys
                spent["decode"] = time.perf_counter_ns() - start - spent.get("did_keys", 0)
                assert _decide(inv, repo, anchors, None, now, DEFAULT_SKEW, ChainCache()).allowed
                total = time.perf_counter_ns() - start
            for name in PARTS:
                parts[name].append((spent[name] if name != "rest" else total - sum(spent.values())) / 1000)
            biscuit()
            text = wire()
            start = time.perf_counter_ns()
            inv = Invocation.decode(text, chain.token, call)
            assert _decide(inv, repo, anchors, None, now, DEFAULT_SKEW, ChainCache()).allowed
            known_keys.append((time.perf_counter_ns() - start) / 1000)
            if i % per_round == 0:
                gc.collect()
    finally:
        gc.enable()
    repo.close()
    store.close()
    shutil.rmtree(tmp, ignore_errors=True)

    figures: dict[str, float] = {}
    print(f"{'measurement':34} {'p50 us':>9} {'p99 us':>9} {'n':>6}")
    for name, values in samples.items():
        p50, p99 = statistics.median(values), _percentile(values, 0.99)
        figures[f"{name}_p50_us"] = round(p50, 1)
        figures[f"{name}_p99_us"] = round(p99, 1)
        print(f"{name:34} {p50:9.1f} {p99:9.1f} {len(values):6d}")
    biscuit_p50 = figures["biscuit_verify_authorize_p50_us"]
    cold_ratio = figures["cold_decision_p50_us"] / biscuit_p50
    warm_ratio = figures["warm_decision_p50_us"] / biscuit_p50
    minimal_p50 = figures["biscuit_minimal_verify_authorize_p50_us"]
    figures["cold_over_biscuit_minimal"] = round(figures["cold_decision_p50_us"] / minimal_p50, 3)
    figures["warm_over_biscuit_minimal"] = round(figures["warm_decision_p50_us"] / minimal_p50, 3)
    figures["cold_over_biscuit"] = round(cold_ratio, 3)
    figures["warm_over_biscuit"] = round(warm_ratio, 3)
    figures["warm_from_object_over_biscuit"] = round(
        figures["warm_decision_from_object_p50_us"] / biscuit_p50, 3
    )
    # A cold decision verifies 4 signatures (3 links + the holder's invocation): its floor.
    figures["cold_signature_floor_over_biscuit"] = round(
        4 * figures["floor_pynacl_verify_p50_us"] / biscuit_p50, 3
    )
    # What no implementation of these checks can skip: the signatures plus the store statement.
    floor, statement = figures["floor_pynacl_verify_p50_us"], figures["store_statement_p50_us"]
    figures["cold_over_its_floor"] = round(figures["cold_decision_p50_us"] / (4 * floor + statement), 3)
    figures["warm_over_its_floor"] = round(figures["warm_decision_p50_us"] / (floor + statement), 3)
    figures["cryptography_over_pynacl"] = round(
        figures["floor_cryptography_verify_p50_us"] / figures["floor_pynacl_verify_p50_us"], 3
    )
    print(
        f"cold / biscuit = {cold_ratio:.3f} (goal <= 1.25); warm / biscuit = {warm_ratio:.3f} (goal <= 0.5)"
    )
    print(
        f"warm from a decoded Invocation object (comparison only: the wire form must be decoded) / "
        f"biscuit = {figures['warm_from_object_over_biscuit']:.3f}"
    )
    print(
        f"against the lighter biscuit token: cold {figures['cold_over_biscuit_minimal']:.3f}, "
        f"warm {figures['warm_over_biscuit_minimal']:.3f}"
    )
    print(f"cryptography / PyNaCl verify = {figures['cryptography_over_pynacl']:.3f}")
    print(f"4 PyNaCl verifications alone / biscuit = {figures['cold_signature_floor_over_biscuit']:.3f}")
    print(f"inside cold decisions (breakdown pass, {len(known_keys)} decisions), p50 of each part:")
    for name, label in PARTS.items():
        p50 = statistics.median(parts[name])
        figures[f"cold_part_{name}_p50_us"] = round(p50, 1)
        print(f"  {label:50} {p50:7.1f} us {p50 / floor:5.2f} floors")
    figures["cold_decision_known_keys_p50_us"] = round(statistics.median(known_keys), 1)
    print(
        f"cold decision with the did:key cache kept: p50 {figures['cold_decision_known_keys_p50_us']:.1f} us"
    )
    print(
        f"over their own floor (signatures + store statement): cold {figures['cold_over_its_floor']:.3f}, "
        f"warm {figures['warm_over_its_floor']:.3f}"
    )
    result = {
        "benchmark": "authority",
        "figures": figures,
        "goals": {
            "cold_decision_over_biscuit": {"value": round(cold_ratio, 3), "limit": 1.25, "better": "lower"},
            "warm_decision_over_biscuit": {"value": round(warm_ratio, 3), "limit": 0.5, "better": "lower"},
        },
    }
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
