"""``ProofBundle.text`` refuses a ``set`` as the proof: its hashes are in no order.

Review R91b let ``proof`` be any iterable, and a ``set`` of the right hashes was written in
whatever order it iterates, a bundle that ``verify-proof`` finds INVALID, without an error where
it was made. It is now ``InputError`` naming ``proof``, nothing written.
"""

from __future__ import annotations

import pytest

from agentgate.audit import ProofBundle, leaf_hash
from agentgate.errors import InputError

HASHES = [leaf_hash(bytes([n])) for n in range(3)]


@pytest.mark.parametrize("proof", [set(HASHES), frozenset(HASHES), dict.fromkeys(HASHES).keys()])
def test_a_proof_in_no_order_is_refused(proof: object) -> None:
    bundle = ProofBundle(0, b'{"index":0}', proof, "note")  # type: ignore[arg-type]
    with pytest.raises(InputError) as refused:
        bundle.text()
    assert str(refused.value) == (
        f"proof bundle: proof must be its hashes in order, leaf to root, got {type(proof).__name__}"
    )


def test_a_list_tuple_or_generator_is_still_written() -> None:
    texts = {
        ProofBundle(0, b'{"index":0}', given, "note").text()  # type: ignore[arg-type]
        for given in (HASHES, tuple(HASHES), (h for h in HASHES))
    }
    assert len(texts) == 1
