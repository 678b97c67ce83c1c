"""A checkpoint signs only a size that is a whole number, written in decimal.

Until review R90 ``Checkpoint.text`` checked only ``0 <= size <= 2**64-1`` and wrote the size as
it prints: ``sign_checkpoint`` signed a size of ``True``, ``1.0``, ``Fraction(3, 2)`` or
``Decimal("1E+2")`` as the line ``True``, ``1.0``, ``3/2`` or ``1E+2``, a note that agentgate's
own ``open_checkpoint`` then refused as not a decimal number. Now such a size is ``InputError``
naming it, and nothing is signed; an integer (a numpy one too) is written in decimal.
"""

from __future__ import annotations

from decimal import Decimal
from fractions import Fraction

import numpy as np
import pytest

from agentgate.audit import Checkpoint, open_checkpoint, sign_checkpoint
from agentgate.errors import InputError
from agentgate.keys import SigningKey

KEY = SigningKey(b"\x07" * 32)
ORIGIN = "r90.example/audit"
ROOT = b"\x11" * 32


@pytest.mark.parametrize("size", [True, False, 1.0, Fraction(3, 2), Decimal("1E+2"), "5"], ids=repr)
def test_a_size_that_is_not_a_whole_number_is_refused(size: object) -> None:
    with pytest.raises(InputError) as refused:
        sign_checkpoint(Checkpoint(ORIGIN, size, ROOT), KEY)  # type: ignore[arg-type]
    assert str(refused.value).startswith("checkpoint: size must be a whole number (an int), got ")


def test_a_root_that_is_not_bytes_is_refused() -> None:
    with pytest.raises(InputError, match="32-byte root"):
        sign_checkpoint(Checkpoint(ORIGIN, 3, "x" * 32), KEY)  # type: ignore[arg-type]


@pytest.mark.parametrize("size", [0, 3, np.int64(3), 2**64 - 1], ids=repr)
def test_a_whole_size_is_signed_in_decimal_and_opens(size: int) -> None:
    note = sign_checkpoint(Checkpoint(ORIGIN, size, ROOT), KEY)
    assert note.splitlines()[1] == str(int(size))
    assert open_checkpoint(note, KEY.public) == Checkpoint(ORIGIN, int(size), ROOT)
