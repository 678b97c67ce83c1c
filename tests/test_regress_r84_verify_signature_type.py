"""Review R84 (regression): ``PublicKey.verify`` refused a message that is not ``bytes`` up front,
but read the signature's length before its type, so a ``str`` or ``list`` signature of any length
but 64 was an ``InvalidSignature`` (``is_valid`` False) where the docstring promises
``InputError`` whenever the signature is not ``bytes``. Its type is now checked first too, and
the error names which of the two it is."""

from __future__ import annotations

import pytest

from agentgate.errors import InputError, InvalidSignature
from agentgate.keys import SigningKey

KEY = SigningKey.generate()
SIGNATURE = KEY.sign(b"m")

NOT_BYTES = {
    "str-of-10": "x" * 10,
    "str-of-64": "x" * 64,
    "list-of-3": [0] * 3,
    "list-of-64": list(SIGNATURE),
    "int": 5,
    "none": None,
    "bytearray-valid": bytearray(SIGNATURE),
}


@pytest.mark.parametrize("case", sorted(NOT_BYTES))
def test_a_signature_that_is_not_bytes_is_an_input_error_whatever_its_length(case: str) -> None:
    signature = NOT_BYTES[case]
    got = type(signature).__name__
    with pytest.raises(InputError, match=f"^the signature must be bytes, got {got}$"):
        KEY.public.verify(b"m", signature)  # type: ignore[arg-type]
    with pytest.raises(InputError, match=f"^the signature must be bytes, got {got}$"):
        KEY.public.is_valid(b"m", signature)  # type: ignore[arg-type]


def test_a_message_that_is_not_bytes_is_named_before_the_signature() -> None:
    with pytest.raises(InputError, match=r"^the message must be bytes, got bytearray$"):
        KEY.public.verify(bytearray(b"m"), "x")  # type: ignore[arg-type]


def test_bytes_of_the_wrong_length_or_value_are_still_an_invalid_signature() -> None:
    with pytest.raises(InvalidSignature, match="64 bytes, got 10"):
        KEY.public.verify(b"m", b"x" * 10)
    assert not KEY.public.is_valid(b"n", SIGNATURE)
    assert KEY.public.is_valid(b"m", SIGNATURE)
