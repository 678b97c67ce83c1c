"""Conformance: every RFC 6962 / RFC 9162 case in ../shared/vectors/rfc6962 gives its expected result."""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest

from agentgate.audit.merkle import (
    EMPTY_ROOT,
    RootAccumulator,
    consistency_proof,
    inclusion_proof,
    leaf_hash,
    node_hash,
    verify_consistency,
    verify_inclusion,
)
from agentgate.errors import TamperDetected


def root_of(leaves: Iterable[bytes]) -> bytes:
    """The Merkle tree hash of the given leaf hashes (``RootAccumulator`` over them)."""
    acc = RootAccumulator()
    for leaf in leaves:
        acc.add(leaf)
    return acc.root()


VECTORS = Path(__file__).resolve().parents[1].parent / "shared" / "vectors" / "rfc6962"
CASES = sorted(VECTORS.rglob("*.json"))
SAMPLE_HEX = "|00|10|2021|3031|40414243|5051525354555657|606162636465666768696a6b6c6d6e6f"
SAMPLE_LEAVES = [bytes.fromhex(h) for h in SAMPLE_HEX.split("|")]


def _b64(value: str | None) -> bytes:
    return base64.b64decode(value or "")


def _proof(case: dict[str, Any]) -> list[bytes]:
    return [_b64(p) for p in case["proof"] or []]


def _run(path: Path) -> None:
    case = json.loads(path.read_text())
    if "leafIdx" in case:
        leaf, root = _b64(case["leafHash"]), _b64(case["root"])
        verify_inclusion(leaf, case["leafIdx"], case["treeSize"], _proof(case), root)
    else:
        root1, root2 = _b64(case["root1"]), _b64(case["root2"])
        verify_consistency(case["size1"], case["size2"], _proof(case), root1, root2)


def test_all_196_cases_are_present() -> None:
    assert len(CASES) == 196


@pytest.mark.parametrize("path", CASES, ids=[str(p.relative_to(VECTORS)) for p in CASES])
def test_vector_gives_expected_result(path: Path) -> None:
    want_err = json.loads(path.read_text())["wantErr"]
    if want_err:
        with pytest.raises(TamperDetected):
            _run(path)
    else:
        _run(path)


def _naive_root(leaves: list[bytes]) -> bytes:
    if not leaves:
        return EMPTY_ROOT
    if len(leaves) == 1:
        return leaves[0]
    k = 1 << ((len(leaves) - 1).bit_length() - 1)
    return node_hash(_naive_root(leaves[:k]), _naive_root(leaves[k:]))


def test_generated_proofs_verify_for_every_size_and_index() -> None:
    leaves = [leaf_hash(i.to_bytes(4, "big")) for i in range(40)]
    roots = [_naive_root(leaves[:n]) for n in range(41)]
    for n in range(1, 41):
        assert root_of(leaves[:n]) == roots[n]
        for i in range(n):
            verify_inclusion(leaves[i], i, n, inclusion_proof(leaves, i, n), roots[n])
        for m in range(1, n + 1):
            verify_consistency(m, n, consistency_proof(leaves, m, n), roots[m], roots[n])


def test_generated_proofs_match_the_rfc_sample_tree() -> None:
    leaves = [leaf_hash(d) for d in SAMPLE_LEAVES]
    happy = json.loads((VECTORS / "consistency" / "2" / "happy-path.json").read_text())
    assert consistency_proof(leaves, happy["size1"], happy["size2"]) == _proof(happy)
    assert root_of(leaves[: happy["size2"]]) == _b64(happy["root2"])


def test_wrong_root_is_rejected() -> None:
    leaves = [leaf_hash(bytes([i])) for i in range(7)]
    with pytest.raises(TamperDetected):
        verify_inclusion(leaves[3], 3, 7, inclusion_proof(leaves, 3, 7), root_of(leaves[:6]))


def test_streaming_root_of_a_million_leaves_uses_logarithmic_memory() -> None:
    acc = RootAccumulator()
    block = hashlib.sha256(b"x").digest()
    deepest = 0
    for _ in range(1_000_000):
        acc.add(block)
        deepest = max(deepest, len(acc._stack))
    assert acc.size == 1_000_000
    assert deepest <= 20  # one pending subtree per bit of the size
    # 1,000,000 identical leaves: each perfect subtree of height h has the same hash, so the root
    # can be built independently from the binary expansion of the size.
    level = [block]
    for _ in range(20):
        level.append(node_hash(level[-1], level[-1]))
    parts = [level[h] for h in range(20, -1, -1) if 1_000_000 >> h & 1]
    expected = parts[-1]
    for part in reversed(parts[:-1]):
        expected = node_hash(part, expected)
    assert acc.root() == expected


def test_extend_in_any_pieces_equals_adding_one_leaf_at_a_time() -> None:
    import random

    rng = random.Random(9)
    leaves = [leaf_hash(i.to_bytes(4, "big")) for i in range(700)]
    for _ in range(8):
        acc = RootAccumulator()
        position = 0
        while position < len(leaves):
            step = rng.choice([1, 2, 3, 5, 16, 31, 64, 100, 257])
            acc.extend(leaves[position : position + step])
            position += step
            assert acc.size == min(position, len(leaves))
            assert acc.root() == _naive_root(leaves[: acc.size])
