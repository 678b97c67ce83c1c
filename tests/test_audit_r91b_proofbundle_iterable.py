"""``ProofBundle.text`` writes what ``ProofBundle.parse`` reads, a proof given as any iterable.

Review R91 made ``text`` refuse a proof that is no ``Sequence`` (a generator, a numpy array), both
written before, and a hash that is not 32 bytes, which ``parse`` reads: ``parse(t).text()`` no
longer wrote a bundle ``parse`` had accepted, and a bundle that does not verify (as a negative
test writes one) could not be written at all. A hash of any length but 0 (its line would be the
blank line that ends the proof) is written again, and verifying it is INVALID.
"""

from __future__ import annotations

import base64

import pytest
import test_audit_r91_proofbundle_text
from test_audit_r91_proofbundle_text import _with
from test_audit_tamper import KEY, ORIGIN

from agentgate.audit import ProofBundle, verify_bundle
from agentgate.errors import TamperDetected

bundle = test_audit_r91_proofbundle_text.bundle  # the fixture, shared


def test_a_proof_given_as_a_generator_is_written_and_verifies(bundle: ProofBundle) -> None:
    written = _with(bundle, proof=(h for h in bundle.proof)).text()
    assert written == bundle.text()
    assert verify_bundle(written, KEY.public, ORIGIN)[0].index == 1


def test_a_proof_given_as_a_numpy_array_is_written_and_verifies(bundle: ProofBundle) -> None:
    numpy = pytest.importorskip("numpy")
    written = _with(bundle, proof=numpy.array(list(bundle.proof), dtype=object)).text()
    assert written == bundle.text()


def test_a_bundle_parse_reads_with_a_short_hash_is_written_again_and_is_invalid(bundle: ProofBundle) -> None:
    short = bundle.proof[0][:31]
    text = _with(bundle, proof=(short, *bundle.proof[1:])).text()
    assert base64.b64encode(short).decode() in text.split("\n")
    parsed = ProofBundle.parse(text)
    assert parsed.proof[0] == short and parsed.text() == text
    with pytest.raises(TamperDetected, match="proof hash 0 is 31 bytes, not 32"):
        verify_bundle(text, KEY.public, ORIGIN)
